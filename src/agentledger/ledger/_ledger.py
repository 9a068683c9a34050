"""``Ledger``: the SQL store of conversations, runs, steps and tool executions."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError

from .._ids import Clock, new_id, utc_now
from .._text import check_storable
from ..context import Compaction
from ..errors import (
    ConfigurationError,
    LedgerCorruptError,
    LedgerOpenError,
    NotFoundError,
    SchemaVersionError,
)
from ..messages import Message, Messages, MessageStore
from ..recording import SPAWNED_BY, RunResult
from ..state import AgentState, AgentStatus
from ..steps import StepExecution, ToolExecution
from ..usage import Spend
from . import _migrate
from ._checksum import mismatches, sealed, verify
from ._compiled import hot
from ._engine import (
    Connections,
    EngineSettings,
    Synchronous,
    is_busy,
    make_engine,
    normalize_url,
    sqlite_path,
    with_retries,
)
from ._rows import (
    compaction_of,
    conversation_record,
    in_sequence,
    message_of,
    run_record,
    usage_of,
)
from ._transactions import (
    RunTransactions,
    end_run,
    load_steps,
    rebuild_state,
    recorded_totals,
    stale_condition,
    stale_query,
    store_of,
)
from .records import ConversationRecord, RunRecord, RunTree, SearchHit
from .tables import (
    agent_runs,
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    metadata,
    step_executions,
    tool_executions,
)

T = TypeVar("T")

DEFAULT_LEASE_SECONDS = 60.0
_ABANDONED = "abandoned by recover(): its process stopped before the run ended"
_COLUMNS = ", ".join(f"m.{c.name}" for c in conversation_messages.columns)


class Ledger:
    """Conversations, runs, steps and tool executions in SQLite or PostgreSQL.

    ``Ledger.open(url)`` connects and migrates the database to the newest schema. A ledger is
    also a :class:`agentledger.Recorder`: give it to ``AgentBuilder.with_ledger`` and every
    ``Agent.run`` is recorded as a sequence of short transactions.
    """

    def __init__(
        self, engine: Engine, *, settings: EngineSettings, clock: Clock, lease_seconds: float
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.clock = clock
        self._connections = Connections(engine)
        self._runs = RunTransactions(self._connections, settings, clock, lease_seconds)
        self._cache = _ConversationCache()

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        migrate: bool = True,
        verify: bool = False,
        clock: Clock = utc_now,
    ) -> Ledger:
        """Open the ledger at ``url`` (a file path, a ``sqlite:///`` URL or a ``postgresql://``
        URL), creating and migrating it as needed.

        With ``migrate=False`` a database that is not at the newest schema (or a SQLite file
        that does not exist) is refused instead. A database migrated by a newer agentledger is
        always refused. Opening a SQLite file reads the first page of every table, which finds
        most damage at once; ``verify=True`` also runs ``PRAGMA integrity_check`` over the whole
        file (its time grows with the file's size).
        """
        settings = EngineSettings(synchronous=synchronous, busy_timeout=busy_timeout)
        normalized = normalize_url(url)
        path = sqlite_path(normalized)
        fresh = path is not None and not path.exists()
        if fresh and not migrate:
            raise SchemaVersionError(
                f"no ledger at {path} (an empty database is at no schema revision): open it "
                "with migrate=True (the default), or create it with `agentledger db upgrade`"
            )
        engine = make_engine(normalized, settings)
        try:
            with_retries(
                settings,
                lambda: _prepare(engine, migrate=migrate, verify=verify),
                what=f"opening {engine.url.render_as_string(hide_password=True)}",
            )
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, settings=settings, clock=clock, lease_seconds=lease_seconds)

    @property
    def url(self) -> str:
        """The database URL, without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self._runs.close()
        self._connections.close()
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.url!r})"

    # --- conversations ------------------------------------------------------------------------

    def create_conversation(
        self,
        *,
        title: str | None = None,
        kind: str = "main",
        parent_run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> ConversationRecord:
        check_storable(title, "the conversation's title")
        check_storable(metadata, "the conversation's metadata")
        now = self.clock()
        new = conversation_id or new_id()
        row = {
            "id": new,
            "kind": kind,
            "title": title,
            "parent_run_id": parent_run_id,
            "version": 0,
            "created_at": now,
            "updated_at": now,
            "metadata": metadata or None,
        }

        def work() -> None:
            with self._connections.write() as conn:
                conn.execute(insert(conversations), sealed(conversations, row))

        with_retries(self.settings, work, what="creating a conversation")
        return self.conversation(new)

    def conversation(self, conversation_id: str) -> ConversationRecord:
        row = self._read(
            f"reading conversation {conversation_id}",
            lambda conn: (
                conn.execute(select(conversations).where(conversations.c.id == conversation_id))
                .mappings()
                .first()
            ),
        )
        if row is None:
            raise NotFoundError(
                f"no conversation {conversation_id!r} in this ledger "
                "(see `agentledger conversations`)"
            )
        return self._decode(f"conversation {conversation_id}", conversation_record, row)

    def conversations(
        self, *, kind: str | None = None, limit: int | None = None
    ) -> list[ConversationRecord]:
        """Conversations, most recently updated first."""
        query = select(conversations).order_by(
            conversations.c.updated_at.desc(), conversations.c.id.desc()
        )
        if kind is not None:
            query = query.where(conversations.c.kind == kind)
        return self._read(
            "listing conversations",
            lambda conn: [
                conversation_record(r) for r in conn.execute(query.limit(limit)).mappings()
            ],
        )

    def messages(self, conversation_id: str, section: str = "messages") -> Messages:
        """A section of a conversation as committed: by default the conversation itself (the
        messages a summary replaced are in the ``buffer`` section, the summaries in
        ``summary``; see :meth:`history` and :meth:`model_context`)."""
        return self._conversation_rows(conversation_id, lambda r: r["section"] == section)

    def history(self, conversation_id: str) -> Messages:
        """The conversation as the user saw it: every message of it in order, those a summary
        replaced included (and the summaries left out). No compaction changes it."""
        sections = (AgentState.DEFAULT_SECTION, AgentState.BUFFER_SECTION)
        return self._conversation_rows(conversation_id, lambda r: r["section"] in sections)

    def model_context(self, conversation_id: str) -> Messages:
        """The conversation as the model sees it now: the summary, then the messages still in
        its context (what a new run starts from, before its own trace)."""
        state = self.load_conversation(conversation_id)
        return state.store.select(*AgentState.INFERENCE_SECTIONS)

    def compactions(self, conversation_id: str) -> list[Compaction]:
        """Every compaction of a conversation's context, oldest first: the summaries made
        between its runs, the observation masking within them, and the failed attempts."""
        self.conversation(conversation_id)
        query = (
            select(context_compactions)
            .where(context_compactions.c.conversation_id == conversation_id)
            .order_by(context_compactions.c.created_at, context_compactions.c.id)
        )
        return self._read(
            f"reading the compactions of conversation {conversation_id}",
            lambda conn: [compaction_of(r) for r in conn.execute(query).mappings()],
        )

    def _conversation_rows(self, conversation_id: str, wanted: Callable[[Any], bool]) -> Messages:
        self.conversation(conversation_id)
        query = (
            select(conversation_messages)
            .where(conversation_messages.c.conversation_id == conversation_id)
            .order_by(conversation_messages.c.seq)
        )
        what = f"conversation {conversation_id}"

        def read(conn: Connection) -> Messages:
            # Every section is read, so that a row missing from any shows as a gap in seq.
            rows = in_sequence(conn.execute(query).mappings().all(), "seq", 0, what)
            return Messages(tuple(message_of(r) for r in rows if wanted(r)))

        return self._read(f"reading the messages of {what}", read)

    # --- runs -----------------------------------------------------------------------------------

    def run(self, run_id: str) -> RunRecord:
        row = self._read(
            f"reading run {run_id}",
            lambda conn: (
                conn.execute(select(agent_runs).where(agent_runs.c.id == run_id)).mappings().first()
            ),
        )
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in this ledger (see `agentledger runs`)")
        return self._decode(f"run {run_id}", run_record, row)

    def runs(
        self,
        conversation_id: str | None = None,
        *,
        status: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs, oldest first within a conversation, newest first across the ledger."""
        query = select(agent_runs)
        if conversation_id is not None:
            self.conversation(conversation_id)
            query = query.where(agent_runs.c.conversation_id == conversation_id).order_by(
                agent_runs.c.started_at, agent_runs.c.id
            )
        else:
            query = query.order_by(agent_runs.c.started_at.desc(), agent_runs.c.id.desc())
        if status is not None:
            query = query.where(agent_runs.c.status == status)
        return self._read(
            "listing runs",
            lambda conn: [run_record(r) for r in conn.execute(query.limit(limit)).mappings()],
        )

    def run_tree(self, run_id: str) -> RunTree:
        """The run ``run_id`` and every subagent run below it, with exclusive and inclusive
        usage. Give a root run's id for the whole tree (``RunRecord.root_run_id``)."""
        top = self.run(run_id)

        def read(conn: Connection) -> RunTree:
            rows = (
                conn.execute(
                    select(agent_runs)
                    .where(agent_runs.c.root_run_id == top.root_run_id)
                    .order_by(agent_runs.c.started_at, agent_runs.c.id)
                )
                .mappings()
                .all()
            )
            spends = _step_spends(conn, [r["id"] for r in rows])
            records = [run_record(r) for r in rows]
            children: dict[str | None, list[RunRecord]] = {}
            for record in records:
                children.setdefault(record.parent_run_id, []).append(record)

            def node(record: RunRecord, seen: frozenset[str]) -> RunTree:
                if record.id in seen:
                    raise ValueError(f"run {record.id} is its own ancestor")
                kids = tuple(node(c, seen | {record.id}) for c in children.get(record.id, ()))
                return RunTree(run=record, exclusive=spends.get(record.id, Spend()), children=kids)

            top_record = next((r for r in records if r.id == run_id), None)
            if top_record is None:
                raise ValueError(f"run {run_id} is not in the tree of its root {top.root_run_id}")
            return node(top_record, frozenset())

        return self._read(f"reading the run tree of {run_id}", read)

    def steps(self, run_id: str) -> tuple[StepExecution, ...]:
        """The run's steps, rebuilt with their tool executions and outcomes."""
        run = self.run(run_id)
        steps = self._read(f"reading the steps of run {run_id}", lambda c: load_steps(c, run_id))
        if len(steps) != run.step_count:
            raise LedgerCorruptError(
                f"run {run_id} recorded {run.step_count} steps but the ledger reads "
                f"{len(steps)}: the database file is damaged; restore it from a backup, and see "
                "`agentledger db verify`."
            )
        return steps

    def tool_executions(self, run_id: str) -> tuple[ToolExecution, ...]:
        """The run's tool executions, in the order of its steps and of each step's calls."""
        return tuple(t for e in self.steps(run_id) for t in e.step.tool_executions)

    def trace_messages(self, run_id: str) -> Messages:
        """The run's trace (tool-calling assistant messages and tool results, in order), rebuilt
        exactly from its step and tool rows, whether or not its buffer was flushed."""
        trace: tuple[Message, ...] = ()
        for execution in self.steps(run_id):
            trace += execution.step.trace_messages.root
        return Messages(trace)

    def buffer(self, run_id: str) -> Messages:
        """The run's execution buffer rows: empty once the run committed."""
        self.run(run_id)
        query = (
            select(execution_buffer_rows)
            .where(execution_buffer_rows.c.run_id == run_id)
            .order_by(execution_buffer_rows.c.seq)
        )
        what = f"the execution buffer of run {run_id}"
        return self._read(
            f"reading {what}",
            lambda conn: Messages(
                tuple(
                    message_of(r)
                    for r in in_sequence(conn.execute(query).mappings().all(), "seq", 0, what)
                )
            ),
        )

    # --- search ---------------------------------------------------------------------------------

    def search(
        self, query: str, *, conversation_id: str | None = None, limit: int = 20
    ) -> list[SearchHit]:
        """Conversation messages matching every word of ``query``, best matches first."""
        words = re.findall(r"\w+", query)
        if not words:
            return []
        if self.dialect == "sqlite":
            statement = text(
                "SELECT " + _COLUMNS + " FROM conversation_messages_fts f "
                "JOIN conversation_messages m ON m.id = f.message_id "
                "WHERE conversation_messages_fts MATCH :match "
                + ("AND f.conversation_id = :conversation_id " if conversation_id else "")
                + "ORDER BY f.rank, m.seq LIMIT :limit"
            )
            params: dict[str, Any] = {"match": " ".join(f'"{w}"' for w in words)}
        else:
            statement = text(
                "SELECT " + _COLUMNS + " FROM conversation_messages m "
                "WHERE to_tsvector('simple', m.content) @@ plainto_tsquery('simple', :match) "
                + ("AND m.conversation_id = :conversation_id " if conversation_id else "")
                + "ORDER BY ts_rank(to_tsvector('simple', m.content), "
                "plainto_tsquery('simple', :match)) DESC, m.seq LIMIT :limit"
            )
            params = {"match": " ".join(words)}
        params.update(conversation_id=conversation_id, limit=limit)
        typed = statement.columns(*conversation_messages.columns)  # JSON and times decoded
        return self._read(
            f"searching for {query!r}",
            lambda conn: [_hit(r) for r in conn.execute(typed, params).mappings()],
        )

    # --- recovery -------------------------------------------------------------------------------

    def stale_runs(self, stale_after: float | None = None) -> list[RunRecord]:
        """Runs still ``running`` whose process is gone: their conversation's lease expired (or
        another run took it), or, with ``stale_after``, they have not beaten for that long."""
        query = stale_query(self.clock(), stale_after)
        return self._read(
            "looking for stale runs",
            lambda conn: [run_record(r) for r in conn.execute(query).mappings()],
        )

    def recover(
        self, mode: Literal["abandon", "resume"] = "abandon", stale_after: float | None = None
    ) -> list[RunRecord]:
        """Mark every stale run ``interrupted``, flush its buffer and free its conversation.

        The conversations stay clean: a run's answer only ever reaches them at its commit.
        Resuming needs the agent's model and tools: that is ``Agent.recover``.
        """
        if mode != "abandon":
            raise ConfigurationError(
                "Ledger.recover can only abandon stale runs; to resume them, call "
                "Agent.recover() (or Agent.resume(run_id)) on an agent built with this ledger"
            )
        return [
            r
            for r in (self._abandon(run.id, stale_after) for run in self.stale_runs(stale_after))
            if r
        ]

    def _abandon(self, run_id: str, stale_after: float | None) -> RunRecord | None:
        def work() -> bool:
            now = self.clock()
            with self._connections.write() as conn:
                # Lock in the order claims, steps and commits do (the conversation's row, then
                # the run's), then look again: a run resumed or finished meanwhile is not stale.
                conversation_id = conn.execute(
                    select(agent_runs.c.conversation_id).where(agent_runs.c.id == run_id)
                ).scalar()
                conn.execute(
                    select(conversations.c.id)
                    .where(conversations.c.id == conversation_id)
                    .with_for_update()
                )
                still_stale = conn.execute(
                    select(agent_runs.c.id, agent_runs.c.conversation_id)
                    .join(conversations, conversations.c.id == agent_runs.c.conversation_id)
                    .where(agent_runs.c.id == run_id, stale_condition(now, stale_after))
                    .with_for_update(of=agent_runs)
                ).first()
                if still_stale is None:
                    return False
                totals = recorded_totals(
                    conn, still_stale.conversation_id, run_id, "interrupted", _ABANDONED, now
                )
                totals["stop_reason"] = None
                end_run(conn, run_id, totals, only_if_running=True)
                conn.execute(
                    delete(execution_buffer_rows).where(execution_buffer_rows.c.run_id == run_id)
                )
                conn.execute(
                    update(conversations)
                    .where(
                        conversations.c.id == still_stale.conversation_id,
                        conversations.c.lease_run_id == run_id,
                    )
                    .values(
                        lease_holder=None, lease_run_id=None, lease_expires_at=None, updated_at=now
                    )
                )
                return True

        abandoned = with_retries(self.settings, work, what=f"abandoning run {run_id}")
        return self.run(run_id) if abandoned else None

    # --- the Recorder interface ---------------------------------------------------------------

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        """The conversation's committed messages, as a state ready for a new run.

        Conversations only grow, so a handle keeps the ones it loaded and, next time, reads
        only the rows added since: loading stays as cheap at a thousand turns as at ten. What a
        summary replaced comes before everything still in the context: a load starts after
        it, and a compaction since the last load makes it read the context again.
        """
        if conversation_id is None:
            return AgentState.empty(conversation_id=new_id())

        def read(conn: Connection) -> _Cached | None:
            sql = hot(conn.dialect)
            head = sql.select(conn, _HEAD, {"conversation_id": conversation_id})
            if not head:
                return None
            last_seq = -1 if head[0]["last_seq"] is None else int(head[0]["last_seq"])
            # What a summary replaced precedes everything still in the context.
            start = 0 if head[0]["replaced"] is None else int(head[0]["replaced"]) + 1
            cached = self._cache.get(conversation_id)
            if cached is None or cached.last_seq > last_seq or cached.start != start:
                cached = _Cached(start - 1, start, MessageStore())
            if cached.last_seq < last_seq:
                after = {"conversation_id": conversation_id, "after": cached.last_seq}
                rows = sql.select(conn, _MESSAGES_AFTER, after)
                what = f"conversation {conversation_id}"
                fresh = in_sequence(rows, "seq", cached.last_seq + 1, what)
                cached = _Cached(last_seq, start, store_of(fresh, cached.store))
            return cached

        cached = self._read(f"loading conversation {conversation_id}", read)
        if cached is None:
            self.conversation(conversation_id)  # raises NotFoundError
        assert cached is not None
        self._cache.put(conversation_id, cached)
        return AgentState.empty(conversation_id=conversation_id).with_message_store(cached.store)

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        self._runs.begin_run(state, user_message=user_message, agent_name=agent_name)

    def record_step(self, before: AgentState, after: AgentState) -> None:
        self._runs.record_step(before, after)

    def commit_run(self, state: AgentState) -> None:
        self._runs.commit_run(state)

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        self._runs.fail_run(state, error)

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        return self._runs.claim_run(run_id, stale_after=stale_after)

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        self._runs.record_compaction(state, compaction, summary=summary, moved=moved)

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        # Subagent runs are resumed through their parent, whose redone spawn finds them.
        return [run.id for run in self.stale_runs(stale_after) if run.parent_run_id is None]

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        query = (
            select(agent_runs.c.id, agent_runs.c.status, agent_runs.c.metadata)
            .where(agent_runs.c.parent_run_id == parent_run_id)
            .order_by(agent_runs.c.started_at)
        )
        rows = self._read(
            f"looking for the subagent runs of {parent_run_id}",
            lambda conn: conn.execute(query).all(),
        )
        for row in rows:
            if (row.metadata or {}).get(SPAWNED_BY) == spawned_by:
                return row.id, AgentStatus(row.status)
        return None

    def run_result(self, run_id: str) -> RunResult:
        def read(conn: Connection) -> RunResult:
            row = (
                conn.execute(select(agent_runs).where(agent_runs.c.id == run_id)).mappings().first()
            )
            if row is None:
                raise NotFoundError(f"no run {run_id!r} in this ledger (see `agentledger runs`)")
            state = rebuild_state(conn, row)
            return RunResult.of(state.model_copy(update={"status": AgentStatus(row["status"])}))

        return self._read(f"reading the result of run {run_id}", read)

    # --- checking -------------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Check the whole ledger; what is wrong, one line per problem (empty: all is well).

        Every row's checksum, the positions of every conversation, buffer, run and step
        (contiguous, and as many steps as the run counted) and, on SQLite, ``PRAGMA
        integrity_check`` (pages, and indexes against their tables: a row an index lost) and
        ``foreign_key_check``. Reads the whole database: its time grows with the file.
        """
        return self._read("verifying the ledger", _verify)

    # --- reading --------------------------------------------------------------------------------

    def _read(self, what: str, read: Callable[[Connection], T]) -> T:
        """``read`` on a connection of its own: tried again while the database is locked, a
        failed database as :class:`LedgerUnavailableError`, and a row that cannot be decoded
        (a damaged file) as :class:`LedgerCorruptError`, never a half answer."""

        def work() -> T:
            with self._connections.read() as conn:
                return read(conn)

        return self._decode(what, lambda _: with_retries(self.settings, work, what=what), None)

    @staticmethod
    def _decode(what: str, decode: Callable[[Any], T], row: Any) -> T:
        try:
            return decode(row)
        except _UNDECODABLE as exc:
            raise LedgerCorruptError(
                f"{what}: a row could not be decoded ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}). The database is damaged; restore it from "
                "a backup (for SQLite, with its -wal and -shm files)."
            ) from exc


_UNDECODABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError)
"""What decoding a damaged row raises: bad JSON or UTF-8, a value out of its enum, a missing
field (pydantic's ValidationError is a ValueError)."""


def _step_spends(conn: Any, run_ids: Sequence[str]) -> dict[str, Spend]:
    """Each run's own spend, summed from its step rows (each checked against its checksum)."""
    s = step_executions.c
    spends: dict[str, Spend] = {}
    query = select(step_executions).where(s.run_id.in_(run_ids)).order_by(s.run_id, s.step_index)
    for row in conn.execute(query).mappings():
        verify(step_executions, row)
        # A step called the model when it holds the model's message; one without a cost is
        # unpriced.
        step = Spend(
            usage=usage_of(row),
            cost_usd=row["cost_usd"],
            steps=1,
            fully_priced=row["message_id"] is None or row["cost_usd"] is not None,
        )
        run_id = row["run_id"]
        spends[run_id] = spends[run_id] + step if run_id in spends else step
    return spends


@dataclass(frozen=True)
class _Cached:
    last_seq: int
    start: int
    store: MessageStore


class _ConversationCache:
    """The conversations this handle loaded, least recently used dropped first."""

    def __init__(self, size: int = 256) -> None:
        self._entries: OrderedDict[str, _Cached] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, conversation_id: str) -> _Cached | None:
        with self._lock:
            entry = self._entries.get(conversation_id)
            if entry is not None:
                self._entries.move_to_end(conversation_id)
            return entry

    def put(self, conversation_id: str, entry: _Cached) -> None:
        with self._lock:
            self._entries[conversation_id] = entry
            self._entries.move_to_end(conversation_id)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


_HEAD = select(
    conversations.c.id,
    select(func.max(conversation_messages.c.seq))
    .where(conversation_messages.c.conversation_id == bindparam("conversation_id"))
    .scalar_subquery()
    .label("last_seq"),
    select(func.max(conversation_messages.c.seq))
    .where(
        conversation_messages.c.conversation_id == bindparam("conversation_id"),
        conversation_messages.c.in_context.is_(false()),
    )
    .scalar_subquery()
    .label("replaced"),
).where(conversations.c.id == bindparam("conversation_id"))
"""A conversation, if it exists, the position of its last message, and that of the last
message a summary replaced."""
_MESSAGES_AFTER = (
    select(conversation_messages)
    .where(
        conversation_messages.c.conversation_id == bindparam("conversation_id"),
        conversation_messages.c.seq > bindparam("after"),
    )
    .order_by(conversation_messages.c.seq)
)


def _hit(row: Any) -> SearchHit:
    return SearchHit(
        conversation_id=row["conversation_id"],
        section=row["section"],
        seq=row["seq"],
        run_id=row["run_id"],
        message=message_of(row),
    )


_FTS_CHECK = (
    "INSERT INTO conversation_messages_fts(conversation_messages_fts) VALUES('integrity-check')"
)
"""FTS5's own check of its index against the text it holds (``PRAGMA integrity_check`` does not
look inside a full-text index)."""


def _sqlite_problems(conn: Connection) -> list[str]:
    """What SQLite finds wrong with the file: ``integrity_check`` (pages, and every index
    against its table) and FTS5's check of the full-text index."""
    found = conn.exec_driver_sql("PRAGMA integrity_check").scalars().all()
    problems = [f"integrity_check: {p}" for p in found if p != "ok"]
    has_fts = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE name = 'conversation_messages_fts'"
    ).first()
    if has_fts:
        try:
            conn.exec_driver_sql(_FTS_CHECK)
        except DatabaseError as exc:
            problems.append(f"the full-text index: {' '.join(str(exc.orig).split())}")
    return problems


_GAPS = {
    "conversation_messages": ("conversation_id", "seq"),
    "execution_buffer_rows": ("run_id", "seq"),
    "step_executions": ("run_id", "step_index"),
    "tool_executions": ("step_id", "position"),
}


def _verify(conn: Connection) -> list[str]:
    problems: list[str] = []
    if conn.dialect.name == "sqlite":
        problems += _sqlite_problems(conn)
        for row in conn.exec_driver_sql("PRAGMA foreign_key_check").all():
            problems.append(f"foreign_key_check: row {row[1]} of {row[0]} refers to no {row[2]}")
    problems += mismatches(conn)
    for name, (owner, position) in _GAPS.items():
        table = metadata.tables[name]
        gaps = conn.execute(
            select(table.c[owner], func.count(), func.min(table.c[position]))
            .group_by(table.c[owner])
            .having(
                or_(
                    func.min(table.c[position]) != 0,
                    func.max(table.c[position]) != func.count() - 1,
                )
            )
        ).all()
        problems += [f"{name}: the positions of {g[0]} have gaps" for g in gaps]
    counted = select(step_executions.c.run_id, func.count().label("n")).group_by(
        step_executions.c.run_id
    )
    sub = counted.subquery()
    mismatched = conn.execute(
        select(agent_runs.c.id, agent_runs.c.step_count, func.coalesce(sub.c.n, 0))
        .outerjoin(sub, sub.c.run_id == agent_runs.c.id)
        .where(agent_runs.c.step_count != func.coalesce(sub.c.n, 0))
    ).all()
    problems += [f"run {m[0]} counted {m[1]} steps but has {m[2]} step rows" for m in mismatched]
    results: dict[str, list[str]] = {}
    for step_id, call_id in conn.execute(
        select(tool_executions.c.step_id, tool_executions.c.tool_call_id).order_by(
            tool_executions.c.step_id, tool_executions.c.position
        )
    ):
        results.setdefault(step_id, []).append(call_id)
    steps_with_calls = select(
        step_executions.c.run_id, step_executions.c.id, step_executions.c.tool_calls
    ).where(step_executions.c.tool_calls.is_not(None))
    for run_id, step_id, calls in conn.execute(steps_with_calls):
        called = [c.get("id") for c in calls or () if isinstance(c, dict)]
        held = results.get(step_id, [])
        if called != held:
            problems.append(
                f"run {run_id}, step {step_id}: called tools {called}, has results for {held}"
            )
    return problems


def _prepare(engine: Engine, *, migrate: bool, verify: bool) -> None:
    """Check the database can be opened, then bring it to the newest schema."""
    url = make_url(str(engine.url))
    try:
        if engine.dialect.name == "sqlite":
            _probe_sqlite(engine, verify=verify)
        if migrate:
            _migrate.upgrade(engine)
        elif not _migrate.is_current(engine):
            raise SchemaVersionError(
                f"the database at {url.render_as_string(hide_password=True)} is not at the newest "
                f"schema ({_migrate.head_revision()}); run `agentledger db upgrade`"
            )
    except (SchemaVersionError, ConfigurationError):
        raise
    except (DatabaseError, sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        if is_busy(exc):
            raise  # with_retries tries again
        raise LedgerOpenError(_open_error(url, exc)) from exc


def _probe_sqlite(engine: Engine, *, verify: bool) -> None:
    """Read every table's first page (and, with ``verify``, check every page): damage shows
    here as an error instead of later as a wrong answer."""
    with engine.connect() as conn:
        tables = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        ).scalars()
        for table in list(tables):
            conn.exec_driver_sql(f'SELECT * FROM "{table}" LIMIT 1').all()
        if verify:
            problems = _sqlite_problems(conn)
            if problems:
                raise sqlite3.DatabaseError(
                    "database disk image is malformed: " + "; ".join(problems[:5])
                )


def _open_error(url: Any, exc: Exception) -> str:
    detail = str(getattr(exc, "orig", None) or exc).strip()
    where = url.render_as_string(hide_password=True)
    if "readonly" in detail or "read-only" in detail:
        hint = "the file (or its directory, for the WAL files) is read-only; open a writable copy"
    elif isinstance(exc, UnicodeDecodeError) or any(
        word in detail for word in ("malformed", "not a database", "encrypted", "corrupt")
    ):
        hint = "the file is corrupt; restore it from a backup (its -wal and -shm files with it)"
    elif "unable to open" in detail:
        hint = "check the path and the permissions of the file and its directory"
    else:
        hint = "check the URL, and that the server is up and reachable"
    return f"cannot open the ledger at {where}: {detail}. {hint}"

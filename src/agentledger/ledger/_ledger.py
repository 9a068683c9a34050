"""``Ledger``: the SQL store of conversations, runs, steps and tool executions."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

from sqlalchemy import Engine, and_, case, delete, func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError

from .._ids import Clock, new_id, utc_now
from ..errors import ConfigurationError, LedgerOpenError, NotFoundError, SchemaVersionError
from ..messages import Message, Messages, MessageStore
from ..recording import SPAWNED_BY, RunResult
from ..state import AgentState, AgentStatus
from ..steps import StepExecution, ToolExecution
from ..usage import Spend
from . import _migrate
from ._engine import (
    EngineSettings,
    Synchronous,
    is_busy,
    make_engine,
    normalize_url,
    sqlite_path,
    with_retries,
    write_transaction,
)
from ._rows import (
    USAGE_COLUMNS,
    conversation_record,
    message_of,
    run_columns_at_end,
    run_record,
    tool_execution_of,
    usage_of,
)
from ._transactions import (
    RunTransactions,
    load_steps,
    rebuild_state,
    stale_condition,
    stale_query,
    store_of,
)
from .records import ConversationRecord, RunRecord, RunTree, SearchHit
from .tables import (
    agent_runs,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    step_executions,
    tool_executions,
)

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
        self._runs = RunTransactions(engine, settings, clock, lease_seconds)
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
        most damage at once; ``verify=True`` also runs ``PRAGMA quick_check`` over the whole
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
            with write_transaction(self.engine) as conn:
                conn.execute(insert(conversations), row)

        with_retries(self.settings, work, what="creating a conversation")
        return self.conversation(new)

    def conversation(self, conversation_id: str) -> ConversationRecord:
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(conversations).where(conversations.c.id == conversation_id))
                .mappings()
                .first()
            )
        if row is None:
            raise NotFoundError(
                f"no conversation {conversation_id!r} in this ledger "
                "(see `agentledger conversations`)"
            )
        return conversation_record(row)

    def conversations(
        self, *, kind: str | None = None, limit: int | None = None
    ) -> list[ConversationRecord]:
        """Conversations, most recently updated first."""
        query = select(conversations).order_by(
            conversations.c.updated_at.desc(), conversations.c.id.desc()
        )
        if kind is not None:
            query = query.where(conversations.c.kind == kind)
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(limit)).mappings().all()
        return [conversation_record(r) for r in rows]

    def messages(self, conversation_id: str, section: str = "messages") -> Messages:
        """A section of a conversation as committed: by default the conversation itself."""
        self.conversation(conversation_id)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(conversation_messages)
                .where(
                    conversation_messages.c.conversation_id == conversation_id,
                    conversation_messages.c.section == section,
                )
                .order_by(conversation_messages.c.seq)
            ).mappings()
            return Messages(tuple(message_of(r) for r in rows))

    # --- runs -----------------------------------------------------------------------------------

    def run(self, run_id: str) -> RunRecord:
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(agent_runs).where(agent_runs.c.id == run_id)).mappings().first()
            )
        if row is None:
            raise NotFoundError(f"no run {run_id!r} in this ledger (see `agentledger runs`)")
        return run_record(row)

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
        with self.engine.connect() as conn:
            rows = conn.execute(query.limit(limit)).mappings().all()
        return [run_record(r) for r in rows]

    def run_tree(self, run_id: str) -> RunTree:
        """The run ``run_id`` and every subagent run below it, with exclusive and inclusive
        usage. Give a root run's id for the whole tree (``RunRecord.root_run_id``)."""
        top = self.run(run_id)
        with self.engine.connect() as conn:
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

        def node(record: RunRecord) -> RunTree:
            kids = tuple(node(child) for child in children.get(record.id, ()))
            return RunTree(run=record, exclusive=spends.get(record.id, Spend()), children=kids)

        return node(next(r for r in records if r.id == run_id))

    def steps(self, run_id: str) -> tuple[StepExecution, ...]:
        """The run's steps, rebuilt with their tool executions and outcomes."""
        self.run(run_id)
        with self.engine.connect() as conn:
            return load_steps(conn, run_id)

    def tool_executions(self, run_id: str) -> tuple[ToolExecution, ...]:
        self.run(run_id)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(tool_executions)
                .where(tool_executions.c.run_id == run_id)
                .order_by(tool_executions.c.step_index, tool_executions.c.position)
            ).mappings()
            return tuple(tool_execution_of(r) for r in rows)

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
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(execution_buffer_rows)
                .where(execution_buffer_rows.c.run_id == run_id)
                .order_by(execution_buffer_rows.c.seq)
            ).mappings()
            return Messages(tuple(message_of(r) for r in rows))

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
        with self.engine.connect() as conn:
            rows = conn.execute(typed, params).mappings().all()
        return [_hit(r) for r in rows]

    # --- recovery -------------------------------------------------------------------------------

    def stale_runs(self, stale_after: float | None = None) -> list[RunRecord]:
        """Runs still ``running`` whose process is gone: their conversation's lease expired (or
        another run took it), or, with ``stale_after``, they have not beaten for that long."""
        with self.engine.connect() as conn:
            rows = conn.execute(stale_query(self.clock(), stale_after)).mappings().all()
        return [run_record(r) for r in rows]

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
            with write_transaction(self.engine) as conn:
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
                steps = load_steps(conn, run_id)
                recorded = AgentState(
                    conversation_id=still_stale.conversation_id,
                    run_id=run_id,
                    step_executions=steps,
                )
                totals = run_columns_at_end(recorded, "interrupted", _ABANDONED, now)
                totals["stop_reason"] = None
                conn.execute(
                    update(agent_runs)
                    .where(agent_runs.c.id == run_id, agent_runs.c.status == "running")
                    .values(**totals)
                )
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
        only the rows added since: loading stays as cheap at a thousand turns as at ten.
        """
        if conversation_id is None:
            return AgentState.empty(conversation_id=new_id())
        with self.engine.connect() as conn:
            head = conn.execute(_head_query(conversation_id)).first()
            if head is None:
                self.conversation(conversation_id)  # raises NotFoundError
            assert head is not None
            last_seq = -1 if head.last_seq is None else int(head.last_seq)
            cached = self._cache.get(conversation_id)
            if cached is None or cached.last_seq > last_seq:
                cached = _Cached(-1, MessageStore())
            if cached.last_seq < last_seq:
                rows = conn.execute(
                    select(conversation_messages)
                    .where(
                        conversation_messages.c.conversation_id == conversation_id,
                        conversation_messages.c.seq > cached.last_seq,
                    )
                    .order_by(conversation_messages.c.seq)
                ).mappings()
                cached = _Cached(last_seq, store_of(rows, cached.store))
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

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        # Subagent runs are resumed through their parent, whose redone spawn finds them.
        return [run.id for run in self.stale_runs(stale_after) if run.parent_run_id is None]

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(agent_runs.c.id, agent_runs.c.status, agent_runs.c.metadata)
                .where(agent_runs.c.parent_run_id == parent_run_id)
                .order_by(agent_runs.c.started_at)
            ).all()
        for row in rows:
            if (row.metadata or {}).get(SPAWNED_BY) == spawned_by:
                return row.id, AgentStatus(row.status)
        return None

    def run_result(self, run_id: str) -> RunResult:
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(agent_runs).where(agent_runs.c.id == run_id)).mappings().first()
            )
            if row is None:
                raise NotFoundError(f"no run {run_id!r} in this ledger (see `agentledger runs`)")
            state = rebuild_state(conn, row)
        return RunResult.of(state.model_copy(update={"status": AgentStatus(row["status"])}))


def _step_spends(conn: Any, run_ids: Sequence[str]) -> dict[str, Spend]:
    """Each run's own spend, summed from its step rows."""
    s = step_executions.c
    # A step called the model when it holds the model's message; one without a cost is unpriced.
    unpriced = func.sum(case((and_(s.message_id.is_not(None), s.cost_usd.is_(None)), 1), else_=0))
    rows = conn.execute(
        select(
            s.run_id,
            *(func.coalesce(func.sum(s[name]), 0).label(name) for name in USAGE_COLUMNS),
            func.sum(s.cost_usd).label("cost_usd"),
            func.count().label("steps"),
            unpriced.label("unpriced"),
        )
        .where(s.run_id.in_(run_ids))
        .group_by(s.run_id)
    ).mappings()
    return {
        row["run_id"]: Spend(
            usage=usage_of(row),
            cost_usd=row["cost_usd"],
            steps=row["steps"],
            fully_priced=not row["unpriced"],
        )
        for row in rows
    }


@dataclass(frozen=True)
class _Cached:
    last_seq: int
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


def _head_query(conversation_id: str) -> Any:
    last_seq = (
        select(func.max(conversation_messages.c.seq))
        .where(conversation_messages.c.conversation_id == conversation_id)
        .scalar_subquery()
    )
    return select(conversations.c.id, last_seq.label("last_seq")).where(
        conversations.c.id == conversation_id
    )


def _hit(row: Any) -> SearchHit:
    return SearchHit(
        conversation_id=row["conversation_id"],
        section=row["section"],
        seq=row["seq"],
        run_id=row["run_id"],
        message=message_of(row),
    )


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
            problems = conn.exec_driver_sql("PRAGMA quick_check").scalars().all()
            if problems != ["ok"]:
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

"""``Ledger``: a handle on the SQL store of conversations, runs, steps and tool executions.

A handle opens (and migrates) the database, answers every read of the public API, abandons
stale runs and verifies the ledger; it hands out its :attr:`Ledger.recorder`, which records
runs (``AgentBuilder().with_ledger(ledger)`` takes it from there).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Self, TypeVar, overload

from sqlalchemy import Connection, Engine, insert, select

from ..errors import SchemaVersionError, UsageError
from ..values import (
    AgentState,
    AgentStatus,
    Clock,
    Compaction,
    Message,
    Messages,
    StepExecution,
    ToolExecution,
    check_storable,
    new_id,
    utc_now,
)
from . import _forget
from ._access import ReadOnly, read_only_access
from ._arguments import member, row_limit
from ._connection_reads import ConnectionReads
from ._engine import Connections, Database, make_engine, with_retries
from ._failures import EngineSettings, Synchronous
from ._forget import Choose, Forgotten
from ._lookup import IdKind, shortest_prefixes
from ._opening import prepare
from ._queries import (
    Turn,
    as_seen,
    buffer_rows,
    conversation_row,
    conversation_rows,
    counted_steps,
    in_section,
    load_steps,
    message_rows,
    messages_in,
    run_row,
    run_rows,
    turns_of,
)
from ._records import conversation_of, run_of
from ._recovery import abandon, stale_query
from ._rows import compaction_of
from ._run_tree import RunTree, read_run_tree
from ._scope import EVERYTHING, Scope
from ._scoped import check_id_free, created_in, metadata_condition, refuse_in_scope, within
from ._search import SearchHit, TraceHit, search_hits
from ._sql import Reads
from ._urls import normalize_url, sqlite_path
from ._verification import count_rows, find_damage
from ._writes import LedgerRecorder
from .checksums import sealed
from .tables import (
    AgentRun,
    Conversation,
    ConversationKind,
    agent_runs,
    context_compactions,
    conversations,
)

DEFAULT_LEASE_SECONDS = 60.0
T = TypeVar("T")


class Ledger:
    """Conversations, runs, steps and tool executions in SQLite or PostgreSQL.

    ``Ledger.open(url)`` connects and migrates the database to the newest schema. Its
    :attr:`recorder` records runs: give the ledger to ``AgentBuilder.with_ledger`` and every
    ``Agent.run`` is recorded as a sequence of short transactions.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        settings: EngineSettings,
        clock: Clock,
        lease_seconds: float,
        read_only: ReadOnly | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.clock = clock
        # A read-only engine opens a connection per transaction (see ._access): none is kept.
        connections = Connections(engine, keep=0 if read_only is not None else 2)
        self._database = Database(engine, connections, settings, clock, read_only)
        self.recorder = LedgerRecorder(self._database, lease_seconds)
        """The :class:`~agentledger.recording.Recorder` that records runs in this ledger."""
        self._scoped_from: Ledger | None = None

    def scoped(self, tenant_id: str | None = None, owner_id: str | None = None) -> Ledger:
        """A handle on this ledger that sees and writes only the conversations of ``tenant_id``
        and ``owner_id`` (``None``: any), and the runs and rows that came from them. Anything
        outside the scope is not found, exactly as an id that does not exist; on PostgreSQL
        each of its transactions also sets ``agentledger.tenant_id``, which row-level security
        checks. ``AgentBuilder().with_ledger(ledger.scoped(...))`` runs agents in the scope.

        Cheap (make one per request): it shares this handle's engine, connections, heartbeat
        and loaded conversations. Scoping a scoped handle narrows it; another tenant or owner
        than its own is a :class:`UsageError`. Closing it closes nothing: what it shares is
        this handle's, which closes it."""
        scope = self.scope.narrowed(tenant_id, owner_id)
        handle = object.__new__(Ledger)
        handle.engine, handle.settings, handle.clock = self.engine, self.settings, self.clock
        handle._database = dataclasses.replace(self._database, scope=scope)
        handle.recorder = self.recorder.scoped(handle._database)
        handle._scoped_from = self._scoped_from or self
        return handle

    @property
    def scope(self) -> Scope:
        """The tenant and owner this handle keeps to (``Scope()``: the whole ledger)."""
        return self._database.scope

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
        read_only: bool = False,
        clock: Clock = utc_now,
    ) -> Ledger:
        """Open the ledger at ``url`` (a file path, a ``sqlite:///`` URL or a ``postgresql://``
        URL), creating and migrating it as needed.

        With ``migrate=False`` a database that is not at the newest schema (or a SQLite file
        that does not exist) is refused instead. A database migrated by a newer agentledger is
        always refused. Opening a SQLite file reads the first page of every table, which finds
        most damage at once; ``verify=True`` also runs ``PRAGMA integrity_check`` over the whole
        file (its time grows with the file's size).

        ``read_only=True`` opens a handle that only reads: every read, search and
        :meth:`verify` works; every write (a run, a new conversation, :meth:`recover`, a
        migration) raises :class:`LedgerReadOnlyError` before it touches the database, and no
        file is created beside a SQLite database. A SQLite ledger whose file or directory this
        user may not write is opened read-only whatever ``read_only`` says (see
        :attr:`read_only`, :meth:`check_writable`). On PostgreSQL the session is read only too.
        """
        settings = EngineSettings(synchronous=synchronous, busy_timeout=busy_timeout)
        normalized = normalize_url(url)
        path = sqlite_path(normalized)
        if path is not None and not path.exists() and not migrate:
            raise SchemaVersionError(
                f"no ledger at {path} (an empty database is at no schema revision): open it "
                "with migrate=True (the default), or create it with `agentledger db upgrade`"
            )
        access = read_only_access(path, asked=read_only)
        if access is not None and path is not None and not path.exists():
            raise access.cannot_create(path)
        engine = make_engine(normalized, settings, read_only=access is not None)
        try:
            with_retries(
                settings,
                lambda: prepare(engine, migrate=migrate, verify=verify, read_only=access),
                what=f"opening {engine.url.render_as_string(hide_password=True)}",
            )
        except BaseException:
            engine.dispose()
            raise
        return cls(
            engine, settings=settings, clock=clock, lease_seconds=lease_seconds, read_only=access
        )

    @property
    def url(self) -> str:
        """The database URL, without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def read_only(self) -> bool:
        """Whether this handle only reads: opened with ``read_only=True``, or a SQLite ledger
        whose file or directory this user may not write."""
        return self._database.read_only is not None

    @property
    def transactions(self) -> int:
        """How many transactions this handle has begun since it was opened (a transaction tried
        again counts once per attempt; the heartbeat's lease renewals count too)."""
        return self._database.connections.transactions

    @property
    def lock_retries(self) -> int:
        """How many times this handle tried a transaction again because the database was
        locked by another writer (or, on PostgreSQL, the transaction deadlocked or could not
        be serialized). None of these reached the caller: a transaction that stays locked
        through every attempt raises :class:`LedgerBusyError` instead."""
        return self._database.connections.lock_retries

    def check_writable(self) -> None:
        """Raise :class:`LedgerReadOnlyError`, saying why and what to do, when this handle is
        read-only: for a program that records runs and would rather stop at its start than at
        its first run."""
        self._database.check_writable("writing to the ledger")

    def close(self) -> None:
        """Stop the heartbeat and close the connections and the engine; on a scoped handle,
        nothing (they belong to the ledger it was scoped from)."""
        if self._scoped_from is not None:
            return
        self.recorder.close()
        self._database.connections.close()
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        scope = self.scope
        if scope.everything:
            return f"Ledger({self.url!r})"
        return f"Ledger({self.url!r}, tenant_id={scope.tenant_id!r}, owner_id={scope.owner_id!r})"

    # --- conversations --------------------------------------------------------------------------

    def create_conversation(
        self,
        *,
        title: str | None = None,
        kind: ConversationKind | str = ConversationKind.MAIN,
        parent_run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        conversation_id: str | None = None,
        tenant_id: str | None = None,
        owner_id: str | None = None,
    ) -> Conversation:
        """A new conversation, of ``tenant_id`` and ``owner_id`` (in a scoped handle, by
        default its scope's; another one is a :class:`UsageError`)."""
        owners = created_in(self.scope, tenant_id, owner_id)
        check_storable(title, "the conversation's title")
        check_storable(metadata, "the conversation's metadata")
        check_storable(conversation_id, "the conversation's id")
        check_storable(parent_run_id, "the parent run's id")
        if conversation_id is not None and not conversation_id.strip():
            raise UsageError(
                f"conversation_id={conversation_id!r}: give an id with a visible character, or "
                "None for a new time-ordered id"
            )
        now = self.clock()
        created = conversation_id or new_id()
        row = {
            "id": created,
            "kind": member(ConversationKind, kind, "kind").value,
            "title": title,
            "parent_run_id": parent_run_id,
            "version": 0,
            "created_at": now,
            "updated_at": now,
            "metadata": metadata or None,
            **owners,
        }

        def write(conn: Connection) -> Conversation:
            if conversation_id is not None:
                check_id_free(conn, created)
            conn.execute(insert(conversations), sealed(conversations, row))
            return conversation_of(conversation_row(ConnectionReads(conn), created, EVERYTHING))

        return self._database.write("creating a conversation", write)

    def conversation(self, conversation_id: str) -> Conversation:
        """The conversation ``conversation_id``: its id, or a prefix of it (at least
        ``SHORT_ID_LENGTH`` characters) that begins no other conversation's id. Every method
        that takes a conversation's id takes such a prefix too; the record holds the full id.

        Raises :class:`NotFoundError` when none matches, :class:`AmbiguousIdError` (listing
        them) when the prefix begins several."""

        return self._reads(
            f"reading conversation {conversation_id}",
            lambda reads: conversation_of(conversation_row(reads, conversation_id, self.scope)),
        )

    def conversations(
        self,
        *,
        kind: ConversationKind | str | None = None,
        limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[Conversation]:
        """Conversations, most recently updated first; with ``metadata``, those whose metadata
        has each of its top-level keys with that value (a string, a number, a boolean, or
        ``None`` for JSON null)."""
        condition = metadata_condition(self.dialect, metadata) if metadata else ("", {})
        return self._reads(
            "listing conversations",
            lambda reads: [
                conversation_of(row)
                for row in conversation_rows(
                    reads, self.scope, kind=kind, limit=limit, condition=condition
                )
            ],
        )

    def messages(self, conversation_id: str, section: str = "messages") -> Messages:
        """A section of a conversation as committed: by default the conversation itself (the
        messages a summary replaced are in the ``buffer`` section, the summaries in
        ``summary``; see :meth:`history` and :meth:`model_context`)."""
        return self._conversation_rows(conversation_id, in_section(section))

    def history(self, conversation_id: str) -> Messages:
        """The conversation as the user saw it: every message of it in order, those a summary
        replaced included (and the summaries left out). No compaction changes it."""
        return self._conversation_rows(conversation_id, as_seen)

    def model_context(self, conversation_id: str) -> Messages:
        """The conversation as the model sees it now: the summary, then the messages still in
        its context (what a new run starts from, before its own trace)."""
        state = self.recorder.load_conversation(self.conversation(conversation_id).id)
        return state.store.select(*AgentState.INFERENCE_SECTIONS)

    def compactions(self, conversation_id: str) -> list[Compaction]:
        """Every compaction of a conversation's context, oldest first: the summaries made
        between its runs, the observation masking within them, and the failed attempts."""
        conversation_id = self.conversation(conversation_id).id
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
        conversation_id = self.conversation(conversation_id).id
        return self._reads(
            f"reading the messages of conversation {conversation_id}",
            lambda reads: messages_in(message_rows(reads, conversation_id), wanted),
        )

    # --- runs -----------------------------------------------------------------------------------

    def run(self, run_id: str) -> AgentRun:
        """The run ``run_id``: its id, or a prefix of it (at least ``SHORT_ID_LENGTH``
        characters) that begins no other run's id. Every method that takes a run's id takes
        such a prefix too; the record holds the full id.

        Raises :class:`NotFoundError` when none matches, :class:`AmbiguousIdError` (listing
        them) when the prefix begins several."""
        return self._reads(
            f"reading run {run_id}", lambda reads: run_of(run_row(reads, run_id, self.scope))
        )

    def runs(
        self,
        conversation_id: str | None = None,
        *,
        status: AgentStatus | str | None = None,
        limit: int | None = None,
        since: datetime | None = None,
    ) -> list[AgentRun]:
        """Runs, oldest first within a conversation, newest first across the ledger; with
        ``since``, only those started at or after it (a naive datetime is UTC)."""
        if conversation_id is not None:
            conversation_id = self.conversation(conversation_id).id
        since = None if since is None else _utc(since)
        return self._reads(
            "listing runs",
            lambda reads: [
                run_of(row)
                for row in run_rows(
                    reads,
                    self.scope,
                    conversation_id=conversation_id,
                    status=status,
                    limit=limit,
                    since=since,
                )
            ],
        )

    def run_tree(self, run_id: str) -> RunTree:
        """The run ``run_id`` and every subagent run below it, with exclusive and inclusive
        usage. Give a root run's id for the whole tree (``AgentRun.root_run_id``)."""
        top = self.run(run_id)
        return self._reads(f"reading the run tree of {top.id}", lambda r: read_run_tree(r, top))

    def steps(self, run_id: str) -> tuple[StepExecution, ...]:
        """The run's steps, rebuilt with their tool executions and outcomes."""
        run = self.run(run_id)
        steps = self._reads(f"reading the steps of run {run.id}", lambda r: load_steps(r, run.id))
        counted_steps(steps, run.id, run.step_count)
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
        run_id = self.run(run_id).id
        return self._reads(
            f"reading the execution buffer of run {run_id}",
            lambda reads: messages_in(buffer_rows(reads, run_id), lambda _: True),
        )

    # --- search ---------------------------------------------------------------------------------

    @overload
    def search(
        self,
        query: str,
        *,
        conversation_id: str | None = None,
        limit: int = 20,
        trace: Literal[False] = False,
    ) -> list[SearchHit]: ...

    @overload
    def search(
        self, query: str, *, conversation_id: str | None = None, limit: int = 20, trace: bool
    ) -> list[SearchHit | TraceHit]: ...

    def search(
        self,
        query: str,
        *,
        conversation_id: str | None = None,
        limit: int = 20,
        trace: bool = False,
    ) -> list[SearchHit] | list[SearchHit | TraceHit]:
        """Conversation messages matching every word of ``query``, best matches first; with
        ``conversation_id``, in that conversation only (:class:`NotFoundError` when there is no
        such conversation). With ``trace``, then the tool executions whose arguments and
        result hold every word (:class:`TraceHit`), best first: up to ``limit`` of each.

        Only the words count, each whole or, followed by ``*``, as a prefix (``Lis*``): quotes,
        operators and SQL in ``query`` separate words, and a query of no word finds nothing. A
        query of more than ``MAX_SEARCH_WORDS`` (1,000) different words is a
        :class:`UsageError`. On PostgreSQL the words are looked for in the first 100,000
        characters of each message (and of each tool execution's arguments and result)."""
        row_limit(limit)
        if conversation_id is not None:
            conversation_id = self.conversation(conversation_id).id
        return self._reads(
            f"searching for {query!r}",
            lambda reads: search_hits(
                reads, query, conversation_id, limit, self.scope, trace=trace
            ),
        )

    def turns(self, conversation_id: str) -> list[Turn]:
        """The conversation as the user saw it (:meth:`history`), turn by turn: the messages
        of each run with the run's id (to read its trace: :meth:`steps`)."""
        conversation_id = self.conversation(conversation_id).id
        return self._reads(
            f"reading the turns of conversation {conversation_id}",
            lambda reads: turns_of(message_rows(reads, conversation_id)),
        )

    def short_ids(self, ids: Iterable[str], *, of: IdKind) -> dict[str, str]:
        """Each of ``ids`` (of runs or of conversations, as ``of`` says) by its shortest
        prefix, of at least ``SHORT_ID_LENGTH`` characters, that begins no other id of its kind
        in the ledger (in a scoped handle, in its scope): what a person can type for it (the
        command line's listings show these)."""
        wanted = list(ids)
        return self._reads(
            f"shortening {len(wanted)} {of} ids",
            lambda reads: shortest_prefixes(reads, of, wanted, self.scope),
        )

    # --- recovery -------------------------------------------------------------------------------

    def stale_runs(self, stale_after: float | None = None) -> list[AgentRun]:
        """Runs still ``running`` whose process is gone: their conversation's lease expired (or
        another run took it), or, with ``stale_after``, they have not beaten for that long."""
        query = within(stale_query(self.clock(), stale_after), self.scope, agent_runs)
        return self._read(
            "looking for stale runs",
            lambda conn: [run_of(r) for r in conn.execute(query).mappings()],
        )

    def recover(self, *, stale_after: float | None = None) -> list[AgentRun]:
        """Abandon every stale run: mark it ``interrupted``, flush its buffer and free its
        conversation; the runs abandoned.

        The conversations stay clean: a run's answer only ever reaches them at its commit;
        only what a step being streamed had shown when the process died (its partial output)
        is committed now, as the run's answer flagged ``interrupted``. Resuming stale runs
        instead needs the agent's model and tools: that is ``Agent.recover`` (or
        ``Agent.resume(run_id)``). A read-only handle refuses
        (:class:`LedgerReadOnlyError`), stale runs or not: :meth:`stale_runs` lists them.
        """
        self._database.check_writable("recovering stale runs")
        stale = self.stale_runs(stale_after)
        return [self.run(r.id) for r in stale if abandon(self._database, r.id, stale_after)]

    # --- forgetting -----------------------------------------------------------------------------

    def forget(self, conversation_id: str | Iterable[str], *, dry_run: bool = False) -> Forgotten:
        """Delete the conversation ``conversation_id`` (an id or a unique prefix; or several,
        together) with every row that came from it, subagents' runs and conversations and
        full-text entries included, in one transaction that also writes a ``forget_log`` row
        (ids, time, counts; no content). ``dry_run``: delete and log nothing, say what would go.

        :class:`NotFoundError` for a conversation missing or outside this handle's scope,
        :class:`UsageError` for a subagent's (it goes with its main one),
        :class:`ConversationBusyError` while a run holds any of them (nothing is deleted),
        :class:`LedgerReadOnlyError` on a read-only handle (a dry run only reads)."""
        given = _forget.given_conversations(_forget.conversation_ids(conversation_id))
        return self._forget(given, "conversation", None, dry_run)

    def forget_owner(self, owner_id: str, *, dry_run: bool = False) -> Forgotten:
        """Delete every conversation of ``owner_id`` in this handle's scope, as :meth:`forget`
        does, in one transaction. An owner with no conversation is logged too (zero counts):
        the ``forget_log`` row shows the request was handled."""
        return self._forget(_forget.owner_conversations(owner_id), "owner", owner_id, dry_run)

    def forget_inactive(self, older_than: timedelta, *, dry_run: bool = False) -> Forgotten:
        """Delete, as :meth:`forget` does, every main conversation in this handle's scope with
        no activity for ``older_than`` (no message, run or update since): retention. A
        subagent's conversation is never chosen by itself; it goes with the run that spawned
        it. Logged even when nothing was that old."""
        cutoff = _forget.inactive_since(older_than, self.clock())
        reason = f"inactive since {cutoff.isoformat()}"
        return self._forget(_forget.inactive_conversations(cutoff), reason, None, dry_run)

    def _forget(self, choose: Choose, reason: str, owner: str | None, dry: bool) -> Forgotten:
        return _forget.forget_chosen(
            self._database, choose, reason=reason, owner_id=owner, dry_run=dry
        )

    # --- checking -------------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Check the whole ledger; what is wrong, one line per problem (empty: all is well).

        Every row's checksum, the positions of every conversation, buffer, run and step
        (contiguous, as many steps as each run counted and as many tool executions as each step
        did) and, on SQLite, ``PRAGMA integrity_check`` (pages, and indexes against their
        tables: a row an index lost), ``foreign_key_check`` and the full-text index's own
        check; and that every interrupted answer is the only answer of an ``interrupted`` run.
        Reads the whole database: its time grows with the file. A scoped handle refuses
        (:class:`UsageError`): call it on the unscoped ledger.
        """
        refuse_in_scope(self.scope, "Ledger.verify")
        return self._read("verifying the ledger", find_damage)

    def row_counts(self) -> dict[str, tuple[int, int]]:
        """Each table's rows, and how many of them carry a checksum (what :meth:`verify`
        checks), by table name. Of the whole ledger: a scoped handle refuses, as for
        :meth:`verify`."""
        refuse_in_scope(self.scope, "Ledger.row_counts")
        return self._read("counting the ledger's rows", count_rows)

    def _read(self, what: str, read: Callable[[Connection], T]) -> T:
        return self._database.read(what, read)

    def _reads(self, what: str, read: Callable[[Reads], T]) -> T:
        """``read`` of the statements shared with :class:`LedgerReader` (:mod:`._queries`)."""
        return self._database.read(what, lambda conn: read(ConnectionReads(conn)))


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

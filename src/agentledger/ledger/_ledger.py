"""``Ledger``: a handle on the SQL store of conversations, runs, steps and tool executions.

A handle opens (and migrates) the database, answers every read of the public API, abandons
stale runs and verifies the ledger; it hands out its :attr:`Ledger.recorder`, which records
runs (``AgentBuilder().with_ledger(ledger)`` takes it from there).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import JsonValue
from sqlalchemy import Connection, Engine, insert, select

from .._recording import Pricing, Turn, on_an_event_loop
from .._values import (
    AgentState,
    Clock,
    Compaction,
    Messages,
    PriceTable,
    Spend,
    check_storable,
    new_id,
    utc_now,
)
from ..errors import SchemaVersionError, UsageError
from . import _forget
from ._access import ReadOnly, read_only_access
from ._adk_sessions import AdkSessions
from ._arguments import member
from ._connection_reads import ConnectionReads
from ._engine import Connections, Database, make_engine, with_retries
from ._failures import EngineSettings, Synchronous
from ._forget import Choose, Forgotten
from ._framework_conversations import insert_if_absent
from ._graph_checkpoints import GraphCheckpoints
from ._opening import prepare
from ._queries import (
    conversation_row,
)
from ._reading import LedgerReads
from ._records import conversation_of, run_of
from ._recovery import abandon, stale_query
from ._row_mapping import Row, compaction_of
from ._scope import EVERYTHING, Scope
from ._scope_conditions import check_id_free, created_in, id_taken, refuse_in_scope, within
from ._sql import Reads
from ._stored_conversations import StoredConversations
from ._tree_model import RunTree
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


class Ledger(LedgerReads[Conversation, AgentRun, RunTree]):
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
        # A read-only engine opens a connection per transaction (see ._access): none is kept.
        writes = engine.dialect.name == "sqlite" and read_only is None
        connections = Connections(
            engine,
            keep=0 if read_only is not None else 2,
            database=_file_of(engine) if writes else None,
            gate_timeout=settings.busy_timeout,
            syncs_itself=settings.synchronous == "FULL",
        )
        database = Database(engine, connections, settings, clock, read_only)
        self._hold(database, LedgerRecorder(database, lease_seconds), None)

    @classmethod
    def _sharing(cls, database: Database, recorder: LedgerRecorder, scoped_from: Ledger) -> Ledger:
        """A handle on ``database`` (a scoped copy of ``scoped_from``'s) that shares its engine,
        connections and recorder's leases: made without ``__init__``, which would open more."""
        handle = cls.__new__(cls)
        handle._hold(database, recorder, scoped_from)
        return handle

    def _hold(
        self, database: Database, recorder: LedgerRecorder, scoped_from: Ledger | None
    ) -> None:
        """Set every attribute of a handle: one place for a new handle and a scoped one."""
        self.engine, self.settings, self.clock = database.engine, database.settings, database.clock
        self._database = database
        self.recorder = recorder
        """The :class:`~agentledger._recording.Recorder` that records runs in this ledger."""
        self._scoped_from = scoped_from

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
        database = dataclasses.replace(self._database, scope=scope)
        return self._sharing(database, self.recorder.scoped(database), self._scoped_from or self)

    def with_clock(self, clock: Clock) -> Ledger:
        """A handle on this ledger whose writes are stamped by ``clock`` instead: every time
        a turn, a run, a step and a conversation records (their ``created_at``,
        ``started_at``, ``finished_at``, ``updated_at``) is what ``clock`` says when it is
        written. For recording what happened earlier at the time it happened (``agentledger
        import`` moves the clock to each imported message's time before writing it). Shares
        this handle's engine, connections, leases and scope, as :meth:`scoped` does; closing
        it closes nothing."""
        database = dataclasses.replace(self._database, clock=clock)
        return self._sharing(database, self.recorder.scoped(database), self._scoped_from or self)

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
                engine,
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

    @property
    def write_lock_times(self) -> tuple[float, ...]:
        """The seconds each of this handle's latest write transactions (at most 10,000, the
        newest last) held the database's write lock: on SQLite from its ``BEGIN IMMEDIATE`` to
        its ``COMMIT`` (the sync to disk that follows is outside it: see
        docs/guarantees.md), on PostgreSQL from its ``BEGIN`` to its ``COMMIT``. The lock lets
        one writer at a time, so these bound how many transactions writers can commit a
        second together."""
        return tuple(self._database.connections.hold_times)

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
            if conversation_id is None:
                conn.execute(insert(conversations), sealed(conversations, row))
            else:
                check_id_free(conn, created)
                # Another writer may take the id between the check and the insert (the check
                # cannot see an insert not yet committed): the insert then does nothing.
                chosen = insert_if_absent(conn).returning(conversations.c.id)
                if conn.execute(chosen, sealed(conversations, row)).first() is None:
                    raise id_taken(created)
            return conversation_of(conversation_row(ConnectionReads(conn), created, EVERYTHING))

        return self._database.write("creating a conversation", write)

    def turn(
        self,
        user: str,
        *,
        conversation_id: str | None = None,
        agent_name: str = "agent",
        model: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        prices: Pricing | None = None,
        user_metadata: dict[str, JsonValue] | None = None,
    ) -> Turn:
        """Record a turn your own code runs (``with ledger.turn(user=...) as turn:``): the
        user message, each model call (``turn.step``) with its tool results, the text shown
        while it streams (``turn.shown``) and the answer (``turn.answer``), as a run of
        ``agent_name`` in conversation ``conversation_id`` (a new one when None; created
        with that id when it does not exist yet). Steps are priced from ``prices`` (the
        shipped table unless given) for their model, or ``model``; ``user_metadata`` is kept
        with the user message. The same transactions and rules as ``Agent.run``: see
        docs/recording.md."""
        return Turn(
            self.recorder,
            user=user,
            conversation_id=conversation_id,
            agent_name=agent_name,
            model=model,
            prices=prices if prices is not None else PriceTable.default(),
            clock=self.clock,
            metadata=metadata,
            user_metadata=user_metadata,
        )

    aturn = on_an_event_loop(turn)

    def together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction that every read and write of this handle on this
        thread joins while it runs (each write a savepoint of it), ``what`` naming it in
        errors: a run begun, stepped and committed in it commits at once, with one sync to
        disk, or not at all. Tried again only while the database is locked before ``work``
        begins (:class:`LedgerBusyError` when it is met after)."""
        return self._database.together(what, work)

    def reading(self, what: str, work: Callable[[], T]) -> T:
        """``work`` with every read of this handle on this thread in one read transaction, one
        snapshot of the database, ``what`` naming it in errors: several reads that must agree
        (a run and its steps, a page of a viewer) see one moment, whatever other processes
        commit meanwhile. No writer waits for it; a write inside it is a
        :class:`~agentledger.errors.UsageError`."""
        return self._database.reading(what, work)

    @property
    def graph_checkpoints(self) -> GraphCheckpoints:
        """The checkpoints graph frameworks keep in this ledger (revision 0014's tables), in
        this handle's scope: what ``agentledger.integrations.langgraph.LedgerSaver`` reads and
        writes."""
        return GraphCheckpoints(self._database)

    @property
    def adk_sessions(self) -> AdkSessions:
        """The sessions agent frameworks keep in this ledger (revision 0016's tables), in this
        handle's scope: what ``agentledger.integrations.adk.LedgerSessionService`` reads and
        writes."""
        return AdkSessions(self._database)

    @property
    def stored_conversations(self) -> StoredConversations:
        """The records and entry trees frameworks' conversation stores keep in this ledger
        (revision 0015's tables), in this handle's scope: what
        ``agentledger.integrations.pydantic_ai.LedgerConversationStore`` reads and writes."""
        return StoredConversations(self._database)

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
        """``read`` of the statements shared with :class:`LedgerReader` (:mod:`._reading`)."""
        return self._database.read(what, lambda conn: read(ConnectionReads(conn)))

    def _conversation_of(self, row: Row) -> Conversation:
        return conversation_of(row)

    def _run_of(self, row: Row) -> AgentRun:
        return run_of(row)

    def _node_of(self, row: Row, exclusive: Spend, children: tuple[RunTree, ...]) -> RunTree:
        return RunTree(run=run_of(row), exclusive=exclusive, children=children)


def _file_of(engine: Engine) -> Path | None:
    """The file of a SQLite engine (``None`` in memory)."""
    database = engine.url.database
    return Path(database) if database not in (None, "", ":memory:") else None

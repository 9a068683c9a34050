"""Connecting to the ledger's database: SQLite's settings, write transactions, retries.

SQLite runs in WAL mode with foreign keys and ``secure_delete`` on. Writes start with
``BEGIN IMMEDIATE``, so a writer waits for the write lock at the start of its transaction (up
to the busy timeout) instead of failing half way through it; when the lock stays taken, the
whole transaction is retried a bounded number of times with backoff before
:class:`LedgerBusyError` is raised.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Connection, Engine, RootTransaction, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from .._values import Clock
from ..errors import ConfigurationError, LedgerBusyError, LedgerUnavailableError, UsageError
from . import _failures
from ._access import ReadOnly, check_sqlite_path, read_only_uri
from ._failures import EngineSettings, decoded
from ._scope import EVERYTHING, Scope
from ._statements import begin_watching, end_watching, logs, send
from ._urls import normalize_url, parse_url, sqlite_path
from ._write_gate import WalSync, WriteGate, gate_path
from .checksums import canonical_json

T = TypeVar("T")

DEFAULT_SETTINGS = EngineSettings()

WRITE = {"agentledger_write": True}
"""Execution options of a write transaction (``BEGIN IMMEDIATE`` on SQLite)."""


def make_engine(
    url: str, settings: EngineSettings = DEFAULT_SETTINGS, *, read_only: bool = False
) -> Engine:
    """The engine of the ledger at ``url``. With ``read_only`` its connections only read: on
    SQLite, each transaction opens the file read-only (see :mod:`._access`); on PostgreSQL,
    the session's transactions are read only, so the server refuses a write too."""
    url = normalize_url(url)
    if parse_url(url).backend == "sqlite":
        return _sqlite_engine(url, settings, read_only=read_only)
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            "PostgreSQL needs psycopg 3: pip install 'agentledger[postgresql]'"
        ) from exc
    if read_only:
        event.listen(engine, "connect", _read_only_session)
    return engine


def _read_only_session(dbapi: Any, _record: ConnectionPoolEntry) -> None:
    with dbapi.cursor() as cursor:
        cursor.execute("SET SESSION default_transaction_read_only = on")
    dbapi.commit()


def engine_url(url: str) -> URL:
    """``url`` as the ledger gives it to SQLAlchemy: a SQLite file named as the ledger reads
    it (:func:`parse_url`, which decodes ``%20``; SQLAlchemy before 2.1 does not)."""
    parsed = make_url(url)
    path = sqlite_path(url)
    return parsed if path is None else parsed.set(database=str(path))


def _sqlite_engine(url: str, settings: EngineSettings, *, read_only: bool) -> Engine:
    path = sqlite_path(url)
    if path is not None:
        check_sqlite_path(path)
    if read_only:
        engine = _read_only_sqlite_engine(url, path, settings)
    else:
        engine = create_engine(
            engine_url(url),
            connect_args={"timeout": settings.busy_timeout},
            json_serializer=canonical_json,  # stored JSON is its own canonical form
        )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi.cursor()
        try:
            if read_only:
                cursor.execute("PRAGMA query_only=ON")
            else:
                if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    cursor.execute("PRAGMA journal_mode=WAL")  # once per file: it is persistent
                # What a write deletes or overwrites (a flushed buffer, a partial answer
                # replaced, a forgotten conversation, a merged full-text segment) is zeroed,
                # not left in free space for the file's bytes to give away (Ledger.forget).
                cursor.execute("PRAGMA secure_delete=ON")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA synchronous={settings.synchronous}")
            cursor.execute(f"PRAGMA busy_timeout={int(settings.busy_timeout * 1000)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("agentledger_write", False)
        send(conn, "BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _read_only_sqlite_engine(url: str, path: Path | None, settings: EngineSettings) -> Engine:
    """An engine whose every connection is new and opened read-only, as the files beside the
    database are at that moment (:func:`read_only_uri`): none is kept between transactions."""
    if path is None:
        raise ConfigurationError(
            "read_only needs a database file: an in-memory SQLite database starts empty"
        )
    engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": settings.busy_timeout})

    @event.listens_for(engine, "do_connect")
    def _open_read_only(
        _dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]
    ) -> None:
        cargs[:] = [read_only_uri(path)]
        cparams["uri"] = True

    return engine


def with_retries(
    engine: Engine,
    settings: EngineSettings,
    work: Callable[[], T],
    *,
    what: str,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """:func:`._failures.with_retries` for work on ``engine``, which raises SQLAlchemy's
    ``DBAPIError``, or the driver's own error: on a driver's own cursor, and from a cursor
    event's listener (SQLAlchemy 2.0 passes on what ``before_cursor_execute`` raises as it is)."""
    errors = (DBAPIError, sqlite3.DatabaseError, engine.dialect.loaded_dbapi.Error)
    return _failures.with_retries(settings, work, what=what, on_retry=on_retry, errors=errors)


@dataclass(slots=True)
class _Kept:
    """A connection of the handle's: since when it is kept open between transactions, and
    whether it logs its statements (SQLAlchemy decides that when it makes the connection)."""

    conn: Connection
    since: float
    logs: bool


class Connections:
    """The connections of a ledger handle's transactions.

    A few are kept open between transactions (taking a connection from the pool and giving
    it back costs more than a small transaction): one that just committed is used again by the
    next transaction, of any thread; one whose transaction failed is closed, never used again.
    On PostgreSQL the pool checks a connection before it hands it out (``pool_pre_ping``, a
    round trip): a server restarted meanwhile costs nothing then. A kept connection skips that
    round trip while it is in use (idle under :attr:`IDLE_REUSE` seconds) and nothing came
    from the server meanwhile (a server that ends a session says so on its socket before it
    closes it); otherwise it goes back to the pool, which checks it again. A read commits on
    PostgreSQL: psycopg forgets the statements it prepared on every ``ROLLBACK``.
    A process forked from the one that opened them does not use them.

    :meth:`close` waits for the transactions in flight (a write a cancelled run left to
    finish in a worker thread) to end and give their connections back, so that none is left
    open behind a closed ledger; a transaction that would begin after it is refused.
    """

    CLOSE_WAIT = 10.0
    """Seconds :meth:`close` waits for the transactions in flight to end."""
    IDLE_REUSE = 5.0
    """Seconds a kept PostgreSQL connection may sit idle and be used again unchecked."""

    HOLD_TIMES = 10_000
    """How many of the latest write transactions' lock hold times are kept."""

    def __init__(
        self,
        engine: Engine,
        *,
        keep: int = 2,
        database: Path | None = None,
        gate_timeout: float = 5.0,
        syncs_itself: bool = False,
    ) -> None:
        """``database``: the SQLite file a writer handle writes, whose write gate its write
        transactions take (:mod:`._write_gate`); ``syncs_itself``: its commits are synced to
        disk after the gate is let go (for ``synchronous="FULL"``), not under the lock."""
        self.engine = engine
        self._keep = keep
        self._gate_timeout = gate_timeout
        self._gate: WriteGate | None = None
        self._wal_sync: WalSync | None = None
        if database is not None and WriteGate.available():
            self._gate = WriteGate(gate_path(database))
            self._wal_sync = WalSync(database) if syncs_itself else None
        if self._wal_sync is not None:
            event.listen(engine, "checkin", _synced_by_sqlite)
        self.hold_times: collections.deque[float] = collections.deque(maxlen=self.HOLD_TIMES)
        """The seconds each of the latest write transactions held the write lock: from its
        ``BEGIN`` (``IMMEDIATE`` on SQLite) to its ``COMMIT`` or ``ROLLBACK``."""
        self._remote = engine.dialect.name != "sqlite"
        self._idle: dict[bool, list[_Kept]] = {True: [], False: []}
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._in_flight = 0
        self._depth = threading.local()
        self._enclosing = threading.local()
        self._closed = False
        self.transactions = 0
        """Transactions begun on these connections (every attempt of a retried one counts)."""
        self.lock_retries = 0
        """Transactions tried again because the database was locked (:func:`with_retries`)."""

    def note_retry(self) -> None:
        with self._lock:
            self.lock_retries += 1

    @contextlib.contextmanager
    def transaction(self, *, write: bool) -> Iterator[Connection]:
        """A connection inside one transaction (``BEGIN IMMEDIATE`` when ``write``, on SQLite),
        committed when the block ends (a read on SQLite is rolled back: it has nothing to
        commit), rolled back when it raises."""
        with self.in_use():
            gated = write and self._gate is not None and self._gate.enter(self._gate_timeout)
            try:
                taken = self._take(write)
                conn = taken.conn
                # Synced after the lock is let go while writers wait for it; by SQLite
                # in the commit otherwise (one fewer call; see ._write_gate).
                ours = (
                    write
                    and self._wal_sync is not None
                    and synced_by_us(conn, self._gate is not None and self._gate.contended())
                )
                begin_watching(conn, taken.logs)
                try:
                    transaction = conn.begin()
                    begun = time.perf_counter()
                    try:
                        yield conn
                    except BaseException:
                        transaction.rollback()
                        if write:
                            self.hold_times.append(time.perf_counter() - begun)
                        raise
                    if write:
                        transaction.commit()
                        self.hold_times.append(time.perf_counter() - begun)
                    elif self._remote:
                        _end_read(conn, transaction)
                    else:
                        transaction.rollback()
                except BaseException as exc:
                    self._discard(conn, exc)
                    raise
                finally:
                    end_watching(conn)
            finally:
                if gated:
                    self._gate.leave()  # type: ignore[union-attr]
            self._give(taken, write)
            if ours:
                self._synced()

    def _synced(self) -> None:
        """Sync the commit just made to disk (see :mod:`._write_gate`): the commit is done
        only when this returns; a sync that fails is the database failing."""
        assert self._wal_sync is not None
        try:
            self._wal_sync()
        except OSError as exc:
            raise LedgerUnavailableError(
                f"The transaction was committed, but syncing it to disk failed ({exc}): it may "
                "be lost if the machine loses power before the operating system writes it. "
                "Check the disk; what was committed before is kept."
            ) from exc

    def _discard(self, conn: Connection, exc: BaseException) -> None:
        """Close a connection whose transaction failed. One that a driver error left, which
        SQLAlchemy did not handle (a cursor listener's, which SQLAlchemy 2.0 passes on as it
        is), is in a state nobody knows: it is invalidated, not reset and pooled again."""
        driver_error = self.engine.dialect.loaded_dbapi.Error
        if isinstance(exc, driver_error) or isinstance(exc.__context__, driver_error):
            conn.invalidate(exc)
        conn.close()

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Counts the block as in flight for :meth:`close`; a block that begins after it (not
        one nested in a block already in flight on this thread, such as a retry of a
        transaction) is refused."""
        nested = getattr(self._depth, "value", 0)
        with self._lock:
            if nested == 0 and self._closed and self._pid == os.getpid():
                raise LedgerUnavailableError(
                    "This ledger handle was closed (Ledger.close()) before the transaction "
                    "began, so it did not run; what was committed before is kept. Open the "
                    "ledger again to use it."
                )
            self._in_flight += 1
        self._depth.value = nested + 1
        try:
            yield
        finally:
            self._depth.value = nested
            with self._lock:
                self._in_flight -= 1
                self._settled.notify_all()

    def write(self) -> contextlib.AbstractContextManager[Connection]:
        return self.transaction(write=True)

    def enclosing(self) -> tuple[Connection, Scope] | None:
        """The write transaction :meth:`Database.together` runs on this thread, with its
        scope (None when there is none)."""
        return getattr(self._enclosing, "value", None)

    def enclosing_reads_only(self) -> bool:
        """Whether this thread's enclosing transaction is :meth:`Database.reading`'s."""
        return bool(getattr(self._enclosing, "reads_only", False))

    @contextlib.contextmanager
    def enclose(
        self, conn: Connection, scope: Scope, *, reads_only: bool = False
    ) -> Iterator[None]:
        """Make ``conn``'s transaction, in ``scope``, this thread's enclosing one for the
        block (one that only reads when ``reads_only``)."""
        self._enclosing.value = (conn, scope)
        self._enclosing.reads_only = reads_only
        try:
            yield
        finally:
            self._enclosing.value = None
            self._enclosing.reads_only = False

    def read(self) -> contextlib.AbstractContextManager[Connection]:
        return self.transaction(write=False)

    def _take(self, write: bool) -> _Kept:
        with self._lock:
            self.transactions += 1
            if self._pid != os.getpid():  # forked: the parent's connections are not ours
                self._idle = {True: [], False: []}
                self._pid = os.getpid()
            idle = self._idle[write]
            kept = idle.pop() if idle else None
        # SQLAlchemy decides whether a connection logs its statements when it makes it: one
        # made before ``echo`` or the sqlalchemy.engine logger changed is replaced, so that
        # it logs as a new one would.
        logging = logs(self.engine)
        if kept is not None:
            if kept.logs == logging and (not self._remote or self._fresh(kept.conn, kept.since)):
                return kept
            kept.conn.close()  # back to the pool, which checks it before it hands it out again
        conn = self.engine.connect()
        return _Kept(conn.execution_options(**WRITE) if write else conn, 0.0, logging)

    def _fresh(self, conn: Connection, since: float) -> bool:
        """Whether a kept PostgreSQL connection may be used without the pool's check: used
        a moment ago, and nothing arrived on its socket since (a server that ends the session,
        shutting down or restarting, sends an error first; an idle session is sent nothing)."""
        if time.monotonic() - since > self.IDLE_REUSE:
            return False
        try:
            fileno = conn.connection.dbapi_connection.fileno()  # type: ignore[union-attr]
            readable, _, _ = select.select([fileno], [], [], 0)
        except (OSError, ValueError, AttributeError):
            return False
        return not readable

    def _give(self, taken: _Kept, write: bool) -> None:
        conn = taken.conn
        with self._lock:
            idle = self._idle[write]
            if len(idle) < self._keep and not conn.invalidated and self._pid == os.getpid():
                taken.since = time.monotonic()
                idle.append(taken)
                return
        conn.close()

    def close(self) -> None:
        """Wait (up to :attr:`CLOSE_WAIT` seconds) for the transactions in flight to end, then
        close the connections kept open (the engine's pool is the caller's to dispose)."""
        with self._lock:
            self._closed = True
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=self.CLOSE_WAIT)
            kept = [entry.conn for entry in [*self._idle[True], *self._idle[False]]]
            self._idle = {True: [], False: []}
        for conn in kept:
            with contextlib.suppress(Exception):
                conn.close()
        if self._gate is not None:
            self._gate.close()


_NORMAL = "agentledger_synced_by_us"
"""The key, in a SQLite connection's pool record, of whether the connection writes with
``synchronous=NORMAL`` because its commits are synced after the write gate is let go (absent:
as the engine set it)."""
_WAL = "agentledger_wal"
"""The key, in a SQLite connection's pool record, of whether its database is in WAL mode."""


def synced_by_us(conn: Connection, ours: bool) -> bool:
    """Make ``conn`` (a write connection of a handle that can sync its commits itself) commit
    with ``synchronous=NORMAL`` when ``ours``, and as the engine set it (``FULL``) when not:
    whether its commits are ours to sync. Only in WAL mode, where NORMAL syncs the log at
    checkpoints alone; a statement only when the mode changes."""
    info = conn.connection.info
    wal = info.get(_WAL)
    if wal is None:
        wal = info[_WAL] = _pragma(conn, "PRAGMA journal_mode") == "wal"
    ours = ours and wal
    if info.get(_NORMAL, False) != ours:
        _pragma(conn, f"PRAGMA synchronous={'NORMAL' if ours else 'FULL'}")
        info[_NORMAL] = ours
    return ours


def _pragma(conn: Connection, sql: str) -> Any:
    """The first value ``sql`` gives, run on ``conn``'s driver connection outside any
    transaction of SQLAlchemy's."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    cursor = dbapi.cursor()
    try:
        found = cursor.execute(sql).fetchone()
        return None if found is None else found[0]
    finally:
        cursor.close()


def _synced_by_sqlite(dbapi: Any, record: ConnectionPoolEntry) -> None:
    """A connection given back to the pool writes with ``synchronous=FULL`` again: whoever
    takes it next (a migration, a check) has its commits synced by SQLite."""
    if dbapi is None or not record.info.pop(_NORMAL, False):
        return
    with contextlib.suppress(Exception):
        dbapi.execute("PRAGMA synchronous=FULL")


def _end_read(conn: Connection, transaction: RootTransaction) -> None:
    """Commit a read on PostgreSQL (a ``ROLLBACK`` would make psycopg drop the statements it
    prepared). Its COMMIT only ends it: when that fails, what it read stands (it was read in
    the transaction), and the connection, in a state nobody knows, is not used again."""
    try:
        transaction.commit()
    except DBAPIError:
        conn.invalidate()


@dataclass(frozen=True)
class Database:
    """A ledger handle's database: its engine, the connections it keeps open, its settings and
    its clock. Every transaction goes through :meth:`read` or :meth:`write`, which retry while
    the database is locked and turn its failures into the ledger's errors. A read-only handle
    (``read_only`` says why it is one) refuses every write before it touches the database.
    A scoped handle's database (``scope``) begins each transaction in its scope
    (:meth:`Scope.enter`); scoped handles share their ledger's connections."""

    engine: Engine
    connections: Connections
    settings: EngineSettings
    clock: Clock
    read_only: ReadOnly | None = None
    scope: Scope = EVERYTHING

    def read(self, what: str, read: Callable[[Connection], T]) -> T:
        """``read`` on a connection of its own: tried again while the database is locked, a
        failed database as :class:`LedgerUnavailableError`, and a row that cannot be decoded
        (a damaged file) as :class:`LedgerCorruptError`, never a half answer."""
        # Only what is read is decoded (a connection's checkout runs the application's pool
        # listeners, whose errors are theirs, not a damaged row's).
        with self.connections.in_use():
            return self._with_retries(
                lambda: self.read_once(lambda conn: decoded(what, lambda: read(conn))), what
            )

    def read_once(self, read: Callable[[Connection], T]) -> T:
        """``read`` in one transaction in the handle's scope, tried once, the database's error
        as it is. The connection of a transaction that failed is closed even when its rollback
        failed too (SQLAlchemy before 2.1 leaves the connection of a ``with engine.connect()``
        block open then, until the garbage collector finds it)."""
        joined = self.joined()
        if joined is not None:
            return read(joined)
        with self.connections.read() as conn:
            self.scope.enter(conn)
            return read(conn)

    def write(self, what: str, work: Callable[[Connection], T]) -> T:
        """``work`` in one write transaction, retried whole while the database is locked; inside
        :meth:`together`, a savepoint of its transaction (all or nothing, committed with it)."""
        self.check_writable(what)
        joined = self.joined()
        if joined is not None:
            if self.connections.enclosing_reads_only():
                raise UsageError(
                    f"{what}: a write inside Ledger.reading, whose transaction only reads; "
                    "write before or after it"
                )
            with joined.begin_nested():
                return work(joined)

        def attempt() -> T:
            with self.connections.write() as conn:
                self.scope.enter(conn)
                return work(conn)

        with self.connections.in_use():
            return self._with_retries(attempt, what)

    def together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction that every read and write of this handle's
        scope on this thread joins while it runs (each write a savepoint in it): they commit
        at once, with one sync to disk, or not at all. Tried again only while the database is
        locked before ``work`` begins, never once it has (what it did besides writing, a
        turn's state, would be done twice): a lock met then is :class:`LedgerBusyError`, with
        nothing written."""
        if self.joined() is not None:
            return work()
        self.check_writable(what)
        begun = False

        def attempt() -> T:
            nonlocal begun
            if begun:
                raise LedgerBusyError(
                    f"{what}: the database was locked by another writer partway through the "
                    "transaction, so nothing of it was written; try again"
                )
            with self.connections.write() as conn:
                self.scope.enter(conn)
                begun = True
                with self.connections.enclose(conn, self.scope):
                    return work()

        with self.connections.in_use():
            return self._with_retries(attempt, what)

    def reading(self, what: str, work: Callable[[], T]) -> T:
        """``work`` with every read of this handle's scope on this thread in one read
        transaction: one snapshot of the database (``REPEATABLE READ`` on PostgreSQL), so that
        what it reads together is of one moment, whatever other processes commit meanwhile.
        It takes no lock a writer waits for. A write inside it is a :class:`UsageError`;
        inside :meth:`together` or another reading, their transaction."""
        if self.joined() is not None:
            return work()

        def attempt() -> T:
            with self.connections.read() as conn:
                if conn.dialect.name == "postgresql":
                    send(conn, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                self.scope.enter(conn)
                with self.connections.enclose(conn, self.scope, reads_only=True):
                    return decoded(what, work)

        with self.connections.in_use():
            return self._with_retries(attempt, what)

    def joined(self) -> Connection | None:
        """The connection of this thread's :meth:`together` transaction, when it is of this
        handle's scope."""
        enclosing = self.connections.enclosing()
        if enclosing is None or enclosing[1] != self.scope:
            return None
        return enclosing[0]

    def _with_retries(self, work: Callable[[], T], what: str) -> T:
        on_retry = self.connections.note_retry
        return with_retries(self.engine, self.settings, work, what=what, on_retry=on_retry)

    def check_writable(self, what: str) -> None:
        """Raise :class:`LedgerReadOnlyError` for the write ``what`` on a read-only handle."""
        if self.read_only is not None:
            where = self.engine.url.render_as_string(hide_password=True)
            raise self.read_only.refusal(what, where)

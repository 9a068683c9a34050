"""``LedgerReader``: a SQLite ledger read through the standard library's ``sqlite3``, without
SQLAlchemy, for a program that only reads and must start at once (the command line's read
commands: importing SQLAlchemy alone takes longer than they may).

It reads what :class:`~agentledger.ledger.Ledger` reads, through the same functions
(:mod:`._queries`, :mod:`._lookup`, :mod:`._search`, :mod:`._run_nodes`), with the same SQL
text and the same checks: each row against its checksum, every sequence for gaps, the scope,
ids by a unique prefix. Its records hold what ``Ledger``'s rows hold, as a mapping of the row's
columns (whose keys are also attributes).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from .._values import Messages, Spend, Usage
from ..errors import ConfigurationError, LedgerOpenError, SchemaVersionError
from ._access import (
    ReadOnly,
    check_sqlite_path,
    probe_sqlite_tables,
    read_only_access,
    read_only_uri,
)
from ._columns import decoded_rows, duration_ms, usage_of
from ._failures import EngineSettings, decoded, is_busy, is_read_only, open_error, with_retries
from ._queries import (
    in_context,
)
from ._reading import LedgerReads
from ._revisions import HEAD, check_not_newer, not_at_head, schema_revision, tables
from ._row_mapping import Row
from ._run_nodes import inclusive, walk
from ._scope import EVERYTHING, Scope
from ._sql import Reads
from ._urls import normalize_url, redact, sqlite_path
from .checksums import check_row

T = TypeVar("T")
V = TypeVar("V")


class Record(Mapping[str, Any]):
    """A row as :class:`LedgerReader` returns it: its columns by name, each also an attribute
    (``record.id``), holding the values ``Ledger``'s row would (times aware, JSON decoded,
    enums as their members). Checked against its checksum when it was read."""

    __slots__ = ("_row",)

    def __init__(self, row: Mapping[str, Any]) -> None:
        self._row = dict(row)

    def __getitem__(self, name: str) -> Any:
        return self._row[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._row[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no column {name!r}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self._row.get('id')!r})"


class ConversationRecord(Record):
    """A row of ``conversations``: what ``Ledger.conversation`` returns as a
    :class:`~agentledger.ledger.Conversation`."""


class RunRecord(Record):
    """A row of ``agent_runs``: what ``Ledger.run`` returns as an
    :class:`~agentledger.ledger.AgentRun`, with its :attr:`usage` and :attr:`duration_ms`."""

    @property
    def usage(self) -> Usage:
        """The run's own steps' tokens (exclusive of its subagents'), as one value."""
        return usage_of(self._row)

    @property
    def duration_ms(self) -> float | None:
        """From its start to its end; ``None`` while it runs."""
        return duration_ms(self._row["started_at"], self._row["finished_at"])


@dataclass(frozen=True)
class RunNode:
    """A run and the subagent runs below it, with what each spent: what ``Ledger.run_tree``
    returns as a :class:`~agentledger.ledger.RunTree`."""

    run: RunRecord
    exclusive: Spend
    children: tuple[RunNode, ...] = field(default=())

    @property
    def inclusive(self) -> Spend:
        return inclusive(self)

    def walk(self) -> Iterator[RunNode]:
        """This node, then its descendants, depth first in the order they started."""
        return walk(self)


class LedgerReader(LedgerReads[ConversationRecord, RunRecord, RunNode]):
    """Reads a SQLite ledger through ``sqlite3``, without SQLAlchemy: the reads of
    :class:`~agentledger.ledger.Ledger` (conversations, messages and turns, runs, steps, run
    trees, traces and buffers, search, short ids: the same methods, :mod:`._reading`), each in
    a transaction of its own, never writing.

    ``LedgerReader.open(path)`` refuses a database that is not a ledger at the newest schema
    (it never migrates); with ``read_only=True``, or where this user may not write the file or
    its directory, it reads as ``Ledger.open(read_only=True)`` does, creating no file beside
    the ledger. For PostgreSQL, open a ``Ledger``.
    """

    def __init__(
        self, path: Path, where: str, access: ReadOnly | None, settings: EngineSettings
    ) -> None:
        self.path, self.where, self._access, self._settings = path, where, access, settings
        self._scope = EVERYTHING
        self._kept: sqlite3.Connection | None = None
        self._held: sqlite3.Connection | None = None
        """The connection of the :meth:`reading` under way, whose transaction every read
        joins."""
        self._shared_from: LedgerReader | None = None

    @classmethod
    def open(
        cls, url: str | os.PathLike[str], *, read_only: bool = False, busy_timeout: float = 5.0
    ) -> LedgerReader:
        """A reader of the SQLite ledger at ``url`` (a file path or a ``sqlite:///`` URL)."""
        normalized = normalize_url(url)
        path = sqlite_path(normalized)
        if path is None:
            raise ConfigurationError(
                f"LedgerReader reads a SQLite ledger file, not {redact(normalized)!r}: give "
                "the path of one, or open a Ledger (Ledger.open) for PostgreSQL"
            )
        if not path.exists():
            raise SchemaVersionError(
                f"no ledger at {path}: create it with `agentledger db upgrade`, or Ledger.open"
            )
        check_sqlite_path(path)
        access = read_only_access(path, asked=read_only)
        reader = cls(path, redact(normalized), access, EngineSettings(busy_timeout=busy_timeout))
        try:
            with_retries(reader._settings, reader._check, what=f"opening {reader.where}")
        except BaseException:
            reader.close()
            raise
        return reader

    def _check(self) -> None:
        """Read the first row of every table, and refuse a database not at the newest
        schema, as ``Ledger.open(migrate=False)`` does."""
        try:
            with self._transaction() as conn:
                query = conn.execute  # a statement without parameters; its rows

                def rows(sql: str) -> Sequence[Sequence[Any]]:
                    return list(query(sql).fetchall())

                probe_sqlite_tables(rows)
                revision = schema_revision("sqlite", rows)
                check_not_newer(revision)
                if revision != HEAD:
                    raise not_at_head(self.where, tables("sqlite", rows))
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            if is_busy(exc) or is_read_only(exc):
                raise
            raise LedgerOpenError(open_error(self.where, exc)) from exc

    def scoped(self, tenant_id: str | None = None, owner_id: str | None = None) -> LedgerReader:
        """A reader that sees only the conversations of ``tenant_id`` and ``owner_id`` (and
        the runs and rows that came from them), as ``Ledger.scoped`` does. It shares this
        reader's connection: closing it closes nothing."""
        reader = LedgerReader(self.path, self.where, self._access, self._settings)
        reader._scope = self._scope.narrowed(tenant_id, owner_id)
        reader._shared_from = self._shared_from or self
        return reader

    @property
    def scope(self) -> Scope:
        """The tenant and owner this reader keeps to (``Scope()``: the whole ledger)."""
        return self._scope

    @property
    def read_only(self) -> bool:
        """Always true: a reader never writes (this says whether it reads as a read-only
        handle does, on a file it was asked not to write or may not write)."""
        return True

    @property
    def dialect(self) -> str:
        return "sqlite"

    def close(self) -> None:
        """Close the connection kept open (on a scoped reader, nothing)."""
        if self._shared_from is None and self._kept is not None:
            self._kept.close()
            self._kept = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LedgerReader({self.where!r})"

    # --- the reads ------------------------------------------------------------------------------

    def model_context(self, conversation_id: str) -> Messages:
        """The conversation as the model sees it now, as ``Ledger.model_context``."""
        return self._conversation(conversation_id, in_context)

    def reading(self, what: str, work: Callable[[], T]) -> T:
        """``work`` with every read of this reader (and of the readers scoped from it) in one
        read transaction, one snapshot of the database, as ``Ledger.reading``: what it reads
        together is of one moment, whatever other processes commit meanwhile."""
        owner = self._shared_from or self
        if owner._held is not None:
            return work()

        def attempt() -> T:
            with self._transaction() as conn:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # the snapshot: now
                owner._held = conn
                try:
                    return decoded(what, work)
                finally:
                    owner._held = None

        return with_retries(self._settings, attempt, what=what)

    # --- transactions ---------------------------------------------------------------------------

    def _conversation_of(self, row: Row) -> ConversationRecord:
        check_row("conversations", row)
        return ConversationRecord(row)

    def _run_of(self, row: Row) -> RunRecord:
        check_row("agent_runs", row)
        return RunRecord(row)

    def _node_of(self, row: Row, exclusive: Spend, children: tuple[RunNode, ...]) -> RunNode:
        return RunNode(self._run_of(row), exclusive, children)

    def _reads(self, what: str, read: Callable[[Reads], T]) -> T:
        """``read`` (given a :class:`._sql.Reads`) in a transaction of its own: tried again
        while the database is locked, a row that cannot be decoded as
        :class:`LedgerCorruptError`."""

        def work() -> T:
            with self._transaction() as conn:
                return decoded(what, lambda: read(_SQLiteReads(conn)))

        return with_retries(self._settings, work, what=what)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection in a read transaction, ended with the block. A read-only reader opens
        a connection per transaction, as a read-only ``Ledger`` does (a writer that started
        meanwhile is seen through its -wal and -shm files); another keeps one open."""
        owner = self._shared_from or self
        if owner._held is not None:  # inside a reading: its transaction
            yield owner._held
            return
        conn = owner._kept or owner._connect()
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.rollback()
        except BaseException:
            if conn is not owner._kept:
                conn.close()
            raise
        if owner._access is not None:
            conn.close()
        else:
            owner._kept = conn

    def _connect(self) -> sqlite3.Connection:
        if self._access is not None:
            target = read_only_uri(self.path)
        else:  # the file as it is, never created (it was there at open)
            target = f"{self.path.absolute().as_uri()}?mode=rw"
        conn = sqlite3.connect(
            target, uri=True, timeout=self._settings.busy_timeout, isolation_level=None
        )
        try:
            conn.execute("PRAGMA query_only=ON")  # it never writes, whatever it is asked
        except BaseException:
            conn.close()
            raise
        return conn


class _SQLiteReads:
    """A :class:`._sql.Reads` on a ``sqlite3`` connection."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(
        self, sql: str, params: Mapping[str, Any], table: str | None = None
    ) -> list[dict[str, Any]]:
        cursor = self.conn.execute(sql, params)
        names = [description[0] for description in cursor.description]
        fetched = cursor.fetchall()
        if table is None:
            return [dict(zip(names, values, strict=True)) for values in fetched]
        return decoded_rows(table, names, fetched)

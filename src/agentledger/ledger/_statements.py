"""The ledger's one fast path for statements: compiled once per dialect, sent as SQL text.
Every statement of a run's transactions (begin, each step, commit, fail, claim, the heartbeat)
goes through :func:`statements_for`; reads that are not on a run's hot path use SQLAlchemy
Core as it is.

A step of a run is a handful of small statements. Sent through SQLAlchemy's ``execute``, each
pays for looking its compiled form up by its cache key, building an execution context and
wrapping the result: several times what the database itself takes. Here a statement is compiled
once, with the bind processors of its columns' types (the same ones SQLAlchemy would apply, so
the stored values are exactly the same), kept by the statement's identity, and sent by
:func:`send`: on the DBAPI cursor of the transaction's connection (``Connection.connection``)
while nothing watches that connection's statements, else with ``Connection.exec_driver_sql``.
Measured against Core's ``execute`` in one run: section 10 of ``bench/RESULTS.md``.

So whatever watches statements sees every one as SQLAlchemy's own: with ``echo=True``, the
``sqlalchemy.engine`` logger at INFO, or a listener of ``before_cursor_execute``,
``after_cursor_execute`` or ``handle_error``, each goes through ``exec_driver_sql``. Which way
a transaction's statements go is decided as it begins (:func:`begin_watching`), as SQLAlchemy
decides whether a connection logs when it makes it: a listener added, or logging turned on,
while a transaction is in flight sees the statements of those begun after. On the cursor, a
driver error comes out as it does from ``execute``: SQLAlchemy's
:class:`~sqlalchemy.exc.DBAPIError` around it, a lost connection invalidated.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, CursorResult, Engine, Insert, Update
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, Select
from sqlalchemy.sql.compiler import SQLCompiler

from .tables import STAMPED_TABLES

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIModule  # SQLAlchemy 2.1's name for it

_MISSING = object()


class Compiled:
    """One statement compiled for one dialect: its SQL text and how to bind a row to it."""

    __slots__ = (
        "_dialect",
        "_fetch",
        "_names",
        "_required",
        "_results",
        "_selected",
        "_to_bind",
        "positional",
        "sql",
    )

    def __init__(
        self, statement: ClauseElement, dialect: Dialect, keys: Sequence[str] | None = None
    ) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys or ()) or None)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        self.positional = bool(compiled.positional)
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        names = compiled.positiontup if compiled.positional else list(by_name)
        assert names is not None
        defaults = _scalar_defaults(statement)
        self._names = list(names)
        self._fetch: list[tuple[str, Any]] = []
        self._to_bind: list[tuple[int, Callable[[Any], Any]]] = []
        for index, name in enumerate(names):
            bind = by_name[name]
            fallback = defaults.get(name, _MISSING if bind.required else bind.effective_value)
            self._fetch.append((name, fallback))
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                self._to_bind.append((index, processor))
        self._required = {name for name, fallback in self._fetch if fallback is _MISSING}
        self._dialect = dialect
        self._selected = (
            [(c.name, c.type.dialect_impl(dialect)) for c in statement.selected_columns]
            if isinstance(statement, Select)
            else []
        )
        self._results: list[tuple[str, Callable[[Any], Any]]] | None = None

    def params(self, row: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """``row``'s values in the statement's order (or by name), through the bind processors;
        a column the row leaves out takes its scalar default."""
        for name in self._required:
            if name not in row:
                raise KeyError(f"no value for {name!r} in {self.sql.split('(')[0].strip()}")
        get = row.get
        values = [get(name, fallback) for name, fallback in self._fetch]
        for index, processor in self._to_bind:
            values[index] = processor(values[index])
        if self.positional:
            return tuple(values)
        return dict(zip(self._names, values, strict=True))

    def index_of(self, name: str) -> int:
        """Where the value of bind ``name`` is in the positional parameters."""
        assert self.positional, "prepared statements need positional parameters"
        return self._names.index(name)

    def rows(self, sent: Sent) -> list[dict[str, Any]]:
        """The rows of this select, ``sent``, as dicts by column name, through the result
        processors."""
        assert sent.description is not None
        return self.dicts(sent.description, sent.fetchall())

    def dicts(
        self, description: Sequence[Sequence[Any]], fetched: Sequence[Sequence[Any]]
    ) -> list[dict[str, Any]]:
        """Rows ``fetched`` by this select, whose cursor described them as ``description``, as
        dicts by column name, through the result processors."""
        if self._results is None:  # some drivers' processors depend on the type the cursor says
            results: list[tuple[str, Callable[[Any], Any]]] = []
            for (name, impl), column in zip(self._selected, description, strict=True):
                processor = impl.result_processor(self._dialect, column[1])
                if processor is not None:
                    results.append((name, processor))
            self._results = results
        names = [name for name, _ in self._selected]
        out = [dict(zip(names, values, strict=True)) for values in fetched]
        for name, process in self._results:
            for row in out:
                value = row[name]
                if value is not None:
                    row[name] = process(value)
        return out


def _scalar_defaults(statement: ClauseElement) -> dict[str, Any]:
    """The scalar Python-side defaults of an insert's table, by column key."""
    if not isinstance(statement, Insert):
        return {}
    return {
        column.key: column.default.arg  # type: ignore[attr-defined]
        for column in statement.table.columns
        if column.default is not None and column.default.is_scalar
    }


class Statements:
    """The compiled forms of a ledger's hot statements, for its engine's dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._compiled: dict[tuple[int, tuple[str, ...]], Compiled] = {}
        self._keep: list[ClauseElement] = []  # the statements keyed by id() stay alive
        self._lock = threading.Lock()

    def of(self, statement: ClauseElement, keys: Sequence[str] = ()) -> Compiled:
        key = (id(statement), tuple(keys))
        found = self._compiled.get(key)
        if found is None:
            found = Compiled(statement, self.dialect, keys)
            with self._lock:
                self._keep.append(statement)
                self._compiled[key] = found
        return found

    def execute(
        self,
        conn: Connection,
        statement: ClauseElement,
        row: Mapping[str, Any] | None = None,
    ) -> Sent:
        """Run ``statement`` with one row of values; what it gives back (``rowcount``).

        An insert's row names its columns; so does an update's, which sets those of its keys
        that are columns (its where clause's bind names are not column names)."""
        row = row or {}
        keys: tuple[str, ...] = ()
        if isinstance(statement, Insert | Update):
            row = stamped(conn, statement, row)
            keys = tuple(row)
        compiled = self.of(statement, keys)
        return send(conn, compiled.sql, compiled.params(row))

    def execute_many(
        self, conn: Connection, statement: Insert, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert ``rows`` (with the same keys) in one ``executemany`` (one row: one
        ``execute``, which psycopg sends faster)."""
        self.run(conn, self.prepared(statement, rows))

    def prepared(self, statement: Insert | Update, rows: Sequence[Mapping[str, Any]]) -> Prepared:
        """``statement`` with ``rows`` (one row for an update) bound to it ahead of its
        transaction, so that :meth:`run` only sends them: all but the change stamp, which a
        stamped table's rows on SQLite get in the transaction (:func:`stamped`)."""
        stamps = _stamps(self.dialect, statement)
        rows = [{**row, CHANGE_SEQ: 0} for row in rows] if stamps else list(rows)
        if not rows:
            return Prepared("", [], None, many=False)
        compiled = self.of(statement, tuple(rows[0]))
        params = [compiled.params(row) for row in rows]
        at = compiled.index_of(CHANGE_SEQ) if stamps else None
        return Prepared(compiled.sql, params, at, many=len(params) > 1)

    def run(self, conn: Connection, prepared: Prepared) -> Sent | None:
        """Send ``prepared`` in ``conn``'s transaction, with the transaction's change stamp."""
        params = prepared.params
        if not params:
            return None
        if prepared.stamp_at is not None:
            stamp, at = change_stamp(conn), prepared.stamp_at
            params = [(*p[:at], stamp, *p[at + 1 :]) for p in params]
        if prepared.many:
            return send(conn, prepared.sql, params, many=True)
        return send(conn, prepared.sql, params[0])

    def select(
        self, conn: Connection, statement: Select[Any], row: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of a select, as dicts by column name."""
        compiled = self.of(statement)
        return compiled.rows(send(conn, compiled.sql, compiled.params(row or {})))


@dataclass(frozen=True)
class Prepared:
    """A statement with its rows bound ahead of its transaction (:meth:`Statements.prepared`):
    its SQL, each row's parameters, and where in them the change stamp goes (``None``: the
    statement is sent as it is)."""

    sql: str
    params: list[Any]
    stamp_at: int | None
    many: bool


CHANGE_SEQ = "change_seq"
_STAMPED = frozenset(STAMPED_TABLES)
_NEXT_STAMP = "UPDATE agentledger_changes SET change_seq = change_seq + 1 RETURNING change_seq"
_STAMP = "agentledger.change_stamp"


def stamped(
    conn: Connection, statement: Insert | Update, row: Mapping[str, Any]
) -> Mapping[str, Any]:
    """On SQLite, ``row`` with its transaction's change stamp when ``statement`` writes a
    stamped table (revision 0009: a trigger stamps only what is written without one). On
    PostgreSQL a trigger sets every stamp, the writing transaction's id."""
    if not _stamps(conn.dialect, statement):
        return row
    return {**row, CHANGE_SEQ: change_stamp(conn)}


def _stamps(dialect: Dialect, statement: Insert | Update) -> bool:
    """Whether the writer stamps ``statement``'s rows: on SQLite, a stamped table's."""
    return dialect.name == "sqlite" and statement.table.name in _STAMPED  # type: ignore[union-attr]


def change_stamp(conn: Connection) -> int:
    """The change stamp of ``conn``'s transaction, on SQLite: the ledger's counter, raised once,
    at the transaction's first stamped write. One writer at a time, so stamps grow in commit
    order, and a reader that saw the counter at ``n`` has seen every row stamped ``n`` or less
    (a transaction rolled back, or tried again, gives its stamp back with its rows)."""
    transaction = conn.get_transaction()
    held = conn.info.get(_STAMP)
    if held is not None and held[0] is transaction:
        return int(held[1])
    stamp = int(send(conn, _NEXT_STAMP).fetchall()[0][0])
    conn.info[_STAMP] = (transaction, stamp)
    return stamp


_BY_DIALECT: weakref.WeakKeyDictionary[Dialect, Statements] = weakref.WeakKeyDictionary()
_BY_DIALECT_LOCK = threading.Lock()


def statements_for(dialect: Dialect) -> Statements:
    """The compiled statements of ``dialect`` (one set per engine)."""
    found = _BY_DIALECT.get(dialect)
    if found is None:
        with _BY_DIALECT_LOCK:
            found = _BY_DIALECT.setdefault(dialect, Statements(dialect))
    return found


class Sent(Protocol):
    """What a statement sent gives back, read as a DBAPI cursor is."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Sequence[Sequence[Any]] | None: ...

    def fetchall(self) -> Sequence[Sequence[Any]]: ...


class _Result:
    """SQLAlchemy's result of a statement, read as a DBAPI cursor is."""

    __slots__ = ("_result", "description")

    def __init__(self, result: CursorResult[*tuple[Any, ...]]) -> None:
        self._result = result
        self.description = result.cursor.description if result.returns_rows else None

    @property
    def rowcount(self) -> int:
        return self._result.rowcount

    def fetchall(self) -> Sequence[Sequence[Any]]:
        return self._result.fetchall()


def send(conn: Connection, sql: str, params: Any = (), *, many: bool = False) -> Sent:
    """Send ``sql`` with ``params`` (a sequence of them, ``many``) in ``conn``'s transaction:
    with ``exec_driver_sql`` when anything watches its statements, else on its DBAPI cursor,
    a driver error raised as ``execute`` raises it."""
    watched_now = _WATCHED.get(conn)
    if watched_now is None:  # not in a transaction :func:`begin_watching` was told of
        watched_now = watched(conn)
    if watched_now:
        return _Result(conn.exec_driver_sql(sql, params))
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _as_sqlalchemy_raises(conn, exc, sql, params, cursor, many) from exc
    return cursor


ENGINE_LOGGER = logging.getLogger("sqlalchemy.engine.Engine")
"""The logger SQLAlchemy logs an engine's statements on."""


def logs(engine: Engine) -> bool:
    """Whether SQLAlchemy logs ``engine``'s statements (``echo``, or its logger at INFO)."""
    return bool(engine.echo) or ENGINE_LOGGER.isEnabledFor(logging.INFO)


def watched(conn: Connection) -> bool:
    """Whether anything watches ``conn``'s statements: SQLAlchemy's logging, or a listener of
    its cursor events or of its errors."""
    return logs(conn.engine) or listened(conn)


def listened(conn: Connection) -> bool:
    """Whether a listener of its cursor events or of its errors watches ``conn``'s statements."""
    events = conn.dispatch
    cursor_events = events.before_cursor_execute or events.after_cursor_execute
    return bool(cursor_events or conn.dialect.dispatch.handle_error)


_WATCHED: dict[Connection, bool] = {}
"""Whether anything watches the statements of each connection's transaction in flight, as it
began (:func:`begin_watching`)."""


def begin_watching(conn: Connection, logging: bool) -> None:
    """Decide, as ``conn``'s transaction begins, whether anything watches its statements
    (``logging``: whether ``conn`` logs them) until :func:`end_watching`: asked once, not at
    each statement (asking SQLAlchemy's events costs a tenth of a short read's own work)."""
    _WATCHED[conn] = logging or listened(conn)


def end_watching(conn: Connection) -> None:
    _WATCHED.pop(conn, None)


def _as_sqlalchemy_raises(
    conn: Connection, exc: DBAPIModule.Error, sql: str, params: Any, cursor: Any, many: bool
) -> BaseException:
    """The driver's error ``exc`` as ``Connection.execute`` raises it: SQLAlchemy's
    ``DBAPIError`` of its kind around it, the connection invalidated when it was lost."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor)
    if lost:
        conn.invalidate(exc)
    return DBAPIError.instance(
        sql,
        params,
        exc,
        dialect.loaded_dbapi.Error,
        hide_parameters=conn.engine.hide_parameters,
        connection_invalidated=lost,
        dialect=dialect,
        ismulti=many,
    )

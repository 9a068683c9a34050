"""The ledger's one fast path for statements: compiled once per dialect, run on the driver's
cursor. Every statement of a run's transactions (begin, each step, commit, fail, claim, the
heartbeat) goes through :func:`statements_for`; reads that are not on a run's hot path use
SQLAlchemy Core as it is.

A step of a run is a handful of small statements. Sent through SQLAlchemy's ``execute``, each
pays for looking its compiled form up, building an execution context and wrapping the result:
several times what the database itself takes. Here a statement is compiled once, with the bind
processors of its columns' types (the same ones SQLAlchemy would apply, so the stored values
are exactly the same), and run on the cursor of the SQLAlchemy :class:`Connection` the
transaction holds. Measured against SQLAlchemy Core in one run (``bench/statements.py``): Core's
``execute`` takes 1.5x to 1.8x this path's time for a whole step transaction on SQLite and 1.2x
on PostgreSQL, ``exec_driver_sql`` with the same compiled text 1.2x and 1.1x.

What ``execute`` does around the cursor still happens: the connection's
``before_cursor_execute`` and ``after_cursor_execute`` listeners see every statement (with
SQLAlchemy's own arguments, the execution context aside, which is ``None``); ``echo=True`` and
the ``sqlalchemy.engine`` logger at INFO log it, with its parameters (``hide_parameters``
respected); and a driver error goes through SQLAlchemy's own handling (``handle_error``
listeners, the :class:`~sqlalchemy.exc.DBAPIError`, a lost connection invalidated), as from
``execute``. That uses a few of SQLAlchemy's private methods (``Connection._log_info``,
``_handle_dbapi_exception``), which ``tests/test_statement_logging.py`` pins.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Insert, Update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement, Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.util import _repr_params

from .tables import STAMPED_TABLES

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

    def params(self, row: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
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
            return values
        return dict(zip(self._names, values, strict=True))

    def rows(self, cursor: Any) -> list[dict[str, Any]]:
        """The rows of a select as dicts by column name, through the result processors."""
        return self.dicts(cursor, cursor.fetchall())

    def dicts(self, cursor: Any, fetched: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        """Rows ``fetched`` from ``cursor`` (which ran this select) as dicts by column name,
        through the result processors."""
        if self._results is None:  # some drivers' processors depend on the type the cursor says
            results: list[tuple[str, Callable[[Any], Any]]] = []
            for (name, impl), description in zip(self._selected, cursor.description, strict=True):
                processor = impl.result_processor(self._dialect, description[1])
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
    ) -> Any:
        """Run ``statement`` with one row of values; the driver's cursor (``rowcount``).

        An insert's row names its columns; so does an update's, which sets those of its keys
        that are columns (its where clause's bind names are not column names)."""
        row = row or {}
        keys: tuple[str, ...] = ()
        if isinstance(statement, Insert | Update):
            row = stamped(conn, statement, row)
            keys = tuple(row)
        compiled = self.of(statement, keys)
        return run_on_cursor(conn, compiled.sql, compiled.params(row))

    def execute_many(
        self, conn: Connection, statement: Insert, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert ``rows`` (with the same keys) in one ``executemany`` (one row: one
        ``execute``, which psycopg sends faster)."""
        if not rows:
            return
        rows = [stamped(conn, statement, row) for row in rows]
        compiled = self.of(statement, tuple(rows[0]))
        if len(rows) == 1:
            run_on_cursor(conn, compiled.sql, compiled.params(rows[0]))
            return
        run_on_cursor(conn, compiled.sql, [compiled.params(row) for row in rows], many=True)

    def select(
        self, conn: Connection, statement: Select[Any], row: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of a select, as dicts by column name."""
        compiled = self.of(statement)
        return compiled.rows(run_on_cursor(conn, compiled.sql, compiled.params(row or {})))


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
    if conn.dialect.name != "sqlite" or statement.table.name not in _STAMPED:  # type: ignore[union-attr]
        return row
    return {**row, CHANGE_SEQ: change_stamp(conn)}


def change_stamp(conn: Connection) -> int:
    """The change stamp of ``conn``'s transaction, on SQLite: the ledger's counter, raised once,
    at the transaction's first stamped write. One writer at a time, so stamps grow in commit
    order, and a reader that saw the counter at ``n`` has seen every row stamped ``n`` or less
    (a transaction rolled back, or tried again, gives its stamp back with its rows)."""
    transaction = conn.get_transaction()
    held = conn.info.get(_STAMP)
    if held is not None and held[0] is transaction:
        return int(held[1])
    stamp = int(run_on_cursor(conn, _NEXT_STAMP).fetchone()[0])
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


def run_on_cursor(conn: Connection, sql: str, params: Any = (), *, many: bool = False) -> Any:
    """Run ``sql`` on the driver's cursor of ``conn``, as ``exec_driver_sql`` would (listeners,
    statement logging, errors and ``handle_error``) at a fraction of its cost; the cursor."""
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    events = conn.dispatch
    try:
        if events.before_cursor_execute:
            for listener in events.before_cursor_execute:
                listener(conn, cursor, sql, params, None, many)
        if conn._echo:  # echo=True, or the sqlalchemy.engine logger at INFO
            _log(conn, sql, params, many)
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
        if events.after_cursor_execute:
            for listener in events.after_cursor_execute:
                listener(conn, cursor, sql, params, None, many)
    except conn.dialect.loaded_dbapi.Error as exc:
        # SQLAlchemy's own handling, as for execute(): handle_error listeners, the DBAPIError,
        # the cursor closed, a lost connection invalidated (with the pool's other connections).
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
    return cursor


def _log(conn: Connection, sql: str, params: Any, many: bool) -> None:
    """The statement and its parameters, logged as ``Connection.execute`` logs them."""
    conn._log_info(sql)
    if conn.engine.hide_parameters:
        conn._log_info("[compiled once] [SQL parameters hidden due to hide_parameters=True]")
    else:
        conn._log_info("[compiled once] %r", _repr_params(params, batches=10, ismulti=many))

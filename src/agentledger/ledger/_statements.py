"""The hot statements, compiled once per dialect and run on the driver's cursor.

A step of a run is a handful of small statements. Sent through SQLAlchemy's ``execute``, each
pays for looking its compiled form up, building an execution context and wrapping the result:
several times what the database itself takes. Here a statement is compiled once, with the bind
processors of its columns' types (the same ones SQLAlchemy would apply, so the stored values
are exactly the same), and run on the cursor of the SQLAlchemy :class:`Connection` the
transaction holds. The connection's ``before_cursor_execute`` and ``after_cursor_execute``
listeners still see every statement (with SQLAlchemy's own arguments, the execution context
aside, which is ``None``), and a driver error comes out as SQLAlchemy's
:class:`~sqlalchemy.exc.DBAPIError`, a lost connection invalidated, as from ``execute``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Insert, Update
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, Select
from sqlalchemy.sql.compiler import SQLCompiler

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
        if self._results is None:  # some drivers' processors depend on the type the cursor says
            results: list[tuple[str, Callable[[Any], Any]]] = []
            for (name, impl), description in zip(self._selected, cursor.description, strict=True):
                processor = impl.result_processor(self._dialect, description[1])
                if processor is not None:
                    results.append((name, processor))
            self._results = results
        names = [name for name, _ in self._selected]
        out = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
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
        keys = tuple(row) if isinstance(statement, Insert | Update) else ()
        compiled = self.of(statement, keys)
        return run_on_cursor(conn, compiled.sql, compiled.params(row))

    def execute_many(
        self, conn: Connection, statement: Insert, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert ``rows`` (with the same keys) in one ``executemany``."""
        if not rows:
            return
        compiled = self.of(statement, tuple(rows[0]))
        run_on_cursor(conn, compiled.sql, [compiled.params(row) for row in rows], many=True)

    def select(
        self, conn: Connection, statement: Select[Any], row: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of a select, as dicts by column name."""
        compiled = self.of(statement)
        return compiled.rows(run_on_cursor(conn, compiled.sql, compiled.params(row or {})))


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
    errors) at a fraction of its cost; the cursor."""
    dbapi_connection = conn.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    events = conn.dispatch
    try:
        if events.before_cursor_execute:
            for listener in events.before_cursor_execute:
                listener(conn, cursor, sql, params, None, many)
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
        if events.after_cursor_execute:
            for listener in events.after_cursor_execute:
                listener(conn, cursor, sql, params, None, many)
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, dbapi_connection, cursor)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            sql,
            params,
            exc,
            conn.dialect.loaded_dbapi.Error,
            connection_invalidated=lost,
            dialect=conn.dialect,
        ) from exc
    return cursor

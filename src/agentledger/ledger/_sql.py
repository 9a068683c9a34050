"""The ledger's reads as SQL text, for both of its readers: :class:`~agentledger.ledger.Ledger`
runs the text through SQLAlchemy (on SQLite and PostgreSQL alike), and
:class:`~agentledger.ledger.LedgerReader` through the standard library's ``sqlite3``. Each
reads the rows as the column types of :mod:`.tables` read them, so both get the same values.

A read is given a :class:`Reads`: a transaction that runs a statement with named parameters
(``:name``, which both take) and returns its rows as dicts by column name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ._columns import COLUMNS, sqlite_time
from ._scope import Scope


class Reads(Protocol):
    """A transaction that reads the ledger."""

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        ...

    def rows(
        self, sql: str, params: Mapping[str, Any], table: str | None = None
    ) -> list[dict[str, Any]]:
        """The rows of the select ``sql``, as dicts by column name. With ``table``, the select
        is of every column of that table, in order (:func:`columns`), and each value is read
        as its column's type reads it (times, JSON, booleans, enums)."""
        ...


def columns(table: str, alias: str = "") -> str:
    """Every column of ``table`` in order, as a select lists them (``alias.column``)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + name for name in COLUMNS[table])


def select_rows(table: str, alias: str = "") -> str:
    """``SELECT`` every column of ``table`` ``FROM`` it (as ``alias``)."""
    named = f"{table} {alias}" if alias else table
    return f"SELECT {columns(table, alias)} FROM {named} "


def in_scope(scope: Scope, alias: str = "", *, unindexed: bool = False) -> str:
    """The conditions that keep the rows of a table with ``tenant_id`` and ``owner_id``
    (``alias``: its name or alias in the statement) to ``scope``: each an ``AND ...``, with the
    parameters of :func:`scope_params`. ``unindexed`` (SQLite only) keeps SQLite from reading
    the rows through the tenant's or the owner's index (a unary ``+`` makes a column no
    index's) where another condition is the one to probe."""
    column = ("+" if unindexed else "") + (f"{alias}." if alias else "")
    tenant = f"AND {column}tenant_id = :tenant " if scope.tenant_id is not None else ""
    return tenant + (f"AND {column}owner_id = :owner " if scope.owner_id is not None else "")


def scope_params(scope: Scope) -> dict[str, Any]:
    """The parameters of :func:`in_scope`."""
    return {"tenant": scope.tenant_id, "owner": scope.owner_id}


def listed(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``:name0, :name1, ...`` and their parameters: ``values`` as an ``IN (...)`` takes them
    (both drivers take a parameter per value, not a list)."""
    names = ", ".join(f":{name}{n}" for n in range(len(values)))
    return names, {f"{name}{n}": value for n, value in enumerate(values)}


def limited(limit: int | None) -> str:
    """``LIMIT :limit``, or nothing for every row."""
    return "" if limit is None else "LIMIT :limit"


def time_param(dialect: str, moment: datetime) -> Any:
    """An aware time as a parameter compared with a time column: as SQLite stores times
    (text), or as it is for PostgreSQL."""
    return sqlite_time(moment) if dialect == "sqlite" else moment

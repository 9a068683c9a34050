"""One read-only SQL statement over a ledger, whichever its database (the ``query`` tool)."""

from __future__ import annotations

from pathlib import Path

from ...errors import UsageError
from ...ledger import Ledger, normalize_url, sqlite_path
from ._postgres_query import postgres_query
from ._query import QueryLimits, QueryResult, check_statement
from ._sqlite_query import sqlite_query


def read_only_query(
    ledger: Ledger,
    sql: str,
    *,
    limits: QueryLimits | None = None,
    tenant_id: str | None = None,
    owner_id: str | None = None,
) -> QueryResult:
    """Run the one query ``sql`` (``SELECT``, ``WITH``, ``VALUES`` or ``EXPLAIN``) over
    ``ledger``'s tables without writing anything, bounded by ``limits``, seeing only the rows of
    ``tenant_id`` and ``owner_id`` when given. A statement that would write, several
    statements, or one past the limits is a :class:`UsageError` saying so; nothing changes."""
    limits = limits or QueryLimits()
    body = check_statement(sql)
    if ledger.dialect == "postgresql":
        return postgres_query(
            ledger.engine, body, limits=limits, tenant_id=tenant_id, owner_id=owner_id
        )
    return sqlite_query(
        _sqlite_file(ledger), body, limits=limits, tenant_id=tenant_id, owner_id=owner_id
    )


def _sqlite_file(ledger: Ledger) -> Path:
    path = sqlite_path(normalize_url(ledger.url))
    if path is None:
        raise UsageError(
            f"the query tool reads a SQLite file or a PostgreSQL database, and the ledger is "
            f"{ledger.url}: serve a ledger file"
        )
    return path

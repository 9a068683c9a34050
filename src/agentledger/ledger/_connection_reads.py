"""The ledger's reads as SQL text (:mod:`._sql`), run on a SQLAlchemy connection: each
statement a ``text()`` whose columns are typed by the table it selects, so its values are read
as every other read of :class:`~agentledger.ledger.Ledger` reads them."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, TextClause, text
from sqlalchemy.sql.expression import TextualSelect

from .tables import metadata


class ConnectionReads:
    """A :class:`._sql.Reads` on ``conn``, in the transaction it holds."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @property
    def dialect(self) -> str:
        return self.conn.dialect.name

    def rows(
        self, sql: str, params: Mapping[str, Any], table: str | None = None
    ) -> list[dict[str, Any]]:
        return [dict(row) for row in self.conn.execute(_statement(sql, table), params).mappings()]


@functools.lru_cache(maxsize=512)
def _statement(sql: str, table: str | None) -> TextClause | TextualSelect:
    """``sql`` as a statement, its columns those of ``table`` (matched by position), made once
    (SQLAlchemy's compiled cache then finds it)."""
    statement = text(sql)
    return statement if table is None else statement.columns(*metadata.tables[table].columns)

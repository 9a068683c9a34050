"""The ``query`` tool: one read-only SQL statement over the ledger, bounded in rows and time.

Whatever the statement says, nothing is written: SQLite reads the file through a connection of
its own opened ``mode=ro``, with ``PRAGMA query_only`` and an authorizer that allows reading
and nothing else (:mod:`._sqlite_query`); PostgreSQL runs it in a ``READ ONLY`` transaction
that is rolled back (:mod:`._postgres_query`). The statement must be one query (``SELECT``,
``WITH``, ``VALUES`` or ``EXPLAIN``): anything else is refused before it reaches the database.
A statement that runs past the time limit is stopped; at most ``max_rows`` rows are returned,
and ``truncated`` says when there were more.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import UsageError

QUERY_KEYWORDS = ("select", "with", "values", "explain")
"""What a statement the ``query`` tool runs may begin with."""

_COMMENTS = re.compile(r"\s+|--[^\n]*(\n|$)|/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class QueryLimits:
    """How far one ``query`` may go: rows returned, seconds of work, and the size of one value
    and of the whole answer in bytes (SQLite refuses to build a longer value; PostgreSQL's
    values are measured as they are read)."""

    max_rows: int = 1000
    seconds: float = 5.0
    max_value_bytes: int = 10_000_000
    max_result_bytes: int = 8_000_000

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.seconds <= 0:
            raise UsageError(
                f"a query needs at least one row and some time: max_rows={self.max_rows}, "
                f"seconds={self.seconds}. Give a positive number of each."
            )


@dataclass(frozen=True)
class QueryResult:
    """What a statement returned: its columns, its rows (JSON-ready values), and whether rows
    were left out to keep within the limits."""

    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    truncated: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": self.rows,
            "row_count": len(self.rows),
            "truncated": self.truncated,
        }


def check_statement(sql: str) -> str:
    """``sql`` without its leading comments, once it is seen to begin a query: anything else
    (a write, a schema change, a PRAGMA, ATTACH, VACUUM, a transaction's control) is a
    :class:`UsageError` saying so, before it reaches the database."""
    body = _without_leading_comments(sql)
    word = re.match(r"[A-Za-z]+", body)
    if not body:
        raise UsageError("the query is empty: give one SELECT statement")
    if word is None or word.group(0).lower() not in QUERY_KEYWORDS:
        shown = body.split(None, 1)[0][:40]
        raise UsageError(
            f"the query tool only reads: a statement beginning with {shown!r} was refused and "
            "nothing was run. Give one SELECT (or WITH, VALUES, EXPLAIN) statement."
        )
    return body


def _without_leading_comments(sql: str) -> str:
    position = 0
    while found := _COMMENTS.match(sql, position):
        if found.end() == position:
            break
        position = found.end()
    return sql[position:].strip()


class RowCollector:
    """Rows as they are fetched, until the row or size limit is reached."""

    def __init__(self, limits: QueryLimits) -> None:
        self.limits = limits
        self.rows: list[list[Any]] = []
        self.size = 0
        self.truncated = False

    def take(self, row: tuple[Any, ...]) -> bool:
        """Keep ``row``; whether another may follow."""
        if len(self.rows) >= self.limits.max_rows:
            self.truncated = True
            return False
        values = [json_value(v) for v in row]
        self.size += sum(len(v) if isinstance(v, str) else 8 for v in values)
        if self.size > self.limits.max_result_bytes and self.rows:
            self.truncated = True
            return False
        self.rows.append(values)
        return True


def json_value(value: Any) -> Any:
    """A database value as JSON carries it: bytes as base64 text, times as ISO 8601, other
    values that JSON has no type for as their text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, list | dict):
        return value
    return str(value)


def over_time(limits: QueryLimits) -> UsageError:
    return UsageError(
        f"the query ran past its time limit of {limits.seconds:g} s and was stopped; nothing "
        "was changed. Narrow it (a WHERE clause, a LIMIT, fewer joins), or ask the server's "
        "operator for a longer --query-timeout."
    )

"""Row checksums as revision 0003 defined them, and the column types it read the rows through.

Frozen: never edited. Revisions 0003 and 0005 seal the rows already in a ledger with it, so what
they write must not change when the live code (``agentledger.ledger.checksums``, the models of
``agentledger.ledger.tables``) does; the checksum's form has not changed since 0003, and a
ledger sealed by these revisions verifies with the live code. A revision that changes the form
copies this module into one named for itself and changes the copy.

A checksum is a CRC-32 of the values of a row's covered columns, as read back through these
types (times timezone-aware in UTC, JSON decoded), each in a canonical text form that reads back
the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

TIMES = frozenset(
    {"created_at", "updated_at", "lease_expires_at", "started_at", "finished_at", "heartbeat_at"}
)
"""The ledger's time columns at 0003."""
JSON_COLUMNS = frozenset({"metadata", "tool_calls", "budget", "arguments", "validated_arguments"})
"""Its JSON columns at 0003."""


class UTCTime(sa.TypeDecorator[datetime]):
    """A time read back timezone-aware in UTC (SQLite keeps it as text, in UTC without an
    offset; PostgreSQL as ``timestamptz``)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
"""JSON (JSONB on PostgreSQL), with Python ``None`` stored as SQL ``NULL``."""


def shape(table: str, columns: Iterable[str]) -> sa.TableClause:
    """``table`` with ``columns`` and its ``checksum``, each read through its type at 0003 (a
    column of no type here reads back as the driver gives it, which its checksum takes as is)."""
    names = dict.fromkeys([*columns, "checksum"])
    return sa.table(table, *(sa.column(name, _type_of(name)) for name in names))


def _type_of(name: str) -> sa.types.TypeEngine[Any] | None:
    if name in TIMES:
        return UTCTime()
    if name in JSON_COLUMNS:
        return JSON
    return sa.BigInteger() if name == "checksum" else None


def checksum_over(columns: Sequence[str], row: Mapping[Any, Any]) -> int:
    """The checksum of ``row``'s ``columns`` (a missing one counts as NULL)."""
    text = "\x1f".join(_canonical(row.get(name)) for name in columns)
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def _canonical(value: Any) -> str:
    if value is None:
        return "~"
    kind = type(value)
    if isinstance(value, str):
        return "s" + value
    if kind is bool or kind is int:
        return f"i{int(value)}"
    if kind is float:
        return f"i{_whole(value)}" if value.is_integer() else f"f{value!r}"
    if isinstance(value, datetime):
        return "t" + value.astimezone(UTC).isoformat()
    if isinstance(value, dict | list | tuple):
        # As it reads back: keys as text and tuples as lists (what JSON makes of them).
        stored = json.loads(json.dumps(value))
        return "j" + json.dumps(
            _integral(stored), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    raise TypeError(f"no canonical form for a {kind.__name__} column value")


def _integral(value: Any) -> Any:
    """JSON with integral floats as integers: PostgreSQL's JSONB reads ``1e3`` back as 1000."""
    if isinstance(value, float):
        return _whole(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _whole(value: float) -> int:
    """An integral float as the integer its shortest decimal form names, as JSONB keeps it:
    ``1e23`` is 10**23, where ``int(1e23)`` is the binary float's 99999999999999991611392."""
    return int(Decimal(repr(value)))

"""Row checksums: a damaged database file gives an error, never a different answer.

SQLite keeps no checksum of its pages: a flipped bit inside a stored value reads back as a
different value, and nothing notices. Every row the ledger writes therefore carries a
``checksum`` column, a CRC-32 of the row's columns in a canonical text form that reads back the
same on SQLite and PostgreSQL (times in UTC, JSON with sorted keys, integral numbers as
integers). Each row is checked when the library reads it; a mismatch is a
:class:`LedgerCorruptError` naming the table and the row.

What is covered: every column of the rows that never change (buffer rows, steps, compaction
events), of tool executions (which change only when a call its run's interrupt answered
returns late, and are sealed again then) and of conversation messages (which change only when
a summary takes them out of the model's context, and are sealed again then); the identity of a
conversation (id, kind, title, parent run, metadata, creation time), not the lease and version
columns that change with every run; every column of a run except ``heartbeat_at``, from the
moment it ends (a running run's totals change with every step: its ``checksum`` is NULL until
commit, failure or abandon). Revision 0003, which
added the column, computed it for the rows already there; 0005, which changed the columns of
``step_executions``, computed those rows' checksums again.

:func:`checksum` is the newest revision's. A migration never imports this module: one that
seals rows forms their checksums with a frozen copy of the code of its time
(``agentledger/migrations/_checksums_0003.py``, which 0003 and 0005 use), so that a change
here never changes what an old upgrade writes; a change of the form here must keep every
checksum those revisions wrote (``tests/support/old_ledgers.py`` holds some, as literals).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import LedgerCorruptError
from ._columns import COLUMNS

if TYPE_CHECKING:
    from sqlalchemy import Connection


class _Named(Protocol):
    """A table, as the functions here take it: a SQLAlchemy ``Table`` or anything named."""

    @property
    def name(self) -> str: ...


Table = _Named | str
"""A table of the ledger: its ``Table`` (``agentledger.ledger.tables``) or its name."""

__all__ = [
    "ADDED",
    "CHECKSUM",
    "COVERED",
    "canonical_json",
    "check_row",
    "checksum",
    "checksum_over",
    "damaged_rows",
    "sealed",
]

CHECKSUM = "checksum"

_UNCOVERED = {
    "conversations": {
        "version",
        "lease_holder",
        "lease_run_id",
        "lease_expires_at",
        "updated_at",
        "change_seq",
    },
    "agent_runs": {"heartbeat_at", "change_seq"},
    "conversation_messages": {"change_seq"},
    "step_executions": {"change_seq"},
    "tool_executions": {"change_seq"},
    "context_compactions": {"change_seq"},
}
"""Columns no checksum covers: what changes with every run, and the change stamps (0008)."""

ADDED: dict[str, dict[str, Any]] = {
    "conversations": {"tenant_id": None, "owner_id": None},
    "conversation_messages": {
        "in_context": True,
        "summary_id": None,
        "interrupted": False,
        "tenant_id": None,
    },
    "agent_runs": {
        "partial_output": None,
        "partial_step_index": None,
        "cache_write_1h_tokens": 0,
        "tenant_id": None,
        "owner_id": None,
    },
    "execution_buffer_rows": {"tenant_id": None},
    "step_executions": {"cache_write_1h_tokens": 0, "tenant_id": None, "interrupted": False},
    "tool_executions": {"tenant_id": None},
    "context_compactions": {"cache_write_1h_tokens": 0, "tenant_id": None},
}
"""Columns added after revision 0003, with their defaults: a row's checksum covers such a
column only when its value is not the default, so the revision that adds one seals nothing
again (every row already there holds the default) and a row sealed before it still matches."""

COVERED: dict[str, tuple[str, ...]] = {
    name: tuple(
        c
        for c in columns
        if c != CHECKSUM and c not in _UNCOVERED.get(name, ()) and c not in ADDED.get(name, ())
    )
    for name, columns in COLUMNS.items()
}
"""The columns each table's checksum always covers, in table order (and :data:`ADDED`)."""

COVERED.update(
    {
        "graph_checkpoints": (
            "id", "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id",
            "graph_run_id", "checkpoint_type", "checkpoint", "channel_versions", "metadata",
            "created_at", "tenant_id",
        ),
        "graph_channel_values": (
            "id", "thread_id", "checkpoint_ns", "channel", "version", "value_type", "value",
            "message_ids", "tenant_id",
        ),
        "graph_writes": (
            "id", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel",
            "value_type", "value", "task_path", "tenant_id",
        ),
        "stored_records": (
            "id", "head_id", "revision", "scope", "forked_from", "forked_at", "branches",
            "usage", "deferred", "format_version", "updated_at", "tenant_id",
        ),
        "stored_entries": (
            "id", "conversation_id", "parent_id", "kind", "message", "message_ids", "created_at",
            "tenant_id",
        ),
        # A session's row and the shared states change with every event: sealed again each time.
        "adk_sessions": (
            "id", "session_id", "state", "update_time", "event_count", "tenant_id", "owner_id",
        ),
        "adk_events": (
            "id", "conversation_id", "seq", "event_id", "invocation_id", "timestamp", "event",
            "message_ids", "tenant_id",
        ),
        "adk_states": ("id", "tenant_id", "owner_id", "state"),
    }
)  # fmt: skip
# The checkpoint tables (revision 0014): every column of rows that never change. Their bytes are
# covered by their own CRC-32 (a serialized value is covered without being copied into text).


def checksum(table: Table, row: Mapping[Any, Any]) -> int:
    """The checksum of ``row`` (its covered columns; a missing one counts as NULL, a missing
    added one as its default)."""
    name = _name(table)
    added = ADDED.get(name)
    if added is None:
        return checksum_over(COVERED[name], row)
    get = row.get if isinstance(row, dict) else row.__getitem__
    changed = [
        (name, value)
        for name, default in added.items()
        if (value := get(name) if name in row else default) != default
    ]
    return checksum_over(COVERED[name], row, changed)


def _name(table: Table) -> str:
    return table if isinstance(table, str) else table.name


def checksum_over(
    columns: Sequence[str], row: Mapping[Any, Any], added: Sequence[tuple[str, Any]] = ()
) -> int:
    """The checksum of ``row``'s ``columns`` (and of the ``added`` columns, named, given as
    name and value), as read back through the ledger's column types.

    A revision that adds a covered column either lists it in :data:`ADDED` or computes the
    checksums of existing rows again with a frozen copy of this code (0005 shows how).
    """
    # A row read back holds every column: index it (a RowMapping's .get is slow Python).
    get = row.get if isinstance(row, dict) else row.__getitem__
    values = list(map(get, columns))
    try:  # the exact types of nearly every value, by a table lookup: this runs for every row
        parts = [_FORMS[type(value)](value) for value in values]
    except KeyError:
        parts = [_canonical(value) for value in values]
    parts.extend(f"{name}={_canonical(value)}" for name, value in added)
    return zlib.crc32("\x1f".join(parts).encode("utf-8", "surrogatepass"))


def sealed(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its checksum."""
    row[CHECKSUM] = checksum(table, row)
    return row


def check_row(table: Table, row: Mapping[Any, Any]) -> None:
    """Raise :class:`LedgerCorruptError` unless ``row`` matches its checksum (rows without one,
    and partial rows that do not hold the column, are not checked)."""
    stored = row.get(CHECKSUM)
    if stored is None or stored == checksum(table, row):
        return
    raise LedgerCorruptError(
        f"row {row.get('id')!r} of {_name(table)} does not match its checksum: the database file "
        "is damaged. Restore it from a backup (for SQLite, with its -wal and -shm files); "
        "`agentledger db verify` lists every damaged row."
    )


def damaged_rows(conn: Connection) -> list[str]:
    """Every row of the ledger whose checksum does not match it, one line each."""
    from sqlalchemy import select  # only here: the rest of this module reads without it

    from .tables import ADK_SESSION_TABLES, GRAPH_TABLES, LEDGER_TABLES, STORE_TABLES, adk_states

    framework = (*GRAPH_TABLES, *STORE_TABLES, *ADK_SESSION_TABLES, adk_states)
    return [
        f"row {row['id']!r} of {table.name} does not match its checksum"
        for table in (*LEDGER_TABLES, *framework)
        for row in conn.execute(select(table).where(table.c[CHECKSUM].is_not(None))).mappings()
        if row[CHECKSUM] != checksum(table, row)
    ]


def _canonical(value: Any) -> str:
    if value is None:
        return "~"
    kind = type(value)
    if isinstance(value, str):
        return "s" + value
    if kind is bool or kind is int:
        return f"i{int(value)}"
    if kind is float:
        return _float(value)
    if isinstance(value, datetime):
        return _time(value)
    if isinstance(value, dict | list | tuple):
        return _json(value)
    if isinstance(value, bytes | memoryview):
        return _bytes(value)
    raise TypeError(f"no canonical form for a {kind.__name__} column value")


def _time(value: datetime) -> str:
    return "t" + (value if value.tzinfo is UTC else value.astimezone(UTC)).isoformat()


def _bytes(value: bytes | memoryview) -> str:
    return f"b{zlib.crc32(value)}"


def _float(value: float) -> str:
    return f"i{_integer_of(value)}" if value.is_integer() else f"f{value!r}"


def _json(value: Any) -> str:
    return "j" + canonical_json(_as_read_back(value))


class _Forms(dict[type, Callable[[Any], str]]):
    """The canonical form of a value of each common type (:func:`_canonical` for any other),
    learning the text subclasses it meets: an enum column's value (an ``AgentStatus``, a
    ``Role``, ...) is its text, as it was before the column read back as an enum."""

    def __missing__(self, kind: type) -> Callable[[Any], str]:
        if not issubclass(kind, str):
            raise KeyError(kind)
        self[kind] = form = "s".__add__
        return form


_FORMS = _Forms(
    {
        str: "s".__add__,
        type(None): "~".format,
        int: "i{:d}".format,
        bool: "i{:d}".format,
        float: _float,
        datetime: _time,
        dict: _json,
        list: _json,
        tuple: _json,
        bytes: _bytes,
        memoryview: _bytes,
    }
)


canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
"""The canonical text of a JSON value, as checksums cover it. The SQLite engine stores JSON
with it too, so a stored JSON value is its own canonical form whenever it holds no float with
an integral value (``agentledger.ledger._stored_messages`` relies on it)."""


def _as_read_back(value: Any) -> Any:
    """A JSON value as it reads back: integral floats as integers (PostgreSQL's JSONB reads
    ``1e3`` back as 1000), keys as text and tuples as lists (what JSON makes of them)."""
    if isinstance(value, float):
        return _integer_of(value) if value.is_integer() else value
    if isinstance(value, dict):
        if not all(type(key) is str for key in value):
            value = json.loads(json.dumps(value))
        return {k: _as_read_back(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_read_back(v) for v in value]
    return value


def _integer_of(value: float) -> int:
    """An integral float as the integer its shortest decimal form names, as JSONB keeps it:
    ``1e23`` is 10**23, where ``int(1e23)`` is the binary float's 99999999999999991611392."""
    return int(Decimal(repr(value)))

"""The ledger's tables as their rows are stored: each table's columns in order, and how a
value stored in SQLite reads back as the Python value SQLAlchemy's column type gives.

The SQLModel classes (:mod:`.tables`) are the schema; this module states the same facts in
plain data, for the readers that do without SQLAlchemy (the command line's read path,
:class:`~agentledger.ledger.LedgerReader`), and the column types of :mod:`.tables` use its
functions to read and write the values, so both read a stored value the same way.
``tests/test_columns.py`` keeps the lists here and the classes in step.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .._values import (
    AgentStatus,
    CompactionKind,
    CompactionStatus,
    Role,
    StepType,
    StopReason,
    Usage,
)

USAGE_COLUMNS = tuple(Usage.model_fields)
"""The token columns of runs, steps and compactions: one per field of :class:`Usage`."""


def usage_of(row: Mapping[Any, Any]) -> Usage:
    """The token columns of a run's, a step's or a compaction's row as one value (validated
    only when a count is not a whole number of 0 or more: a row written by hand)."""
    counts = {name: row[name] or 0 for name in USAGE_COLUMNS}
    if all(type(count) is int and count >= 0 for count in counts.values()):
        return Usage.model_construct(None, **counts)
    return Usage(**counts)


def duration_ms(started_at: datetime, finished_at: datetime | None) -> float | None:
    """A run's time from its start to its end; ``None`` while it runs."""
    if finished_at is None:
        return None
    return (finished_at - started_at).total_seconds() * 1000.0


class ConversationKind(StrEnum):
    """What a conversation is; the values of ``conversations.kind``."""

    MAIN = "main"
    """A user's conversation with an agent."""
    SUBAGENT = "subagent"
    """The isolated conversation of a subagent run."""


COLUMNS: dict[str, tuple[str, ...]] = {
    "conversations": (
        "id", "kind", "title", "parent_run_id", "version", "lease_holder", "lease_run_id",
        "lease_expires_at", "created_at", "updated_at", "metadata", "checksum", "change_seq",
        "tenant_id", "owner_id",
    ),
    "conversation_messages": (
        "id", "conversation_id", "section", "seq", "role", "content", "name", "tool_calls",
        "tool_call_id", "reasoning", "metadata", "run_id", "created_at", "in_context",
        "summary_id", "checksum", "interrupted", "change_seq", "tenant_id",
    ),
    "agent_runs": (
        "id", "conversation_id", "parent_run_id", "root_run_id", "depth", "agent_name", "model",
        "status", "stop_reason", "error", "started_at", "finished_at", "heartbeat_at",
        "step_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "cost_usd", "fully_priced", "budget", "metadata", "checksum",
        "partial_output", "partial_step_index", "cache_write_1h_tokens", "change_seq",
        "tenant_id", "owner_id",
    ),
    "execution_buffer_rows": (
        "id", "run_id", "step_index", "seq", "section", "role", "content", "name", "tool_calls",
        "tool_call_id", "reasoning", "metadata", "created_at", "checksum", "tenant_id",
    ),
    "step_executions": (
        "id", "run_id", "step_index", "step_type", "model", "finish_reason", "started_at",
        "finished_at", "duration_ms", "input_tokens", "output_tokens", "cache_read_tokens",
        "cache_write_tokens", "reasoning_tokens", "cost_usd", "should_continue", "stop_reason",
        "decided_by", "outcome_detail", "final_response_required", "error", "message_id",
        "content", "reasoning", "metadata", "checksum", "tool_call_count",
        "cache_write_1h_tokens", "change_seq", "tenant_id", "interrupted",
    ),
    "tool_executions": (
        "id", "run_id", "step_id", "step_index", "position", "tool_call_id", "tool_name",
        "arguments", "validated_arguments", "result", "is_error", "error", "started_at",
        "finished_at", "duration_ms", "child_run_id", "metadata", "checksum", "change_seq",
        "tenant_id",
    ),
    "context_compactions": (
        "id", "conversation_id", "run_id", "step_index", "kind", "status", "messages",
        "first_seq", "last_seq", "summary_id", "tokens_before", "tokens_after", "model",
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "cost_usd", "error", "created_at", "duration_ms", "metadata",
        "checksum", "cache_write_1h_tokens", "change_seq", "tenant_id",
    ),
}  # fmt: skip
"""The columns of the ledger's tables (``tables.LEDGER_TABLES``), in each table's order."""

_TIMES = {"created_at", "updated_at", "lease_expires_at", "started_at", "finished_at"}
_TIMES |= {"heartbeat_at"}
_JSON = {"metadata", "tool_calls", "budget", "arguments", "validated_arguments"}
_FLAGS = {"in_context", "interrupted", "fully_priced", "should_continue", "is_error"}
_FLAGS |= {"final_response_required"}

ENUMS: dict[str, dict[str, type[StrEnum]]] = {
    "conversations": {"kind": ConversationKind},
    "conversation_messages": {"role": Role},
    "agent_runs": {"status": AgentStatus, "stop_reason": StopReason},
    "execution_buffer_rows": {"role": Role},
    "step_executions": {"step_type": StepType, "stop_reason": StopReason},
    "context_compactions": {"kind": CompactionKind, "status": CompactionStatus},
}
"""The columns whose values are an enum's (text in the database, the enum in Python)."""


# --- how each kind of value is stored and read back ----------------------------------------


def utc_time(value: str | datetime) -> datetime:
    """A stored time (ISO text on SQLite, in UTC) as a timezone-aware UTC datetime."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def sqlite_time(value: datetime) -> str:
    """An aware time as SQLite stores it: UTC, ``YYYY-MM-DD HH:MM:SS.ffffff`` (the text
    SQLAlchemy's own ``DATETIME`` writes), so that times compare as text."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC times")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def json_value(value: Any) -> Any:
    """A stored JSON value: its text decoded (a bare number, as SQLite may return one, as it
    is), as SQLAlchemy's JSON type reads it on SQLite."""
    try:
        return json.loads(value)
    except TypeError:
        if isinstance(value, numbers.Number):
            return value
        raise


def flag(value: Any) -> bool:
    """A stored boolean (0 or 1 on SQLite)."""
    return bool(value)


class EnumValues(dict[Any, Any]):
    """An enum's members by their texts (``None`` by ``None``); an unknown text is a
    ``ValueError`` (read back: a damaged row)."""

    def __init__(self, enum: type[StrEnum], values: Mapping[str, Any] | None = None) -> None:
        super().__init__({m.value: m for m in enum} if values is None else values)
        self.enum = enum
        self[None] = None

    def __missing__(self, value: Any) -> Any:
        raise ValueError(f"{value!r} is not a valid {self.enum.__name__}")


def column_kind(table: str, name: str) -> type[StrEnum] | str | None:
    """How a value of the column ``name`` of ``table`` is stored, when not as it reads back:
    an enum's text (the enum), ``"time"``, ``"json"`` or ``"flag"``."""
    enum = ENUMS.get(table, {}).get(name)
    if enum is not None:
        return enum
    for kind, names in (("time", _TIMES), ("json", _JSON), ("flag", _FLAGS)):
        if name in names:
            return kind
    return None


_READ = {"time": utc_time, "json": json_value, "flag": flag}


def _readers(table: str) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """How each column of ``table`` that does not read back as stored is read."""
    found: list[tuple[str, Callable[[Any], Any]]] = []
    for name in COLUMNS[table]:
        kind = column_kind(table, name)
        if isinstance(kind, str):
            found.append((name, _READ[kind]))
        elif kind is not None:
            found.append((name, EnumValues(kind).__getitem__))
    return tuple(found)


_READERS = {table: _readers(table) for table in COLUMNS}


def decoded_rows(
    table: str, names: Sequence[str], stored: Sequence[Sequence[Any]]
) -> list[dict[str, Any]]:
    """Rows of ``table`` as SQLite returned them (each a sequence of the values of the columns
    ``names``) as dicts of the values SQLAlchemy's column types read: times, JSON, booleans and
    enums decoded. A value that cannot be decoded raises ``ValueError`` or ``TypeError``."""
    rows = [dict(zip(names, values, strict=True)) for values in stored]
    for name, read in _READERS[table]:
        for row in rows:
            value = row.get(name)
            if value is not None:
                row[name] = read(value)
    return rows

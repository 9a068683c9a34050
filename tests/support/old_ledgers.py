"""A small ledger written by hand, as the code of each revision wrote it: the rows of the check
that a ledger of any revision upgrades to the newest whole (``test_migrations``).

Nothing here goes through the ledger's code. The rows are literal values, written with plain
SQL through ``sa.table`` shapes of the columns each revision has (JSON in the text SQLAlchemy's
own JSON type writes, as the first versions wrote it), and each checksum is the number the code
of its time computed: a literal, never computed here. So a change to the live checksum code or
to the models that would make an old ledger read as damaged, or a revision that seals rows
differently from the code of its time, fails the check.

The story, growing with the revisions:

- from 0001: ``A``, a finished turn (a tool call, then the answer) and ``B``, a run whose
  process died after its first step (its lease held, its buffer rows left, no checksum: a
  running run is sealed when it ends);
- from 0003: every row but the running run's sealed;
- from 0004: a masking event in ``A``;
- from 0005: each step counts its tool calls instead of holding them (sealed again);
- from 0006: what ``B`` had shown of its next step when it died;
- from 0007: one-hour cache writes in ``A``'s answer (sealed again);
- from 0010: ``C``, a conversation of a tenant and an owner, and a forgetting logged;
- from 0012: ``D``, a run cancelled while its tool ran, its step flagged interrupted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

Rows = dict[str, list[dict[str, Any]]]


def _id(n: int) -> str:
    """A time-ordered id (UUIDv7's shape), ``n`` its last digits."""
    return f"0195b3c0-0000-7000-8000-{n:012x}"


def at(milliseconds: float) -> datetime:
    """A moment of the story, ``milliseconds`` after it began."""
    return datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC) + timedelta(milliseconds=milliseconds)


A, R1, M1, S1, T1, S2, M2 = (_id(n) for n in range(0xA0, 0xA7))
B, R2, M3, S3, T3, B1, B2, LEASE = (_id(n) for n in range(0xB0, 0xB8))
K1 = _id(0xA8)
C, FORGET, FORGOTTEN = (_id(n) for n in range(0xC0, 0xC3))
D, R4, M4, S4, T4, M5 = (_id(n) for n in range(0xD0, 0xD6))

QUESTION, ANSWER = "What is the weather in Lisbon?", "Sunny and 22C in Lisbon."
ANSWER_METADATA = {"provider": "scripted", "ratio": 1.5}
LISBON_WEATHER, PORTO_WEATHER = "22C and sunny in Lisbon", "22C and sunny in Porto"
CUT_SHORT = "interrupted: the run was cancelled while this tool call ran"
_CALL_LISBON = {"id": "call_w", "name": "get_weather", "arguments": {"city": "Lisbon"}}
_CALL_PORTO = {"id": "call_p", "name": "get_weather", "arguments": {"city": "Porto"}}
_NO_USAGE = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_tokens": 0,
    "cache_write_tokens": 0,
    "reasoning_tokens": 0,
}

_AT_0001: Rows = {
    "conversations": [
        {"id": A, "kind": "main", "title": "Weather in Lisbon", "version": 1,
         "created_at": at(0), "updated_at": at(70), "metadata": {"channel": "web"}},
        {"id": B, "kind": "main", "version": 0, "lease_holder": LEASE, "lease_run_id": R2,
         "lease_expires_at": at(60_100), "created_at": at(100), "updated_at": at(100)},
    ],
    "agent_runs": [
        {"id": R1, "conversation_id": A, "root_run_id": R1, "depth": 0, "agent_name": "weather",
         "model": "scripted-model", "status": "completed", "stop_reason": "completed",
         "started_at": at(1), "finished_at": at(70), "heartbeat_at": at(70), "step_count": 2,
         "input_tokens": 270, "output_tokens": 42, "cache_read_tokens": 40,
         "cache_write_tokens": 64, "reasoning_tokens": 0, "cost_usd": 0.0021,
         "fully_priced": True, "budget": {"max_steps": 20}},
        {"id": R2, "conversation_id": B, "root_run_id": R2, "depth": 0, "agent_name": "streamer",
         "status": "running", "started_at": at(101), "heartbeat_at": at(124), "step_count": 1,
         **_NO_USAGE, "fully_priced": True, "budget": {"max_steps": 20}},
    ],
    "conversation_messages": [
        {"id": M1, "conversation_id": A, "section": "messages", "seq": 0, "role": "user",
         "content": QUESTION, "run_id": R1, "created_at": at(0.5)},
        {"id": M2, "conversation_id": A, "section": "messages", "seq": 1, "role": "assistant",
         "content": ANSWER, "run_id": R1, "created_at": at(60),
         "metadata": ANSWER_METADATA},
        {"id": M3, "conversation_id": B, "section": "messages", "seq": 0, "role": "user",
         "content": "And in Porto?", "run_id": R2, "created_at": at(100.5)},
    ],
    "execution_buffer_rows": [
        {"id": B1, "run_id": R2, "step_index": 0, "seq": 0, "section": "execution_buffer",
         "role": "assistant", "content": "Looking it up.", "tool_calls": [_CALL_PORTO],
         "created_at": at(112)},
        {"id": B2, "run_id": R2, "step_index": 0, "seq": 1, "section": "execution_buffer",
         "role": "tool", "content": PORTO_WEATHER, "name": "get_weather",
         "tool_call_id": "call_p", "created_at": at(112)},
    ],
    "step_executions": [
        {"id": S1, "run_id": R1, "step_index": 0, "step_type": "tool_use",
         "model": "scripted-model", "finish_reason": "tool_calls", "started_at": at(20),
         "finished_at": at(47), "duration_ms": 27.0, "input_tokens": 120, "output_tokens": 30,
         "cache_read_tokens": 40, "cache_write_tokens": 0, "reasoning_tokens": 0,
         "cost_usd": 0.0012, "should_continue": True, "decided_by": "tool_calls",
         "outcome_detail": "1 tool call", "final_response_required": False,
         "message_id": _id(0xAF), "content": "Looking it up.", "tool_calls": [_CALL_LISBON]},
        {"id": S2, "run_id": R1, "step_index": 1, "step_type": "response",
         "model": "scripted-model", "finish_reason": "stop", "started_at": at(55),
         "finished_at": at(60), "duration_ms": 5.25, "input_tokens": 150, "output_tokens": 12,
         "cache_read_tokens": 0, "cache_write_tokens": 64, "reasoning_tokens": 0,
         "cost_usd": 0.0009, "should_continue": False, "stop_reason": "completed",
         "decided_by": "tool_calls", "outcome_detail": "the model answered",
         "final_response_required": False, "message_id": M2, "content": ANSWER},
        {"id": S3, "run_id": R2, "step_index": 0, "step_type": "tool_use", "model": "scripted",
         "started_at": at(105), "finished_at": at(112), "duration_ms": 7.0, **_NO_USAGE,
         "should_continue": True, "decided_by": "tool_calls", "outcome_detail": "1 tool call",
         "final_response_required": False, "message_id": B1, "content": "Looking it up.",
         "tool_calls": [_CALL_PORTO]},
    ],
    "tool_executions": [
        {"id": T1, "run_id": R1, "step_id": S1, "step_index": 0, "position": 0,
         "tool_call_id": "call_w", "tool_name": "get_weather", "arguments": {"city": "Lisbon"},
         "validated_arguments": {"city": "Lisbon"}, "result": LISBON_WEATHER,
         "is_error": False, "started_at": at(43), "finished_at": at(46), "duration_ms": 3.0},
        {"id": T3, "run_id": R2, "step_id": S3, "step_index": 0, "position": 0,
         "tool_call_id": "call_p", "tool_name": "get_weather", "arguments": {"city": "Porto"},
         "validated_arguments": {"city": "Porto"}, "result": PORTO_WEATHER,
         "is_error": False, "started_at": at(110), "finished_at": at(111), "duration_ms": 1.0},
    ],
}  # fmt: skip
"""The story's rows at 0001, in the order their tables are written (parents first)."""

_MASKING = {"id": K1, "conversation_id": A, "run_id": R1, "step_index": 1, "kind": "masking",
            "status": "completed", "messages": 1, "tokens_before": 5012, "tokens_after": 3653,
            **_NO_USAGE, "created_at": at(50), "duration_ms": 0.0}  # fmt: skip
"""From 0004: the tool result masked before ``A``'s second step."""

_OWNED = {"id": C, "kind": "main", "title": "Owned", "version": 0, "created_at": at(200),
          "updated_at": at(200), "tenant_id": "acme", "owner_id": "ana"}  # fmt: skip
_FORGETTING = {"id": FORGET, "forgotten_at": at(300), "reason": "conversation",
               "conversation_ids": [FORGOTTEN],
               "counts": {"conversations": 1, "conversation_messages": 2}}  # fmt: skip

_CANCELLED: Rows = {
    "conversations": [
        {"id": D, "kind": "main", "version": 1, "created_at": at(400), "updated_at": at(410)},
    ],
    "agent_runs": [
        {"id": R4, "conversation_id": D, "root_run_id": R4, "depth": 0, "agent_name": "agent",
         "model": "scripted", "status": "interrupted", "stop_reason": "cancelled",
         "started_at": at(401), "finished_at": at(410), "heartbeat_at": at(410),
         "step_count": 1, **_NO_USAGE, "fully_priced": False, "budget": {"max_steps": 20}},
    ],
    "conversation_messages": [
        {"id": M4, "conversation_id": D, "section": "messages", "seq": 0, "role": "user",
         "content": "Weather in Faro?", "run_id": R4, "created_at": at(400.5)},
    ],
    "step_executions": [
        {"id": S4, "run_id": R4, "step_index": 0, "step_type": "tool_use", "model": "scripted",
         "started_at": at(402), "finished_at": at(409), "duration_ms": 7.0, **_NO_USAGE,
         "should_continue": False, "stop_reason": "cancelled", "decided_by": "interrupted",
         "outcome_detail": "the run was cancelled during this step",
         "final_response_required": False, "message_id": M5, "content": "Let me look.",
         "tool_call_count": 1, "interrupted": True},
    ],
    "tool_executions": [
        {"id": T4, "run_id": R4, "step_id": S4, "step_index": 0, "position": 0,
         "tool_call_id": "call_c", "tool_name": "press_ctrl_c", "arguments": {"city": "Faro"},
         "result": CUT_SHORT, "is_error": True, "error": CUT_SHORT, "started_at": at(405),
         "finished_at": at(409), "duration_ms": 4.0},
    ],
}  # fmt: skip
"""From 0012: ``D``, a run cancelled while its tool ran."""

CHECKSUMS: dict[str, dict[str, int]] = {
    A: {"0003": 1446972352},
    B: {"0003": 193460993},
    R1: {"0003": 1072339720, "0007": 3238747988},
    M1: {"0003": 2121030084},
    M2: {"0003": 684830411},
    M3: {"0003": 3027812220},
    B1: {"0003": 1299841757},
    B2: {"0003": 3069893917},
    S1: {"0003": 2839469092, "0005": 1602480331},
    S2: {"0003": 2245880487, "0005": 3111104662, "0007": 3110541590},
    S3: {"0003": 337664870, "0005": 3359318054},
    T1: {"0003": 1511451974},
    T3: {"0003": 2918272034},
    K1: {"0004": 2258337996},
    C: {"0010": 3549149823},
    D: {"0012": 42008484},
    R4: {"0012": 14838701},
    M4: {"0012": 579918806},
    S4: {"0012": 776173373},
    T4: {"0012": 3523875731},
}
"""Each sealed row's checksum as the code of each revision wrote it, from the revision its
columns or values last changed (the running run ``R2`` is never sealed)."""


def checksum_at(row_id: str, revision: str) -> int:
    """The checksum of row ``row_id`` as the code of ``revision`` wrote it."""
    since = max(r for r in CHECKSUMS[row_id] if r <= revision)
    return CHECKSUMS[row_id][since]


def ledger_at(revision: str) -> Rows:
    """The story's rows as the code of ``revision`` wrote them, table by table, parents
    first (columns left out hold their default)."""
    rows = {table: [dict(row) for row in written] for table, written in _AT_0001.items()}
    by_id = {row["id"]: row for written in rows.values() for row in written}
    if revision >= "0004":
        rows["context_compactions"] = [dict(_MASKING)]
    if revision >= "0005":
        for step in rows["step_executions"]:
            step["tool_call_count"] = len(step.pop("tool_calls", None) or ())
    if revision >= "0006":
        by_id[R2].update(partial_output="Porto is", partial_step_index=1)
    if revision >= "0007":
        by_id[R1]["cache_write_1h_tokens"] = by_id[S2]["cache_write_1h_tokens"] = 64
    if revision >= "0010":
        rows["conversations"].append(dict(_OWNED))
        rows["forget_log"] = [dict(_FORGETTING)]
    if revision >= "0012":
        for table, written in _CANCELLED.items():
            rows[table] += [dict(row) for row in written]
    if revision >= "0003":
        for row in _rows(rows):
            if row["id"] in CHECKSUMS:
                row["checksum"] = checksum_at(row["id"], revision)
    return rows


def _rows(rows: Rows) -> Iterator[dict[str, Any]]:
    return (row for written in rows.values() for row in written)


def checksums_after_upgrade(revision: str) -> dict[str, int | None]:
    """Each row's checksum once the ledger ``revision`` wrote is upgraded to the newest: as
    written, but that 0003 seals the rows of a ledger older than it and 0005 seals every step
    again over its new columns."""
    sealed = max(revision, "0003")
    found: dict[str, int | None] = {}
    for table, written in ledger_at(revision).items():
        for row in written:
            if row["id"] in CHECKSUMS:
                since = max(sealed, "0005") if table == "step_executions" else sealed
                found[row["id"]] = checksum_at(row["id"], since)
            elif table != "forget_log":
                found[row["id"]] = None
    return found


# --- writing them with plain SQL --------------------------------------------------------------

TIMES = {"created_at", "updated_at", "lease_expires_at", "started_at", "finished_at"}
TIMES |= {"heartbeat_at", "forgotten_at"}
JSON_COLUMNS = {"metadata", "tool_calls", "budget", "arguments", "validated_arguments"}
JSON_COLUMNS |= {"conversation_ids", "counts"}
_FLAGS = {"should_continue", "final_response_required", "fully_priced", "is_error"}
_FLAGS |= {"in_context", "interrupted"}
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _type_of(column: str) -> Any:
    if column in TIMES:
        return sa.DateTime(timezone=True)
    if column in JSON_COLUMNS:
        return _JSON
    return sa.Boolean() if column in _FLAGS else None


def write(url: str, rows: Rows) -> None:
    """Insert ``rows`` into the database at ``url`` (a SQLAlchemy URL), one statement a row,
    in one transaction."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for table, written in rows.items():
                for row in written:
                    shape = sa.table(table, *(sa.column(c, _type_of(c)) for c in row))
                    conn.execute(shape.insert().values(row))
    finally:
        engine.dispose()

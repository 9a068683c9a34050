"""An OpenAI Agents SDK ``SQLiteSession`` file: tables ``agent_sessions`` and
``agent_messages``, each row of the second one item of a session as JSON.

Each session is a conversation; each user message begins a turn; what follows it until the next
one is the turn's model calls (function calls and reasoning as steps, their outputs as tool
executions, every trace item kept in the step's metadata exactly), the final assistant message
its answer. The file records no usage: the imported steps are unpriced. The items are read by
the code ``LedgerSession`` reads them with, and the SDK is not needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .._agents_sdk_items import (
    ITEMS_KEY,
    Item,
    StepItems,
    conversation_role,
    function_calls,
    output_text,
    reasoning_of,
    split_batch,
    text_of,
)
from .._values import Role, ToolCall
from ..errors import ImportSourceError
from ._history import ModelCall, SourceConversation, SourceTurn, ToolRun, utc
from ._sources import has_tables

if TYPE_CHECKING:
    from sqlite_utils import Database

_TABLES = {
    "agent_sessions": {"session_id", "created_at"},
    "agent_messages": {"id", "session_id", "message_data", "created_at"},
}

Row = tuple[int, datetime, Item]
"""An item of the session: its row id, when it was stored, and its JSON."""


class AgentsSdkSessions:
    """The OpenAI Agents SDK's ``SQLiteSession`` files (its default table names)."""

    kind = "agents-sdk"
    called = "an OpenAI Agents SDK SQLiteSession file"
    records_usage = False

    def recognises(self, db: Database) -> bool:
        return has_tables(db, _TABLES)

    def check_version(self, db: Database, path: Path) -> None:
        """Every version so far writes the same two tables; an item that is not a JSON
        object is refused when it is read."""

    def count(self, db: Database) -> int:
        return db["agent_sessions"].count

    def conversations(self, db: Database) -> Iterator[SourceConversation]:
        sessions = db.query("select session_id from agent_sessions order by created_at, session_id")
        for session in list(sessions):
            session_id = str(session["session_id"])
            rows = [_row(row) for row in _items_of(db, session_id)]
            turns = tuple(_turn(session_id, group) for group in _by_user_message(rows))
            yield SourceConversation(key=session_id, turns=turns, title=session_id)


def _items_of(db: Database, session_id: str) -> Iterator[dict[str, object]]:
    return db.query(
        "select id, created_at, message_data from agent_messages where session_id = ? order by id",
        [session_id],
    )


def _row(row: dict[str, object]) -> Row:
    try:
        item = json.loads(str(row["message_data"]))
    except ValueError:
        item = None
    if not isinstance(item, dict):
        raise ImportSourceError(
            f"row {row['id']} of agent_messages is not an item of the Agents SDK (a JSON "
            "object): the file is not a SQLiteSession file, or it is damaged; nothing of it "
            "was imported from that session on"
        )
    return int(str(row["id"])), utc(str(row["created_at"])), item


def _by_user_message(rows: list[Row]) -> Iterator[list[Row]]:
    """The session's items cut before each user message: a turn each (items before the first
    user message, if any, are a turn of their own)."""
    group: list[Row] = []
    for row in rows:
        if conversation_role(row[2]) is Role.USER and group:
            yield group
            group = []
        group.append(row)
    if group:
        yield group


def _turn(session_id: str, rows: list[Row]) -> SourceTurn:
    items = [item for _, _, item in rows]
    first_id, began, first = rows[0]
    user = text_of(first) if conversation_role(first) is Role.USER else ""
    batch = split_batch(items)
    calls = tuple(_call(step, rows) for step in batch.steps)
    return SourceTurn(
        key=f"{session_id}:{first_id}@{began.isoformat()}", user=user, at=began, calls=calls
    )


def _ran(call: ToolCall, result: tuple[str, datetime] | None) -> ToolRun:
    return ToolRun(call, None) if result is None else ToolRun(call, result[0], at=result[1])


def _call(step: StepItems, rows: Sequence[Row]) -> ModelCall:
    produced = [item for _, item in step.produced]
    calls = function_calls(produced)
    results = {
        str(item.get("call_id")): (output_text(item), rows[n][1])
        for n, item in step.outputs
        if item.get("type") == "function_call_output"
    }
    tools = tuple(_ran(call, results.get(id)) for id, call in calls.items())
    last_produced = max((n for n, _ in step.produced), default=0)
    return ModelCall(
        content="\n".join(text_of(item) for item in step.answers),
        at=rows[last_produced][1],
        tools=tools,
        reasoning=reasoning_of(produced),
        metadata={ITEMS_KEY: [{"index": n, "item": item} for n, item in step.trace]},
    )

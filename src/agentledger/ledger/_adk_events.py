"""The events of an agent framework's session (``adk_events``), each kept as the framework
serialized it less the texts the ledger's own rows hold.

An event whose content the session's runs recorded (a user's message, a model call's text and
tool calls, a tool's response, an answer) names, in ``message_ids``, the row holding each part
of its content: a part's text is that row's content (a conversation message, a step's
assistant message), a function call's arguments and a function response's value those of the
part's tool execution. The event's JSON keeps the rest (its residue), and :func:`rebuilt`
puts the two back together, exactly as the event was given (its caller checks that before it
stores a residue at all).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue
from sqlalchemy import Connection, insert, select, update

from .._values import new_id
from ._graph_messages import message_rows
from .checksums import check_row, sealed
from .tables import adk_events, tool_executions

Event = dict[str, JsonValue]

FUNCTION_CALL, FUNCTION_RESPONSE = "function_call", "function_response"


@dataclass(frozen=True)
class StoredEvent:
    """An event to append, with what the ledger indexes it by."""

    event_id: str
    invocation_id: str
    timestamp: float
    event: Event


@dataclass(frozen=True)
class PartText:
    """What a row holds of one part of an event: its text (a message's content, a tool's
    result) and, for a tool execution, the arguments it was called with."""

    text: str = ""
    arguments: JsonValue = None


def rebuilt(
    residue: Event, message_ids: Sequence[str | None], texts: Mapping[str, PartText]
) -> Event:
    """The event whose residue is ``residue``, each part given back what row
    ``message_ids[i]`` holds of it (a function call its arguments, a function response its
    value, any other part its text)."""
    event = copy.deepcopy(residue)
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return event
    for part, row_id in zip(parts, message_ids, strict=False):
        if row_id is None or not isinstance(part, dict):
            continue
        held = texts[row_id]
        call, response = part.get(FUNCTION_CALL), part.get(FUNCTION_RESPONSE)
        if isinstance(call, dict):
            call["args"] = held.arguments
        elif isinstance(response, dict):
            response["response"] = json.loads(held.text)
        else:
            part["text"] = held.text
    return event


def residue_of(event: Event, message_ids: Sequence[str | None]) -> Event:
    """``event`` less what the rows ``message_ids`` names hold (see :func:`rebuilt`)."""
    kept = copy.deepcopy(event)
    content = kept.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    for part, row_id in zip(parts if isinstance(parts, list) else [], message_ids, strict=False):
        if row_id is None or not isinstance(part, dict):
            continue
        call, response = part.get(FUNCTION_CALL), part.get(FUNCTION_RESPONSE)
        if isinstance(call, dict):
            call.pop("args", None)
        elif isinstance(response, dict):
            response.pop("response", None)
        else:
            part.pop("text", None)
    return kept


def insert_event(
    conn: Connection, conversation_id: str, seq: int, event: StoredEvent, tenant_id: str
) -> str:
    """Store ``event`` whole as the session's ``seq``-th; the id of its row."""
    row_id = new_id()
    row = {
        "id": row_id,
        "conversation_id": conversation_id,
        "seq": seq,
        "event_id": event.event_id,
        "invocation_id": event.invocation_id,
        "timestamp": event.timestamp,
        "event": event.event,
        "message_ids": None,
        "tenant_id": tenant_id,
    }
    conn.execute(insert(adk_events), sealed(adk_events, row))
    return row_id


def refer(conn: Connection, row_id: str, residue: Event, message_ids: Sequence[str | None]) -> None:
    """Keep event row ``row_id`` as ``residue`` and the rows ``message_ids`` (its parts' text
    now held by them)."""
    row = dict(conn.execute(select(adk_events).where(adk_events.c.id == row_id)).mappings().one())
    row.update(event=residue, message_ids=list(message_ids))
    values = sealed(adk_events, row)
    conn.execute(update(adk_events).where(adk_events.c.id == row_id).values(values))


def read_events(
    conn: Connection, conversation_id: str, recent: int | None, after: float | None
) -> list[Event]:
    """The session's events in order, rebuilt: the last ``recent``, then those at ``after``
    or later."""
    query = select(adk_events).where(adk_events.c.conversation_id == conversation_id)
    query = query.order_by(adk_events.c.seq.desc())
    if recent is not None:
        query = query.limit(recent)
    rows = [row for row in conn.execute(query).mappings()][::-1]
    rows = [row for row in rows if after is None or row["timestamp"] >= after]
    for row in rows:
        check_row(adk_events, row)
    texts = _texts(conn, [i for row in rows for i in row["message_ids"] or () if i is not None])
    return [
        rebuilt(row["event"], row["message_ids"], texts) if row["message_ids"] else row["event"]
        for row in rows
    ]


def _texts(conn: Connection, ids: list[str]) -> dict[str, PartText]:
    """What the rows ``ids`` hold of events' parts, by row id."""
    if not ids:
        return {}
    found = {row_id: PartText(row.content) for row_id, row in message_rows(conn, ids).items()}
    query = select(tool_executions).where(tool_executions.c.id.in_(ids))
    for row in conn.execute(query).mappings():
        check_row(tool_executions, row)
        found[row["id"]] = PartText(row["result"], row["arguments"])
    return found

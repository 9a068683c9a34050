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

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue
from sqlalchemy import Connection, Integer, bindparam, insert, select, update

from .._values import new_id
from ._graph_messages import message_rows
from ._statements import send, statements_for
from ._stored_values import checked_rows
from .checksums import CHECKSUM, check_row, sealed
from .tables import adk_events

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
    value, any other part its text); ``residue`` itself is left as it is."""
    event, parts = _with_own_parts(residue)
    for index, row_id in enumerate(message_ids[: len(parts)]):
        part = parts[index]
        if row_id is None or not isinstance(part, dict):
            continue
        held, part = texts[row_id], dict(part)
        parts[index] = part
        call, response = part.get(FUNCTION_CALL), part.get(FUNCTION_RESPONSE)
        if isinstance(call, dict):
            part[FUNCTION_CALL] = {**call, "args": held.arguments}
        elif isinstance(response, dict):
            part[FUNCTION_RESPONSE] = {**response, "response": json.loads(held.text)}
        else:
            part["text"] = held.text
    return event


def residue_of(event: Event, message_ids: Sequence[str | None]) -> Event:
    """``event`` less what the rows ``message_ids`` names hold (see :func:`rebuilt`)."""
    kept, parts = _with_own_parts(event)
    for index, row_id in enumerate(message_ids[: len(parts)]):
        part = parts[index]
        if row_id is None or not isinstance(part, dict):
            continue
        call, response = part.get(FUNCTION_CALL), part.get(FUNCTION_RESPONSE)
        if isinstance(call, dict):
            part = {**part, FUNCTION_CALL: _without(call, "args")}
        elif isinstance(response, dict):
            part = {**part, FUNCTION_RESPONSE: _without(response, "response")}
        else:
            part = _without(part, "text")
        parts[index] = part
    return kept


def _with_own_parts(event: Event) -> tuple[Event, list[JsonValue]]:
    """A copy of ``event`` whose content and list of parts are its own (what :func:`rebuilt`
    and :func:`residue_of` change, each part replaced, never changed in place): the rest is
    shared with ``event``, so an event of a long session is not copied whole."""
    copied = dict(event)
    content = copied.get("content")
    if not isinstance(content, dict):
        return copied, []
    parts = content.get("parts")
    if not isinstance(parts, list):
        return copied, []
    own = list(parts)
    copied["content"] = {**content, "parts": own}
    return copied, own


def _without(value: dict[str, JsonValue], key: str) -> dict[str, JsonValue]:
    return {k: v for k, v in value.items() if k != key}


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
    statements_for(conn.dialect).execute(conn, _INSERT, sealed(adk_events, row))
    return row_id


def refer(conn: Connection, row_id: str, residue: Event, message_ids: Sequence[str | None]) -> None:
    """Keep event row ``row_id`` as ``residue`` and the rows ``message_ids`` (its parts' text
    now held by them)."""
    statements = statements_for(conn.dialect)
    row = statements.select(conn, _ROW, {"row_id": row_id})[0]
    check_row(adk_events, row)  # sealed again below: damage is never sealed over
    row.update(event=residue, message_ids=list(message_ids))
    sealed(adk_events, row)
    kept = {
        "row_id": row_id,
        "new_event": residue,
        "new_ids": row["message_ids"],
        "new_checksum": row[CHECKSUM],
    }
    statements.execute(conn, _REFER, kept)


_INSERT = insert(adk_events)
_ROW = select(adk_events).where(adk_events.c.id == bindparam("row_id"))
_REFER = (
    update(adk_events)
    .where(adk_events.c.id == bindparam("row_id"))
    .values(
        event=bindparam("new_event", type_=adk_events.c.event.type),
        message_ids=bindparam("new_ids", type_=adk_events.c.message_ids.type),
        checksum=bindparam("new_checksum", type_=adk_events.c.checksum.type),
    )
)
"""An event row kept as its residue and the rows holding the rest."""


def read_events(
    conn: Connection, conversation_id: str, recent: int | None, after: float | None
) -> list[Event]:
    """The session's events in order, rebuilt: the last ``recent``, then those at ``after``
    or later. A fixed number of statements, however long the session: its event rows, then
    the rows holding their texts (one statement a table); each row checked against its
    checksum from its stored values where it can be (``checked_rows``)."""
    compiled = statements_for(conn.dialect).of(_EVENTS if recent is None else _RECENT_EVENTS)
    wanted = {"conversation_id": conversation_id, "recent": recent}
    rows = checked_rows(compiled, send(conn, compiled.sql, compiled.params(wanted)), adk_events)
    rows = [row for row in reversed(rows) if after is None or row["timestamp"] >= after]
    ids = [i for row in rows for i in row["message_ids"] or () if i is not None]
    texts = {
        row_id: PartText(row.content, row.arguments)
        for row_id, row in (message_rows(conn, ids) if ids else {}).items()
    }
    return [
        rebuilt(row["event"], row["message_ids"], texts) if row["message_ids"] else row["event"]
        for row in rows
    ]


_EVENTS = (
    select(adk_events)
    .where(adk_events.c.conversation_id == bindparam("conversation_id"))
    .order_by(adk_events.c.seq.desc())
)
"""A session's event rows, the last first."""
_RECENT_EVENTS = _EVENTS.limit(bindparam("recent", type_=Integer))

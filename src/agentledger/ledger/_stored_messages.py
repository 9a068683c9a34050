"""Conversation messages built from SQLite's stored values: the path of a cold load.

A fresh handle loading a long conversation reads thousands of rows. The general path makes
each a dict through SQLAlchemy's result processors, checks its checksum over the canonical
form of the decoded values (:mod:`agentledger.ledger.checksums`, in Python) and builds the
message. On SQLite this path checks each row from its stored values
(:class:`~agentledger.ledger._stored_values.RowCheck`: string operations, nothing decoded),
and only then decodes the few values a message needs; a row that does not match goes through
the general path, which checks it fully and raises :class:`LedgerCorruptError` if it is
damaged.
"""

from __future__ import annotations

import json
from datetime import datetime
from operator import itemgetter

from .._values import Message, Role
from ..errors import LedgerCorruptError
from ._row_mapping import DAMAGED, message_of, rebuilt, tool_call_of
from ._statements import Compiled, Sent
from ._stored_values import UTC_OFFSET, RowCheck
from .tables import conversation_messages

__all__ = ["stored_messages"]


def stored_messages(
    compiled: Compiled, sent: Sent, start: int, what: str
) -> dict[str, list[Message]]:
    """The messages of ``sent``, the select ``compiled`` of ``conversation_messages`` rows
    (all of the table's columns, in ``seq`` order from ``start``), by section, each checked
    against its checksum; those a summary took out of the model's context left out."""
    description = sent.description
    assert description is not None
    at = {column[0]: index for index, column in enumerate(description)}
    check = RowCheck(conversation_messages, at)
    fields = itemgetter(*(at[name] for name in _FIELDS))
    seq, section, in_context = at["seq"], at["section"], at["in_context"]
    sections: dict[str, list[Message]] = {}
    for expected, values in enumerate(sent.fetchall(), start):
        if values[seq] != expected:
            raise LedgerCorruptError(
                f"{what}: the row at seq {expected} is missing (the next one read is at "
                f"{values[seq]}). {DAMAGED}"
            )
        if values[in_context] == 0:
            continue  # replaced by a summary: kept in the ledger, out of the model's context
        message = _message(*fields(values)) if check(values) else None
        if message is None:  # the general path: decoded, checked in full
            message = message_of(compiled.dicts(description, [values])[0])
        sections.setdefault(values[section], []).append(message)
    return sections


_FIELDS = (
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning",
    "metadata",
    "id",
    "created_at",
    "interrupted",
)
"""The columns a message is built from, in :func:`_message`'s order."""
_MEMBERS = {role.value: role for role in Role}


def _message(
    role: str,
    content: str | None,
    name: str | None,
    calls: str | None,
    call_id: str | None,
    reasoning: str | None,
    metadata: str | None,
    message_id: str,
    created_at: str,
    interrupted: int,
) -> Message | None:
    """The message of a row that matched its checksum (None if its role is not one)."""
    member = _MEMBERS.get(role)
    if member is None:
        return None
    return rebuilt(
        Message,
        {
            "role": member,
            "content": content or "",
            "name": name,
            "tool_calls": tuple(tool_call_of(c) for c in json.loads(calls)) if calls else (),
            "tool_call_id": call_id,
            "reasoning": reasoning,
            "metadata": json.loads(metadata) if metadata else {},
            "id": message_id,
            # read with its offset, aware at once: ``replace(tzinfo=UTC)`` would cost six times
            # the parse (it reads its keyword's name at each call)
            "created_at": datetime.fromisoformat(created_at + UTC_OFFSET),
            "interrupted": bool(interrupted),
        },
    )

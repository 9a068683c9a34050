"""Conversation messages built from SQLite's stored values: the path of a cold load.

A fresh handle loading a long conversation reads thousands of rows. The general path makes
each a dict through SQLAlchemy's result processors, checks its checksum over the canonical
form of the decoded values (:mod:`agentledger.ledger.checksums`, in Python) and builds the
message. On SQLite the stored values are nearly that canonical form already: text and integers
as they are, JSON in its canonical text (the engine's serializer is
:func:`~agentledger.ledger.checksums.canonical_json`), times as ISO text. So this path forms each
row's canonical text from the stored values themselves (string operations, nothing decoded),
compares its CRC-32 with the row's checksum, and only then decodes the few values a message
needs.

Nothing is accepted that the general check would refuse: a row matches here only when the text
formed from its stored values is the canonical text its checksum was computed over, which
(but for a CRC-32 collision, as on the general path) means the stored values decode to the
values written. A row whose canonical text cannot be formed from what is stored (JSON written
before the serializer was canonical, a float with an integral value, a value of a type its
column does not hold, a row written by hand without a checksum) does not match, and goes
through the general path, which checks it fully and raises :class:`LedgerCorruptError` if it
is damaged.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from .._values import Message, Role
from ..errors import LedgerCorruptError
from ._row_mapping import DAMAGED, message_of, rebuilt, tool_call_of
from ._statements import Compiled, Sent
from .checksums import ADDED, CHECKSUM, COVERED
from .tables import conversation_messages

__all__ = ["stored_messages"]


def _text(value: str) -> str:
    return "s" + value


def _integer(value: int) -> str:
    return f"i{value:d}"


def _json(value: str) -> str:
    return "j" + value


_UTC = "+00:00"
"""The offset of every stored time, which is stored in UTC without it."""


def _time(value: str) -> str:
    """A time as stored (``2026-01-02 03:04:05.678901``, UTC) in its canonical form, the UTC
    ISO form, which leaves out a zero fraction."""
    if value.endswith(".000000"):
        value = value[:-7]
    return "t" + value.replace(" ", "T", 1) + _UTC


_FORMS: dict[str, Callable[[Any], str]] = {
    "tool_calls": _json,
    "metadata": _json,
    "created_at": _time,
    "seq": _integer,
    "in_context": _integer,
    "interrupted": _integer,
}
"""The canonical form of each column's stored value that is not text."""


class _Check:
    """Whether the canonical text formed from a row's stored values (rows of a select of the
    columns ``at`` names) has the row's checksum."""

    def __init__(self, at: dict[str, int]) -> None:
        covered = COVERED[conversation_messages.name]
        self.covered = itemgetter(*(at[name] for name in covered))
        self.forms = [_FORMS.get(name, _text) for name in covered]
        self.added = [
            (at[name], name, _FORMS.get(name, _text), default)
            for name, default in ADDED[conversation_messages.name].items()
        ]
        self.stored = at[CHECKSUM]

    def __call__(self, values: Sequence[Any]) -> bool:
        checksum = values[self.stored]
        if checksum is None:
            return False  # written by hand: the general path validates it
        try:
            parts = [
                "~" if value is None else form(value)
                for form, value in zip(self.forms, self.covered(values), strict=True)
            ]
            for i, name, form, default in self.added:
                if (value := values[i]) != default:
                    parts.append(f"{name}={'~' if value is None else form(value)}")
            text = "\x1f".join(parts)
        except (TypeError, ValueError, AttributeError):
            return False  # a value of a type its column does not hold
        return bool(zlib.crc32(text.encode("utf-8", "surrogatepass")) == checksum)


def stored_messages(
    compiled: Compiled, sent: Sent, start: int, what: str
) -> dict[str, list[Message]]:
    """The messages of ``sent``, the select ``compiled`` of ``conversation_messages`` rows
    (all of the table's columns, in ``seq`` order from ``start``), by section, each checked
    against its checksum; those a summary took out of the model's context left out."""
    description = sent.description
    assert description is not None
    at = {column[0]: index for index, column in enumerate(description)}
    check = _Check(at)
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
            "created_at": datetime.fromisoformat(created_at + _UTC),
            "interrupted": bool(interrupted),
        },
    )

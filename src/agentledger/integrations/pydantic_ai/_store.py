"""``LedgerConversationStore``: pydantic-ai's ``ConversationStore`` over an agentledger ledger.

Each primitive of the store is one transaction of ``ledger.stored_conversations``, run in a
worker thread (``asyncio.to_thread``), as the ledger's other async callers do: the event loop
never waits on the database. A message's text is stored once: where the save's runs recorded
it (a user prompt, an answer, a step's text, a tool call's arguments, a tool's text return),
the entry refers to that row and keeps the rest of the message as pydantic-ai serializes it,
rebuilt on read; a message that would not come back equal that way is kept whole. Every
entry reads back equal to the one saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import JsonValue, TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from ...ledger import Ledger, MessageRow, StoredEntry, StoredRecord
from .._ledger_argument import a_ledger
from .._residue import kept_if_rebuilt
from ._runs import record_runs

_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_MESSAGES: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage])
_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_DEFERRED: TypeAdapter[DeferredToolRequests | None] = TypeAdapter(DeferredToolRequests | None)
_JSON: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)
"""Built once: building an adapter costs more than the save of a turn's entries."""


class LedgerConversationStore(ConversationStore):
    """pydantic-ai conversations in an agentledger :class:`~agentledger.ledger.Ledger`.

    A conversation is the ledger's conversation of the same id (created, in the ledger
    handle's scope, by its first save). ``write_record`` compares the revision and sets the
    new one in the database, in the transaction that stores the new entries: of two writers
    saving the same conversation, one wins and the other gets ``ConversationConflict`` with
    nothing written. ``delete_record`` deletes the record and keeps its entries and runs (a
    fork may reach them; pydantic-ai lets a store keep them if it says so);
    ``ledger.forget(conversation_id)`` deletes the conversation with its record, the entries it
    wrote and its runs. A fork of a forgotten conversation keeps what it wrote itself: its
    history then begins after what was forgotten, under a new revision. Each
    save's new messages are recorded as the conversation's runs in the same transaction (see
    ``_runs``): steps with their usage, tool executions, the user prompts and answers.
    """

    def __init__(self, ledger: Ledger) -> None:
        ledger = a_ledger(ledger, "LedgerConversationStore")
        self.ledger = ledger
        self._stored = ledger.stored_conversations

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        stored = await asyncio.to_thread(self._stored.record, conversation_id)
        return _record_of(stored) if stored is not None else None

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        stored = await asyncio.to_thread(lambda: self._stored.records(scope=scope, limit=limit))
        return [_record_of(record) for record in stored]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        stored = _stored_record(record)
        new_ids = {entry.id for entry in new_entries}
        messages = [entry.message for entry in new_entries]

        def save() -> None:
            claimed = self._stored.claim(stored, new_ids, expected_revision)
            if claimed is None:
                raise ConversationConflict(record.conversation_id)
            rows = record_runs(self.ledger, record.conversation_id, messages)
            entries = [_stored_entry(e, rows.get(n, {})) for n, e in enumerate(new_entries)]
            self._stored.add(claimed, entries)

        await asyncio.to_thread(self._stored.together, "saving a conversation", save)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        deleted = await asyncio.to_thread(self._stored.delete, conversation_id, expected_revision)
        if not deleted:
            raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        stored = await asyncio.to_thread(self._stored.entry, entry_id)
        if stored is None:
            raise LookupError(f"no conversation entry {entry_id!r} in this ledger")
        return _entries_of([stored])[0]

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The history up to ``head_id`` in one recursive query (the base walks it one entry
        at a time)."""
        if head_id is None:
            return []
        stored = await asyncio.to_thread(self._stored.history, head_id, limit)
        if not stored or stored[-1].id != head_id:
            raise LookupError(f"no conversation entry {head_id!r} in this ledger")
        return _entries_of(stored)


def _stored_record(record: ConversationRecord) -> StoredRecord:
    usage = _USAGE.dump_python(record.usage, mode="json")
    return StoredRecord(
        conversation_id=record.conversation_id,
        head_id=record.head_id,
        revision=record.revision,
        scope=record.scope,
        forked_from=record.forked_from,
        forked_at=record.forked_at,
        branches=list(record.branches),
        usage=usage,
        deferred=_json(_DEFERRED.dump_python(record.deferred_tool_requests, mode="json")),
        format_version=record.format_version,
        updated_at=record.updated_at,
    )


def _record_of(stored: StoredRecord) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=stored.conversation_id,
        head_id=stored.head_id,
        usage=_USAGE.validate_python(stored.usage),
        deferred_tool_requests=_DEFERRED.validate_python(stored.deferred),
        scope=stored.scope,
        forked_from=stored.forked_from,
        forked_at=stored.forked_at,
        branches=list(stored.branches),
        revision=stored.revision,
        updated_at=stored.updated_at,
    )


def _stored_entry(entry: ConversationEntry, held: Mapping[int, str]) -> StoredEntry:
    """``entry`` as stored: its message less what the rows ``held`` (part, row id) hold of its
    parts (:func:`_field`), when it comes back equal without it; else whole."""
    fields = _MESSAGE.dump_python(entry.message, mode="json")
    if not held:
        return _whole(entry, fields)
    parts = [dict(part) for part in fields["parts"]]
    values = {n: parts[n].pop(_field(parts[n]), None) for n in held}
    kept = kept_if_rebuilt(
        entry.message, {**fields, "parts": parts}, lambda residue: _rebuilt(residue, values)
    )
    if kept is None:
        return _whole(entry, fields)
    ids = tuple(held.get(n) for n in range(len(parts)))
    return StoredEntry(entry.id, entry.parent_id, entry.kind, kept, message_ids=ids)


def _whole(entry: ConversationEntry, fields: Any) -> StoredEntry:
    """``entry`` stored whole: its message's ``fields`` as they were dumped."""
    return StoredEntry(entry.id, entry.parent_id, entry.kind, _json(fields))


def _entries_of(stored: Sequence[StoredEntry]) -> list[ConversationEntry]:
    """The entries ``stored``, their messages validated in one call (a call per message
    costs several times as much on a long history)."""
    messages = _MESSAGES.validate_python([_fields_of(entry) for entry in stored])
    return [
        ConversationEntry(id=entry.id, parent_id=entry.parent_id, message=message)
        for entry, message in zip(stored, messages, strict=True)
    ]


def _fields_of(stored: StoredEntry) -> JsonValue:
    """The serialized message of ``stored``, its parts' texts back from the rows holding them."""
    message = stored.message
    if stored.message_ids is None or not isinstance(message, dict):
        return message
    parts = message["parts"]
    assert isinstance(parts, list)
    values = {
        n: _value(part, row)
        for n, (part, row) in enumerate(zip(parts, stored.rows, strict=True))
        if row is not None
    }
    return _with_values(message, values)


def _field(part: Mapping[str, Any]) -> str:
    """The field of a serialized part that a row holds: a tool call's arguments (its tool
    execution's), another part's text (a message's, a step's, a tool result's)."""
    return "args" if part.get("part_kind") == "tool-call" else "content"


def _value(part: Any, row: MessageRow) -> object:
    """What ``row`` holds of ``part``, as its :func:`_field` takes it."""
    return row.arguments if _field(part) == "args" else row.content


def _rebuilt(residue: Mapping[str, Any], values: Mapping[int, object]) -> ModelMessage:
    """The message whose parts ``values`` names have those values (in their :func:`_field`),
    and all else ``residue``."""
    return _MESSAGE.validate_python(_with_values(residue, values))


def _with_values(residue: Mapping[str, Any], values: Mapping[int, object]) -> dict[str, Any]:
    """``residue`` with the parts ``values`` names given those values (in their
    :func:`_field`)."""
    parts = [
        {**part, _field(part): values[n]} if n in values else part
        for n, part in enumerate(residue["parts"])
    ]
    return {**residue, "parts": parts}


def _json(value: object) -> JsonValue:
    """``value``, dumped in JSON mode, as the JSON it is."""
    return _JSON.validate_python(value)

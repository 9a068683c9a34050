"""``LedgerConversationStore``: pydantic-ai's ``ConversationStore`` over an agentledger ledger.

Each primitive of the store is one transaction of ``ledger.stored_conversations``, run in a
worker thread (``asyncio.to_thread``), as the ledger's other async callers do: the event loop
never waits on the database. The messages are kept as pydantic-ai serializes them
(``ModelMessagesTypeAdapter``), so that every entry reads back equal to the one saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

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

from ...errors import UsageError
from ...ledger import Ledger, StoredEntry, StoredRecord
from ._runs import record_runs

_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_DEFERRED: TypeAdapter[DeferredToolRequests | None] = TypeAdapter(DeferredToolRequests | None)


class LedgerConversationStore(ConversationStore):
    """pydantic-ai conversations in an agentledger :class:`~agentledger.ledger.Ledger`.

    A conversation is the ledger's conversation of the same id (created, in the ledger
    handle's scope, by its first save). ``write_record`` compares the revision and sets the
    new one in the database, in the transaction that stores the new entries: of two writers
    saving the same conversation, one wins and the other gets ``ConversationConflict`` with
    nothing written. ``delete_record`` deletes the record and keeps its entries (a fork or
    another record may reach them); ``ledger.forget(conversation_id)`` deletes both. Each
    save's new messages are recorded as the conversation's runs in the same transaction (see
    ``_runs``): steps with their usage, tool executions, the user prompts and answers.
    """

    def __init__(self, ledger: Ledger) -> None:
        if not isinstance(ledger, Ledger):
            raise UsageError(
                f"LedgerConversationStore takes a Ledger (agentledger.ledger.Ledger.open(url)), "
                f"not {type(ledger).__name__}"
            )
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
        entries = [_stored_entry(entry) for entry in new_entries]
        messages = [entry.message for entry in new_entries]

        def save() -> None:
            if not self._stored.write(stored, entries, expected_revision):
                raise ConversationConflict(record.conversation_id)
            record_runs(self.ledger, record.conversation_id, messages)

        await asyncio.to_thread(self._stored.together, "saving a conversation", save)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        deleted = await asyncio.to_thread(self._stored.delete, conversation_id, expected_revision)
        if not deleted:
            raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        stored = await asyncio.to_thread(self._stored.entry, entry_id)
        if stored is None:
            raise LookupError(f"no conversation entry {entry_id!r} in this ledger")
        return _entry_of(stored)

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
        return [_entry_of(entry) for entry in stored]


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


def _stored_entry(entry: ConversationEntry) -> StoredEntry:
    message = _json(_MESSAGE.dump_python(entry.message, mode="json"))
    return StoredEntry(id=entry.id, parent_id=entry.parent_id, kind=entry.kind, message=message)


def _entry_of(stored: StoredEntry) -> ConversationEntry:
    return ConversationEntry(
        id=stored.id, parent_id=stored.parent_id, message=_MESSAGE.validate_python(stored.message)
    )


def _json(value: object) -> JsonValue:
    """``value``, dumped in JSON mode, as the JSON it is."""
    return TypeAdapter(JsonValue).validate_python(value)

"""The values the checkpoint tables hold, as plain data: what a graph framework's saver
(``agentledger.integrations.langgraph.LedgerSaver``) writes through
:class:`~agentledger.ledger._graph_checkpoints.GraphCheckpoints` and reads back. The ledger
never decodes a serialized value: the framework's serializer made it and reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue


@dataclass(frozen=True)
class ChannelValue:
    """One version of a channel: a serialized value (``value_type``, ``value``), or, for a
    channel of messages, the ids of the ledger rows holding them in order (``message_ids``),
    ``None`` standing for each message that is no row (yet): those are, in order, the
    serialized value (a list); or neither (the channel was emptied at that version)."""

    value_type: str | None = None
    value: bytes | None = None
    message_ids: tuple[str | None, ...] | None = None


@dataclass(frozen=True)
class MessageRow:
    """A ledger row a channel of messages refers to (a conversation message, a step's
    assistant message, a tool execution's result): its text and its metadata, where the
    framework keeps what the ledger's columns do not hold; a tool execution's ``arguments``
    too (the call's, as the model sent them)."""

    content: str
    metadata: dict[str, Any]
    arguments: Any = None


@dataclass(frozen=True)
class PendingWrite:
    """A write of task ``task_id`` (its ``idx``-th, or a special write's negative index)."""

    task_id: str
    idx: int
    channel: str
    value_type: str
    value: bytes
    task_path: str = ""


@dataclass(frozen=True)
class CheckpointKey:
    """Where a checkpoint is: its thread, namespace and id."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint as stored: the framework's serialized checkpoint without its channel
    values, the version of each channel (as text), its metadata, and, read back, the values
    of those versions and its pending writes in the order they were written."""

    key: CheckpointKey
    parent_checkpoint_id: str | None
    checkpoint_type: str
    checkpoint: bytes
    channel_versions: dict[str, str]
    metadata: dict[str, Any]
    values: dict[str, ChannelValue] = field(default_factory=dict)
    messages: dict[str, MessageRow] = field(default_factory=dict)
    writes: tuple[PendingWrite, ...] = ()

    @property
    def graph_run_id(self) -> str | None:
        run_id = self.metadata.get("run_id")
        return run_id if isinstance(run_id, str) else None


@dataclass(frozen=True)
class CheckpointQuery:
    """Which checkpoints :meth:`GraphCheckpoints.find` returns, newest first: of a thread
    (``None``: every thread in scope), a namespace (``None``: all), one id, those before an
    id, those whose metadata holds every item of ``metadata``, at most ``limit``."""

    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    before: str | None = None
    metadata: dict[str, JsonValue] | None = None
    limit: int | None = None

"""The tables of the frameworks whose storage the ledger keeps: a graph framework's checkpoints
(LangGraph's, revision 0014), a conversation store's records and entries (pydantic-ai's, 0015)
and an agent framework's sessions (Google ADK's, 0016). Each holds what the framework keeps
beside the ledger's own rows, which hold the conversation and the trace;
``agentledger.ledger.tables`` exports them with the ledger's tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Float, LargeBinary, UniqueConstraint
from sqlmodel import Field

from ._table_types import LedgerTable, checksum_field, json_field, tenant_field, time_field


def _thread_id() -> Any:
    """``thread_id``: the graph's thread, which is a conversation (revision 0014)."""
    return Field(foreign_key="conversations.id")


class GraphCheckpointRow(LedgerTable, table=True):
    """A checkpoint of a graph framework's thread (LangGraph's), without its channel values
    (``graph_channel_values``), as the framework serialized it (revision 0014)."""

    __tablename__ = "graph_checkpoints"
    __table_args__ = (UniqueConstraint("thread_id", "checkpoint_ns", "checkpoint_id"),)

    id: str = Field(primary_key=True)
    thread_id: str = _thread_id()
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None = None
    graph_run_id: str | None = Field(default=None, index=True)
    """The framework's own run id (the checkpoint metadata's ``run_id``)."""
    checkpoint_type: str
    checkpoint: bytes = Field(sa_type=LargeBinary)
    channel_versions: dict[str, JsonValue] = json_field("channel_versions", nullable=False)
    """The version of each channel the checkpoint holds (``graph_channel_values.version``)."""
    metadata_: dict[str, JsonValue] = json_field("metadata", nullable=False)
    created_at: datetime = time_field()
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class GraphChannelValueRow(LedgerTable, table=True):
    """One version of one channel of a thread: the framework's serialized value, or, for a
    channel of messages, the ids of the ledger rows that hold them (revision 0014)."""

    __tablename__ = "graph_channel_values"
    __table_args__ = (UniqueConstraint("thread_id", "checkpoint_ns", "channel", "version"),)

    id: str = Field(primary_key=True)
    thread_id: str = _thread_id()
    checkpoint_ns: str
    channel: str
    version: str
    value_type: str | None = None
    value: bytes | None = Field(default=None, sa_type=LargeBinary)
    message_ids: list[JsonValue] | None = json_field("message_ids")
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class GraphWriteRow(LedgerTable, table=True):
    """A write of a task whose step is not checkpointed yet (a pending write, revision 0014)."""

    __tablename__ = "graph_writes"
    __table_args__ = (
        UniqueConstraint("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    )

    id: str = Field(primary_key=True)
    thread_id: str = _thread_id()
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    channel: str
    value_type: str
    value: bytes = Field(sa_type=LargeBinary)
    task_path: str
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class StoredRecordRow(LedgerTable, table=True):
    """The record a framework's conversation store keeps of a conversation (pydantic-ai's
    ``ConversationRecord``): its head entry, its revision (compared and set on every save),
    what the framework accumulated over it, and what it was forked from (revision 0015). Its
    id is the conversation's."""

    __tablename__ = "stored_records"

    id: str = Field(primary_key=True, foreign_key="conversations.id")
    head_id: str | None = None
    revision: str
    scope: str | None = Field(default=None, index=True)
    forked_from: str | None = None
    forked_at: str | None = None
    branches: list[JsonValue] = json_field("branches", nullable=False)
    usage: dict[str, JsonValue] = json_field("usage", nullable=False)
    deferred: JsonValue = json_field("deferred")
    format_version: int
    updated_at: datetime = time_field(index=True)
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class StoredEntryRow(LedgerTable, table=True):
    """One entry of a framework's conversation tree (a pydantic-ai ``ConversationEntry``): the
    message as the framework serialized it, less what the rows ``message_ids`` names hold (the
    conversation's messages, steps and tool executions its runs recorded), and the entry it
    follows. ``conversation_id`` is the conversation that wrote it; a fork's history reaches
    into its source's (revision 0015)."""

    __tablename__ = "stored_entries"

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    parent_id: str | None = None
    kind: str
    message: JsonValue = json_field("message", nullable=False)
    message_ids: list[str | None] | None = json_field("message_ids")
    created_at: datetime = time_field()
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class AdkSessionRow(LedgerTable, table=True):
    """An agent framework's session (Google ADK's): its conversation, the framework's id for
    it, its session-scoped state and the time of its last event (revision 0016). The app is
    the conversation's tenant and the user its owner, copied here as on ``agent_runs``."""

    __tablename__ = "adk_sessions"
    __table_args__ = (UniqueConstraint("tenant_id", "owner_id", "session_id"),)

    id: str = Field(primary_key=True, foreign_key="conversations.id")
    """The session's conversation."""
    session_id: str
    state: dict[str, JsonValue] = json_field("state", nullable=False)
    update_time: float = Field(sa_type=Float(precision=53))
    """The framework's timestamp of the session's last event (seconds since the epoch)."""
    event_count: int
    """How many events the session has had: the next one's ``seq``, and the revision an
    append compares and sets."""
    checksum: int | None = checksum_field()
    tenant_id: str
    owner_id: str


class AdkEventRow(LedgerTable, table=True):
    """An event of an agent framework's session, as the framework serialized it, less the
    texts held by the rows ``message_ids`` names, one per part of its content (the
    conversation's messages, steps' calls and tool executions its runs recorded) (revision
    0016)."""

    __tablename__ = "adk_events"
    __table_args__ = (UniqueConstraint("conversation_id", "seq"),)

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id")
    seq: int
    event_id: str
    invocation_id: str
    timestamp: float = Field(sa_type=Float(precision=53))
    event: dict[str, JsonValue] = json_field("event", nullable=False)
    message_ids: list[str | None] | None = json_field("message_ids")
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class AdkStateRow(LedgerTable, table=True):
    """The state an agent framework shares between sessions: every session of an app (the
    tenant; ``owner_id`` is ``''``), or every session of one user (the owner) of an app
    (revision 0016)."""

    __tablename__ = "adk_states"
    __table_args__ = (UniqueConstraint("tenant_id", "owner_id"),)

    id: str = Field(primary_key=True)
    tenant_id: str
    owner_id: str
    state: dict[str, JsonValue] = json_field("state", nullable=False)
    checksum: int | None = checksum_field()

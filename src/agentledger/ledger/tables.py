"""The ledger's tables, as SQLModel classes: one typed class per table. The schema is public
API: ``schema/README.md`` documents it table by table, and a test keeps these models, the
migrations and the generated DDL in ``schema/`` from drifting apart.

:class:`Conversation` and :class:`AgentRun` are also the rows ``Ledger`` returns
(``ledger.conversation(id)``, ``ledger.runs()``): detached instances, read without validating
again what the ledger wrote (:func:`row_of`); changing one changes nothing in the database. The
other tables are read back as the values they store (messages, steps, tool executions,
compactions).

Every id is a time-ordered text id (UUIDv7). Timestamps are stored in UTC and read back
timezone-aware. JSON columns are JSON on SQLite and JSONB on PostgreSQL. A column whose values
are an enum (``agent_runs.status``, ``conversation_messages.role``, ...) is text in the
database and the enum in Python. Token totals on ``agent_runs`` are the run's own steps
(exclusive); what its subagents spent is derived from the run tree, never added in.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy import BigInteger, Index, UniqueConstraint, false, true
from sqlalchemy.orm import configure_mappers
from sqlalchemy.orm.instrumentation import manager_of_class
from sqlmodel import Field

from .._values import (
    AgentStatus,
    CompactionKind,
    CompactionStatus,
    Role,
    StepType,
    StopReason,
    Usage,
)
from ._changes import CHANGE_MARK_SQL
from ._columns import USAGE_COLUMNS, ConversationKind, duration_ms, usage_of
from ._framework_tables import (
    AdkEventRow,
    AdkSessionRow,
    AdkStateRow,
    GraphChannelValueRow,
    GraphCheckpointRow,
    GraphWriteRow,
    StoredEntryRow,
    StoredRecordRow,
)
from ._table_types import (
    NAMING_CONVENTION,
    EnumText,
    JSONColumn,
    JSONType,
    LedgerTable,
    UTCDateTime,
    checksum_field,
    json_field,
    metadata,
    tenant_field,
    time_field,
)

__all__ = [
    "ADK_SESSION_TABLES",
    "CHANGE_MARK_SQL",
    "GRAPH_TABLES",
    "LEDGER_TABLES",
    "NAMING_CONVENTION",
    "STAMPED_TABLES",
    "STORE_TABLES",
    "USAGE_COLUMNS",
    "AdkEventRow",
    "AdkSessionRow",
    "AdkStateRow",
    "AgentRun",
    "ContextCompactionRow",
    "Conversation",
    "ConversationKind",
    "ConversationMessage",
    "EnumText",
    "ExecutionBufferRow",
    "ForgetLogRow",
    "GraphChannelValueRow",
    "GraphCheckpointRow",
    "GraphWriteRow",
    "JSONColumn",
    "JSONType",
    "LedgerChanges",
    "LedgerDeletion",
    "LedgerTable",
    "Row",
    "StepExecutionRow",
    "StoredEntryRow",
    "StoredRecordRow",
    "ToolExecutionRow",
    "UTCDateTime",
    "adk_events",
    "adk_sessions",
    "adk_states",
    "agent_runs",
    "context_compactions",
    "conversation_messages",
    "conversations",
    "execution_buffer_rows",
    "forget_log",
    "graph_channel_values",
    "graph_checkpoints",
    "graph_writes",
    "metadata",
    "row_of",
    "step_executions",
    "stored_entries",
    "stored_records",
    "tool_executions",
]


def _one_hour_writes() -> Any:
    """``cache_write_1h_tokens``: the part of ``cache_write_tokens`` written to a one-hour
    cache (revision 0007; last, as it was added)."""
    return Field(default=0, sa_column_kwargs={"server_default": "0"})


STAMPED_TABLES = (
    "conversations",
    "conversation_messages",
    "agent_runs",
    "step_executions",
    "tool_executions",
    "context_compactions",
)
"""The tables whose rows carry ``change_seq`` (revision 0008)."""


def _owner() -> Any:
    """``owner_id``: the user the row's conversation belongs to (revision 0010). ``NULL``: no
    owner."""
    return Field(default=None, nullable=True, index=True)


def _change_seq() -> Any:
    """``change_seq``: the stamp of the transaction that last inserted or updated the row, for
    copies of the ledger that read only what changed (revision 0008; set by the library as it
    writes on SQLite since 0009, by triggers otherwise); not covered by the checksums."""
    return Field(default=None, sa_type=BigInteger, nullable=True, index=True)


def _enum(enum: type[StrEnum], *, nullable: bool = False, index: bool = False, **kw: Any) -> Any:
    return Field(sa_type=EnumText(enum), nullable=nullable, index=index, **kw)


class Conversation(LedgerTable, table=True):
    __tablename__ = "conversations"

    id: str = Field(primary_key=True)
    kind: ConversationKind = _enum(ConversationKind, default=ConversationKind.MAIN)
    title: str | None = None
    parent_run_id: str | None = Field(default=None, index=True)
    version: int = 0
    lease_holder: str | None = None
    lease_run_id: str | None = None
    lease_expires_at: datetime | None = time_field(nullable=True)
    created_at: datetime = time_field()
    updated_at: datetime = time_field(index=True)
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    checksum: int | None = checksum_field()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field(index=True)
    owner_id: str | None = _owner()


class ConversationMessage(LedgerTable, table=True):
    __tablename__ = "conversation_messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        Index(
            "ix_conversation_messages_conversation_id_section_seq",
            "conversation_id",
            "section",
            "seq",
        ),
        Index(
            "ix_conversation_messages_conversation_id_in_context_seq",
            "conversation_id",
            "in_context",
            "seq",
        ),
    )

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id")
    section: str = Field(default="messages")
    seq: int
    role: Role = _enum(Role)
    content: str = ""
    name: str | None = None
    tool_calls: list[JsonValue] | None = json_field("tool_calls")
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    created_at: datetime = time_field()
    in_context: bool = Field(default=True, sa_column_kwargs={"server_default": true()})
    summary_id: str | None = None
    checksum: int | None = checksum_field()
    interrupted: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field()


class AgentRun(LedgerTable, table=True):
    __tablename__ = "agent_runs"

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    parent_run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    root_run_id: str = Field(foreign_key="agent_runs.id", index=True)
    depth: int = 0
    agent_name: str
    model: str | None = None
    status: AgentStatus = _enum(AgentStatus, index=True)
    stop_reason: StopReason | None = _enum(StopReason, nullable=True, default=None)
    error: str | None = None
    started_at: datetime = time_field(index=True)
    finished_at: datetime | None = time_field(nullable=True)
    heartbeat_at: datetime = time_field()
    step_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    fully_priced: bool = True
    budget: dict[str, JsonValue] | None = json_field("budget")
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    checksum: int | None = checksum_field()
    partial_output: str | None = None
    """What the user has been shown so far of the step being streamed (``NULL`` when none)."""
    partial_step_index: int | None = None
    """The step ``partial_output`` belongs to."""
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field(index=True)
    owner_id: str | None = _owner()

    @property
    def usage(self) -> Usage:
        """The run's own steps' tokens (exclusive of its subagents'), as one value."""
        return usage_of(self.__dict__)

    @property
    def duration_ms(self) -> float | None:
        """From its start to its end; ``None`` while it runs."""
        return duration_ms(self.started_at, self.finished_at)


class ExecutionBufferRow(LedgerTable, table=True):
    __tablename__ = "execution_buffer_rows"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id")
    step_index: int
    seq: int
    section: str
    role: Role = _enum(Role)
    content: str = ""
    name: str | None = None
    tool_calls: list[JsonValue] | None = json_field("tool_calls")
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    created_at: datetime = time_field()
    checksum: int | None = checksum_field()
    tenant_id: str | None = tenant_field()


class StepExecutionRow(LedgerTable, table=True):
    __tablename__ = "step_executions"
    __table_args__ = (UniqueConstraint("run_id", "step_index"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id")
    step_index: int
    step_type: StepType = _enum(StepType)
    model: str | None = None
    finish_reason: str | None = None
    started_at: datetime = time_field(index=True)
    finished_at: datetime = time_field()
    duration_ms: float
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    should_continue: bool
    stop_reason: StopReason | None = _enum(StopReason, nullable=True, default=None)
    decided_by: str | None = None
    outcome_detail: str | None = None
    final_response_required: bool = False
    error: str | None = None
    message_id: str | None = None
    content: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    checksum: int | None = checksum_field()
    tool_call_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    """How many tools the step called: its tool rows (revision 0005; last, as it was added)."""
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field()
    interrupted: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    """The run ended while the step was in progress: it holds what it had come to, each of its
    tool calls answered (revision 0012; last, as it was added)."""


class ToolExecutionRow(LedgerTable, table=True):
    __tablename__ = "tool_executions"

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id", index=True)
    step_id: str = Field(foreign_key="step_executions.id", index=True)
    step_index: int
    position: int
    tool_call_id: str
    tool_name: str = Field(index=True)
    arguments: dict[str, JsonValue] | None = json_field("arguments")
    validated_arguments: dict[str, JsonValue] | None = json_field("validated_arguments")
    result: str
    is_error: bool = False
    error: str | None = None
    started_at: datetime = time_field()
    finished_at: datetime = time_field()
    duration_ms: float
    child_run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    checksum: int | None = checksum_field()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field()


class ContextCompactionRow(LedgerTable, table=True):
    __tablename__ = "context_compactions"

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    step_index: int | None = None
    kind: CompactionKind = _enum(CompactionKind)
    status: CompactionStatus = _enum(CompactionStatus)
    messages: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    summary_id: str | None = Field(default=None, foreign_key="conversation_messages.id")
    tokens_before: int
    tokens_after: int
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    error: str | None = None
    created_at: datetime = time_field(index=True)
    duration_ms: float = 0.0
    metadata_: dict[str, JsonValue] | None = json_field("metadata")
    checksum: int | None = checksum_field()
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = tenant_field()


class LedgerChanges(LedgerTable, table=True):
    """One row: the ledger's own id (a copy of the ledger records which ledger it is of) and,
    on SQLite, the counter ``change_seq`` stamps come from (revision 0008)."""

    __tablename__ = "agentledger_changes"

    ledger_id: str = Field(primary_key=True)
    change_seq: int = Field(sa_type=BigInteger)


class LedgerDeletion(LedgerTable, table=True):
    """A row deleted from a table that has ``change_seq``, logged by a trigger (revision 0008),
    so that a copy of the ledger deletes it too."""

    __tablename__ = "agentledger_deletions"

    id: int | None = Field(default=None, primary_key=True)
    table_name: str
    row_id: str
    change_seq: int = Field(sa_type=BigInteger, index=True)


class ForgetLogRow(LedgerTable, table=True):
    """One forgetting (``Ledger.forget``, ``forget_owner``, ``forget_inactive``): only ids, the
    time and how many rows of each table went, never any content (revision 0010)."""

    __tablename__ = "forget_log"

    id: str = Field(primary_key=True)
    forgotten_at: datetime = time_field(index=True)
    tenant_id: str | None = Field(default=None, nullable=True, index=True)
    owner_id: str | None = None
    reason: str
    conversation_ids: list[JsonValue] = json_field("conversation_ids", nullable=False)
    counts: dict[str, JsonValue] = json_field("counts", nullable=False)


configure_mappers()  # now, so that the rows built by row_of read and set their attributes

conversations = metadata.tables["conversations"]
conversation_messages = metadata.tables["conversation_messages"]
agent_runs = metadata.tables["agent_runs"]
execution_buffer_rows = metadata.tables["execution_buffer_rows"]
step_executions = metadata.tables["step_executions"]
tool_executions = metadata.tables["tool_executions"]
context_compactions = metadata.tables["context_compactions"]
forget_log = metadata.tables["forget_log"]
graph_checkpoints = metadata.tables["graph_checkpoints"]
graph_channel_values = metadata.tables["graph_channel_values"]
graph_writes = metadata.tables["graph_writes"]
stored_records = metadata.tables["stored_records"]
stored_entries = metadata.tables["stored_entries"]
adk_sessions = metadata.tables["adk_sessions"]
adk_events = metadata.tables["adk_events"]
adk_states = metadata.tables["adk_states"]

LEDGER_TABLES = (
    conversations,
    conversation_messages,
    agent_runs,
    execution_buffer_rows,
    step_executions,
    tool_executions,
    context_compactions,
)
"""The ledger's tables, each written before the ones that refer to it."""

GRAPH_TABLES = (graph_checkpoints, graph_channel_values, graph_writes)
"""The tables of the graph frameworks' checkpoints (revision 0014), each a thread's rows."""

STORE_TABLES = (stored_records, stored_entries)
"""The tables of the frameworks' conversation stores (revision 0015), each written before the
one after it is deleted: a conversation's entries, then its record."""

ADK_SESSION_TABLES = (adk_sessions, adk_events)
"""The tables of an agent framework's sessions (revision 0016) that hold a conversation's rows,
each written before the ones that refer to it (``adk_states`` is shared between sessions)."""


Row = TypeVar("Row", bound=LedgerTable)


def row_of(table: type[Row], values: Mapping[str, Any]) -> Row:
    """An instance of ``table`` holding ``values``, a row as read through the table's column
    types (keyed by column name: ``metadata`` for ``metadata_``), built as SQLAlchemy builds an
    instance it loads (through the class's instrumentation, no ``__init__``): not validated
    again, its attributes settable, detached from any session.

    The ledger builds the rows it returns this way, each checked against its checksum first:
    about a tenth of the cost of building it through ``__init__``."""
    instance = manager_of_class(table).new_instance()
    fields = instance.__dict__
    fields.update(values)
    fields["metadata_"] = fields.pop("metadata")
    return instance

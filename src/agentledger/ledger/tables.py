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

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    LargeBinary,
    MetaData,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import configure_mappers, registry
from sqlalchemy.orm.instrumentation import manager_of_class
from sqlalchemy.types import TypeDecorator, TypeEngine
from sqlmodel import Field, SQLModel
from sqlmodel.sql.sqltypes import AutoString

from .._values import (
    AgentStatus,
    CompactionKind,
    CompactionStatus,
    Role,
    StepType,
    StopReason,
    Usage,
)
from ._columns import USAGE_COLUMNS as USAGE_COLUMNS
from ._columns import ConversationKind as ConversationKind
from ._columns import EnumValues, duration_ms, sqlite_time, usage_of, utc_time

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""The ledger's own metadata, apart from ``SQLModel.metadata``, so an application's tables and
ours never mix in one migration environment."""


class LedgerTable(SQLModel, registry=registry(metadata=metadata)):
    """Base of the ledger's tables."""


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC (``timestamptz`` on PostgreSQL, ISO text on SQLite) and
    always read back as a timezone-aware datetime."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc_time(value)

    # SQLite keeps the time as text: there, one step each way instead of two (the same text as
    # SQLAlchemy's own DATETIME writes, ``YYYY-MM-DD HH:MM:SS.ffffff``, read as it reads it).

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            return None if value is None else sqlite_time(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def process(value: str | None) -> datetime | None:
            return None if value is None else utc_time(value)

        return process


class EnumText(TypeDecorator[StrEnum]):
    """A column of an enum's values: text in the database (the same DDL as a ``str`` column),
    the enum in Python. A value that is not one of the enum's is a ``ValueError`` either way
    (read back: a damaged row).

    Both directions are one dictionary lookup (rows are read and written by the thousand on
    the hot path); a ``StrEnum`` member and its text are the same key."""

    impl = AutoString
    cache_ok = True

    def __init__(self, enum: type[StrEnum]) -> None:
        super().__init__()
        self.enum = enum
        self._members = EnumValues(enum)
        self._texts = EnumValues(enum, {m.value: m.value for m in enum})

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        text: str | None = self._texts[value]
        return text

    def process_result_value(self, value: Any, dialect: Dialect) -> StrEnum | None:
        member: StrEnum | None = self._members[value]
        return member

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        return self._texts.__getitem__

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any]:
        return self._members.__getitem__


class JSONColumn(TypeDecorator[Any]):
    """JSON, with Python ``None`` stored as SQL ``NULL`` (not the JSON text ``null``): JSONB on
    PostgreSQL, whose dialect loads only for a PostgreSQL ledger (a SQLite ledger loads
    SQLAlchemy's SQLite dialect alone)."""

    impl = JSON(none_as_null=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(JSON(none_as_null=True))


JSONType = JSONColumn()
"""The ledger's JSON columns' type (the migrations that add such a column use it too)."""


def _json(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, JSONType, nullable=nullable))


def _checksum_column() -> Any:
    """A CRC-32 of the row's columns (``agentledger.ledger.checksums``); NULL for runs still
    running."""
    return Field(default=None, sa_type=BigInteger, nullable=True)


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


def _tenant(*, index: bool = False) -> Any:
    """``tenant_id``: the app's tenant the row belongs to, a copy of its conversation's on every
    table but ``conversations`` (revision 0010; last, as it was added). ``NULL``: no tenant."""
    return Field(default=None, nullable=True, index=index)


def _owner() -> Any:
    """``owner_id``: the user the row's conversation belongs to (revision 0010). ``NULL``: no
    owner."""
    return Field(default=None, nullable=True, index=True)


def _change_seq() -> Any:
    """``change_seq``: the stamp of the transaction that last inserted or updated the row, for
    copies of the ledger that read only what changed (revision 0008; set by the library as it
    writes on SQLite since 0009, by triggers otherwise); not covered by the checksums."""
    return Field(default=None, sa_type=BigInteger, nullable=True, index=True)


def _time(*, nullable: bool = False, index: bool = False) -> Any:
    return Field(default=None, sa_type=UTCDateTime, nullable=nullable, index=index)


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
    lease_expires_at: datetime | None = _time(nullable=True)
    created_at: datetime = _time()
    updated_at: datetime = _time(index=True)
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum_column()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant(index=True)
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
    tool_calls: list[JsonValue] | None = _json("tool_calls")
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    created_at: datetime = _time()
    in_context: bool = Field(default=True, sa_column_kwargs={"server_default": true()})
    summary_id: str | None = None
    checksum: int | None = _checksum_column()
    interrupted: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant()


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
    started_at: datetime = _time(index=True)
    finished_at: datetime | None = _time(nullable=True)
    heartbeat_at: datetime = _time()
    step_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    fully_priced: bool = True
    budget: dict[str, JsonValue] | None = _json("budget")
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum_column()
    partial_output: str | None = None
    """What the user has been shown so far of the step being streamed (``NULL`` when none)."""
    partial_step_index: int | None = None
    """The step ``partial_output`` belongs to."""
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant(index=True)
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
    tool_calls: list[JsonValue] | None = _json("tool_calls")
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    created_at: datetime = _time()
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


class StepExecutionRow(LedgerTable, table=True):
    __tablename__ = "step_executions"
    __table_args__ = (UniqueConstraint("run_id", "step_index"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id")
    step_index: int
    step_type: StepType = _enum(StepType)
    model: str | None = None
    finish_reason: str | None = None
    started_at: datetime = _time(index=True)
    finished_at: datetime = _time()
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
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum_column()
    tool_call_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    """How many tools the step called: its tool rows (revision 0005; last, as it was added)."""
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant()
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
    arguments: dict[str, JsonValue] | None = _json("arguments")
    validated_arguments: dict[str, JsonValue] | None = _json("validated_arguments")
    result: str
    is_error: bool = False
    error: str | None = None
    started_at: datetime = _time()
    finished_at: datetime = _time()
    duration_ms: float
    child_run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum_column()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant()


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
    created_at: datetime = _time(index=True)
    duration_ms: float = 0.0
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum_column()
    cache_write_1h_tokens: int = _one_hour_writes()
    change_seq: int | None = _change_seq()
    tenant_id: str | None = _tenant()


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
    forgotten_at: datetime = _time(index=True)
    tenant_id: str | None = Field(default=None, nullable=True, index=True)
    owner_id: str | None = None
    reason: str
    conversation_ids: list[JsonValue] = _json("conversation_ids", nullable=False)
    counts: dict[str, JsonValue] = _json("counts", nullable=False)


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
    channel_versions: dict[str, JsonValue] = _json("channel_versions", nullable=False)
    """The version of each channel the checkpoint holds (``graph_channel_values.version``)."""
    metadata_: dict[str, JsonValue] = _json("metadata", nullable=False)
    created_at: datetime = _time()
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


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
    message_ids: list[JsonValue] | None = _json("message_ids")
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


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
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


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
    branches: list[JsonValue] = _json("branches", nullable=False)
    usage: dict[str, JsonValue] = _json("usage", nullable=False)
    deferred: JsonValue = _json("deferred")
    format_version: int
    updated_at: datetime = _time(index=True)
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


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
    message: JsonValue = _json("message", nullable=False)
    message_ids: list[str | None] | None = _json("message_ids")
    created_at: datetime = _time()
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


class AdkSessionRow(LedgerTable, table=True):
    """An agent framework's session (Google ADK's): its conversation, the framework's id for
    it, its session-scoped state and the time of its last event (revision 0016). The app is
    the conversation's tenant and the user its owner, copied here as on ``agent_runs``."""

    __tablename__ = "adk_sessions"
    __table_args__ = (UniqueConstraint("tenant_id", "owner_id", "session_id"),)

    id: str = Field(primary_key=True, foreign_key="conversations.id")
    """The session's conversation."""
    session_id: str
    state: dict[str, JsonValue] = _json("state", nullable=False)
    update_time: float = Field(sa_type=Float(precision=53))
    """The framework's timestamp of the session's last event (seconds since the epoch)."""
    event_count: int
    """How many events the session has had: the next one's ``seq``, and the revision an
    append compares and sets."""
    checksum: int | None = _checksum_column()
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
    event: dict[str, JsonValue] = _json("event", nullable=False)
    message_ids: list[str | None] | None = _json("message_ids")
    checksum: int | None = _checksum_column()
    tenant_id: str | None = _tenant()


class AdkStateRow(LedgerTable, table=True):
    """The state an agent framework shares between sessions: every session of an app (the
    tenant; ``owner_id`` is ``''``), or every session of one user (the owner) of an app
    (revision 0016)."""

    __tablename__ = "adk_states"
    __table_args__ = (UniqueConstraint("tenant_id", "owner_id"),)

    id: str = Field(primary_key=True)
    tenant_id: str
    owner_id: str
    state: dict[str, JsonValue] = _json("state", nullable=False)
    checksum: int | None = _checksum_column()


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

"""The ledger's tables, as SQLModel classes. The schema is public API: ``schema/README.md``
documents it table by table, and a test keeps these models, the migrations and the generated
DDL in ``schema/`` from drifting apart.

Every id is a time-ordered text id (UUIDv7). Timestamps are stored in UTC and read back
timezone-aware. JSON columns are JSON on SQLite and JSONB on PostgreSQL. Token totals on
``agent_runs`` are the run's own steps (exclusive); what its subagents spent is derived from the
run tree, never added in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    MetaData,
    UniqueConstraint,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import registry
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

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
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # SQLite keeps the time as text: there, one step each way instead of two (the same text as
    # SQLAlchemy's own DATETIME writes, ``YYYY-MM-DD HH:MM:SS.ffffff``, read as it reads it).

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is None:
                raise ValueError(f"naive datetime {value!r}: the ledger stores aware UTC times")
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)

        def process(value: str | None) -> datetime | None:
            if value is None:
                return None
            moment = datetime.fromisoformat(value)
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

        return process


JSONType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""JSON, with Python ``None`` stored as SQL ``NULL`` (not the JSON text ``null``)."""


def _json(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, JSONType, nullable=nullable))


def _checksum() -> Any:
    """A CRC-32 of the row's columns (``agentledger.ledger._checksum``); NULL for runs still
    running."""
    return Field(default=None, sa_type=BigInteger, nullable=True)


def _time(*, nullable: bool = False, index: bool = False) -> Any:
    return Field(default=None, sa_type=UTCDateTime, nullable=nullable, index=index)


class Conversation(LedgerTable, table=True):
    __tablename__ = "conversations"

    id: str = Field(primary_key=True)
    kind: str = Field(default="main")
    title: str | None = None
    parent_run_id: str | None = Field(default=None, index=True)
    version: int = 0
    lease_holder: str | None = None
    lease_run_id: str | None = None
    lease_expires_at: datetime | None = _time(nullable=True)
    created_at: datetime = _time()
    updated_at: datetime = _time(index=True)
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum()


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
    role: str
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
    checksum: int | None = _checksum()


class AgentRun(LedgerTable, table=True):
    __tablename__ = "agent_runs"

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    parent_run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    root_run_id: str = Field(foreign_key="agent_runs.id", index=True)
    depth: int = 0
    agent_name: str
    model: str | None = None
    status: str = Field(index=True)
    stop_reason: str | None = None
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
    checksum: int | None = _checksum()


class ExecutionBufferRow(LedgerTable, table=True):
    __tablename__ = "execution_buffer_rows"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id")
    step_index: int
    seq: int
    section: str
    role: str
    content: str = ""
    name: str | None = None
    tool_calls: list[JsonValue] | None = _json("tool_calls")
    tool_call_id: str | None = None
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    created_at: datetime = _time()
    checksum: int | None = _checksum()


class StepExecutionRow(LedgerTable, table=True):
    __tablename__ = "step_executions"
    __table_args__ = (UniqueConstraint("run_id", "step_index"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="agent_runs.id")
    step_index: int
    step_type: str
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
    stop_reason: str | None = None
    decided_by: str | None = None
    outcome_detail: str | None = None
    final_response_required: bool = False
    error: str | None = None
    message_id: str | None = None
    content: str | None = None
    tool_calls: list[JsonValue] | None = _json("tool_calls")
    reasoning: str | None = None
    metadata_: dict[str, JsonValue] | None = _json("metadata")
    checksum: int | None = _checksum()


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
    checksum: int | None = _checksum()


class ContextCompactionRow(LedgerTable, table=True):
    __tablename__ = "context_compactions"

    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    run_id: str | None = Field(default=None, foreign_key="agent_runs.id", index=True)
    step_index: int | None = None
    kind: str
    status: str
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
    checksum: int | None = _checksum()


conversations = metadata.tables["conversations"]
conversation_messages = metadata.tables["conversation_messages"]
agent_runs = metadata.tables["agent_runs"]
execution_buffer_rows = metadata.tables["execution_buffer_rows"]
step_executions = metadata.tables["step_executions"]
tool_executions = metadata.tables["tool_executions"]
context_compactions = metadata.tables["context_compactions"]

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

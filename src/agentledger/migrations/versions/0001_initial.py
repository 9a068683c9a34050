"""The initial schema: conversations, their messages, runs, buffers, steps, tool executions.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=True),
        sa.Column("parent_run_id", sa.String(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("lease_holder", sa.String(), nullable=True),
        sa.Column("lease_run_id", sa.String(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_conversations_parent_run_id"), ["parent_run_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_conversations_updated_at"), ["updated_at"], unique=False
        )

    op.create_table(
        "agent_runs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("parent_run_id", sa.String(), nullable=True),
        sa.Column("root_run_id", sa.String(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("agent_name", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("stop_reason", sa.String(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step_count", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("fully_priced", sa.Boolean(), nullable=False),
        sa.Column("budget", JSON, nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_agent_runs_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_run_id"],
            ["agent_runs.id"],
            name=op.f("fk_agent_runs_parent_run_id_agent_runs"),
        ),
        sa.ForeignKeyConstraint(
            ["root_run_id"], ["agent_runs.id"], name=op.f("fk_agent_runs_root_run_id_agent_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_runs")),
    )
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_agent_runs_conversation_id"), ["conversation_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_agent_runs_parent_run_id"), ["parent_run_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_agent_runs_root_run_id"), ["root_run_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_agent_runs_started_at"), ["started_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_agent_runs_status"), ["status"], unique=False)

    op.create_table(
        "conversation_messages",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("section", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("content", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("tool_calls", JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(), nullable=True),
        sa.Column("reasoning", sa.String(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_messages_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_conversation_messages_run_id_agent_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_messages")),
        sa.UniqueConstraint(
            "conversation_id", "seq", name=op.f("uq_conversation_messages_conversation_id_seq")
        ),
    )
    with op.batch_alter_table("conversation_messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_conversation_messages_conversation_id_section_seq",
            ["conversation_id", "section", "seq"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_conversation_messages_run_id"), ["run_id"], unique=False
        )

    op.create_table(
        "execution_buffer_rows",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("section", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("content", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("tool_calls", JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(), nullable=True),
        sa.Column("reasoning", sa.String(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_execution_buffer_rows_run_id_agent_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_execution_buffer_rows")),
        sa.UniqueConstraint("run_id", "seq", name=op.f("uq_execution_buffer_rows_run_id_seq")),
    )
    op.create_table(
        "step_executions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("step_type", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("finish_reason", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("should_continue", sa.Boolean(), nullable=False),
        sa.Column("stop_reason", sa.String(), nullable=True),
        sa.Column("decided_by", sa.String(), nullable=True),
        sa.Column("outcome_detail", sa.String(), nullable=True),
        sa.Column("final_response_required", sa.Boolean(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("message_id", sa.String(), nullable=True),
        sa.Column("content", sa.String(), nullable=True),
        sa.Column("tool_calls", JSON, nullable=True),
        sa.Column("reasoning", sa.String(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_step_executions_run_id_agent_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_executions")),
        sa.UniqueConstraint(
            "run_id", "step_index", name=op.f("uq_step_executions_run_id_step_index")
        ),
    )
    with op.batch_alter_table("step_executions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_step_executions_started_at"), ["started_at"], unique=False
        )

    op.create_table(
        "tool_executions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("step_id", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("tool_call_id", sa.String(), nullable=False),
        sa.Column("tool_name", sa.String(), nullable=False),
        sa.Column("arguments", JSON, nullable=True),
        sa.Column("validated_arguments", JSON, nullable=True),
        sa.Column("result", sa.String(), nullable=False),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("child_run_id", sa.String(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["child_run_id"],
            ["agent_runs.id"],
            name=op.f("fk_tool_executions_child_run_id_agent_runs"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_tool_executions_run_id_agent_runs")
        ),
        sa.ForeignKeyConstraint(
            ["step_id"],
            ["step_executions.id"],
            name=op.f("fk_tool_executions_step_id_step_executions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_executions")),
    )
    with op.batch_alter_table("tool_executions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_tool_executions_child_run_id"), ["child_run_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_tool_executions_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_tool_executions_step_id"), ["step_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_tool_executions_tool_name"), ["tool_name"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("tool_executions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tool_executions_tool_name"))
        batch_op.drop_index(batch_op.f("ix_tool_executions_step_id"))
        batch_op.drop_index(batch_op.f("ix_tool_executions_run_id"))
        batch_op.drop_index(batch_op.f("ix_tool_executions_child_run_id"))

    op.drop_table("tool_executions")
    with op.batch_alter_table("step_executions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_step_executions_started_at"))

    op.drop_table("step_executions")
    op.drop_table("execution_buffer_rows")
    with op.batch_alter_table("conversation_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversation_messages_run_id"))
        batch_op.drop_index("ix_conversation_messages_conversation_id_section_seq")

    op.drop_table("conversation_messages")
    with op.batch_alter_table("agent_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_runs_status"))
        batch_op.drop_index(batch_op.f("ix_agent_runs_started_at"))
        batch_op.drop_index(batch_op.f("ix_agent_runs_root_run_id"))
        batch_op.drop_index(batch_op.f("ix_agent_runs_parent_run_id"))
        batch_op.drop_index(batch_op.f("ix_agent_runs_conversation_id"))

    op.drop_table("agent_runs")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversations_updated_at"))
        batch_op.drop_index(batch_op.f("ix_conversations_parent_run_id"))

    op.drop_table("conversations")

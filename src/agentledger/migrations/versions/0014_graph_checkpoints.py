"""Graph checkpoints: the state a graph framework (LangGraph) saves between its steps.

Revision ID: 0014
Revises: 0013

Three new tables, each keyed by the thread (a conversation: ``thread_id`` refers to
``conversations.id``) and the checkpoint namespace (``''`` for the graph itself, a subgraph's
path otherwise):

- ``graph_checkpoints``: one row per checkpoint: its id and its parent's, the framework's run
  id (``graph_run_id``, from the checkpoint's metadata), the checkpoint as the framework
  serialized it without its channel values (``checkpoint_type``, ``checkpoint``), the version
  of each channel it holds (``channel_versions``, JSON) and its metadata (JSON).
- ``graph_channel_values``: one row per version of a channel: the value as the framework
  serialized it (``value_type``, ``value``), or, for a channel of messages, ``message_ids``:
  the ids of the ledger rows that hold them (conversation messages, steps, tool executions),
  so that a message is stored once however many checkpoints hold it.
- ``graph_writes``: the writes of the tasks of a step not checkpointed yet (pending writes),
  as the framework serialized them.

Each row carries its thread's ``tenant_id`` and a ``checksum``; on PostgreSQL the tables get
the tenant policy of revision 0010. Nothing already there changes. This revision copies what
it runs; it imports nothing of the live package.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

TABLES = ("graph_checkpoints", "graph_channel_values", "graph_writes")

POLICY = "agentledger_tenant"
_IN_TENANT = "tenant_id = NULLIF(current_setting('agentledger.tenant_id', true), '')"
"""Revision 0010's policy: a row of the transaction's tenant."""


def _thread() -> list[sa.Column[str]]:
    return [
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("checkpoint_ns", sa.String(), nullable=False),
    ]


def _owned(table: str) -> list[sa.Column[int] | sa.Column[str] | sa.Constraint]:
    return [
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["thread_id"], ["conversations.id"], name=op.f(f"fk_{table}_thread_id_conversations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
    ]


def upgrade() -> None:
    op.create_table(
        "graph_checkpoints",
        *_thread(),
        sa.Column("checkpoint_id", sa.String(), nullable=False),
        sa.Column("parent_checkpoint_id", sa.String(), nullable=True),
        sa.Column("graph_run_id", sa.String(), nullable=True),
        sa.Column("checkpoint_type", sa.String(), nullable=False),
        sa.Column("checkpoint", sa.LargeBinary(), nullable=False),
        sa.Column("channel_versions", JSON, nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        *_owned("graph_checkpoints"),
        sa.UniqueConstraint(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            name=op.f("uq_graph_checkpoints_thread_id_checkpoint_ns_checkpoint_id"),
        ),
    )
    op.create_index(
        op.f("ix_graph_checkpoints_graph_run_id"), "graph_checkpoints", ["graph_run_id"]
    )
    op.create_table(
        "graph_channel_values",
        *_thread(),
        sa.Column("channel", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("value_type", sa.String(), nullable=True),
        sa.Column("value", sa.LargeBinary(), nullable=True),
        sa.Column("message_ids", JSON, nullable=True),
        *_owned("graph_channel_values"),
        sa.UniqueConstraint(
            "thread_id",
            "checkpoint_ns",
            "channel",
            "version",
            name=op.f("uq_graph_channel_values_thread_id_checkpoint_ns_channel_version"),
        ),
    )
    op.create_table(
        "graph_writes",
        *_thread(),
        sa.Column("checkpoint_id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(), nullable=False),
        sa.Column("value_type", sa.String(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("task_path", sa.String(), nullable=False),
        *_owned("graph_writes"),
        sa.UniqueConstraint(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            name=op.f("uq_graph_writes_thread_id_checkpoint_ns_checkpoint_id_task_id_idx"),
        ),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(
                f"CREATE POLICY {POLICY} ON {table} USING ({_IN_TENANT}) WITH CHECK ({_IN_TENANT})"
            )


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_checkpoints()
    # The policies go with their tables.
    op.drop_table("graph_writes")
    op.drop_table("graph_channel_values")
    op.drop_index(op.f("ix_graph_checkpoints_graph_run_id"), table_name="graph_checkpoints")
    op.drop_table("graph_checkpoints")


def _refuse_to_lose_checkpoints() -> None:
    """Revision 0013 has no checkpoints: a ledger that holds some is not downgraded."""
    held = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM graph_checkpoints")).scalar_one()
    if held:
        raise MigrationRefused(
            f"cannot downgrade below 0014: graph_checkpoints holds {held} checkpoints, which "
            "revision 0013 has no tables for. Delete the threads' checkpoints first "
            "(LedgerSaver.delete_thread) if losing them is intended."
        )

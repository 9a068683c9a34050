"""Context compaction: messages taken out of the model's context, and the compaction events.

Revision ID: 0004
Revises: 0003

``conversation_messages`` gains ``in_context`` (false once a summary replaced the message) and
``summary_id`` (the summary that replaced it), with an index to find where a conversation's
context begins; ``context_compactions`` records each masking and summarization with its token
delta. Every row already there is in context, with no summary: its checksum still matches (see
``ADDED`` in ``agentledger.ledger.checksums``), so nothing is rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_USAGE = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def upgrade() -> None:
    time = sa.DateTime(timezone=True)
    op.add_column(
        "conversation_messages",
        sa.Column("in_context", sa.Boolean(), nullable=False, server_default=sa.true()),
    )
    op.add_column("conversation_messages", sa.Column("summary_id", sa.String(), nullable=True))
    op.create_index(
        "ix_conversation_messages_conversation_id_in_context_seq",
        "conversation_messages",
        ["conversation_id", "in_context", "seq"],
    )
    op.create_table(
        "context_compactions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=True),
        sa.Column("last_seq", sa.Integer(), nullable=True),
        sa.Column("summary_id", sa.String(), nullable=True),
        sa.Column("tokens_before", sa.Integer(), nullable=False),
        sa.Column("tokens_after", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in _USAGE),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("created_at", time, nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column(
            "metadata",
            sa.JSON(none_as_null=True).with_variant(
                sa.dialects.postgresql.JSONB(none_as_null=True), "postgresql"
            ),
            nullable=True,
        ),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name="fk_context_compactions_conversation_id_conversations",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name="fk_context_compactions_run_id_agent_runs"
        ),
        sa.ForeignKeyConstraint(
            ["summary_id"],
            ["conversation_messages.id"],
            name="fk_context_compactions_summary_id_conversation_messages",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_context_compactions"),
    )
    for column in ("conversation_id", "run_id", "created_at"):
        op.create_index(f"ix_context_compactions_{column}", "context_compactions", [column])


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_compactions()
    op.drop_table("context_compactions")
    op.drop_index(
        "ix_conversation_messages_conversation_id_in_context_seq",
        table_name="conversation_messages",
    )
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    op.execute("ALTER TABLE conversation_messages DROP COLUMN summary_id")
    op.execute("ALTER TABLE conversation_messages DROP COLUMN in_context")


def _refuse_to_lose_compactions() -> None:
    """Revision 0003 has no way to say that a message left the model's context, nor a table
    for compaction events: a ledger that holds either is not downgraded."""
    bind = op.get_bind()
    compacted = bind.execute(
        sa.text(
            "SELECT COUNT(*) FROM conversation_messages "
            "WHERE NOT in_context OR summary_id IS NOT NULL"
        )
    ).scalar_one()
    events = bind.execute(sa.text("SELECT COUNT(*) FROM context_compactions")).scalar_one()
    if compacted or events:
        raise MigrationRefused(
            f"cannot downgrade below revision 0004: the ledger holds {events} context "
            f"compaction event(s) and {compacted} message(s) taken out of the model's context "
            "by a summary, which revision 0003 cannot represent (its code would put every "
            "summarized message back into the context). Nothing was changed. Restore the "
            "backup taken before the upgrade, or keep running this version."
        )

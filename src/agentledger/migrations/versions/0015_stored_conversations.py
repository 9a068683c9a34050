"""Stored conversations: the records and entry trees a framework's conversation store keeps.

Revision ID: 0015
Revises: 0014

Two new tables, for a framework whose conversation store keeps a record per conversation and
its messages as a tree of entries (pydantic-ai's ``ConversationStore``):

- ``stored_records``: one row per conversation (``id`` is the conversation's): its head entry,
  its ``revision`` (an opaque value every save compares and replaces), the framework's scope,
  the conversation and entry it was forked from, the tips of the branches it left
  (``branches``, JSON), the usage the framework accumulated (``usage``, JSON), what it awaits
  (``deferred``, JSON) and the record's format version.
- ``stored_entries``: one row per entry: the entry it follows (``parent_id``), its kind, the
  message as the framework serialized it less what the conversation's rows hold
  (``message``, JSON), the ids of those rows (``message_ids``, JSON, NULL when ``message`` is
  whole), and the conversation that wrote it (``conversation_id``; a fork's history reaches
  into its source's entries).

Each row carries its conversation's ``tenant_id`` and a ``checksum``; on PostgreSQL the tables
get the tenant policy of revision 0010. Nothing already there changes. This revision copies
what it runs; it imports nothing of the live package.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

TABLES = ("stored_records", "stored_entries")

POLICY = "agentledger_tenant"
_IN_TENANT = "tenant_id = NULLIF(current_setting('agentledger.tenant_id', true), '')"
"""Revision 0010's policy: a row of the transaction's tenant."""


def upgrade() -> None:
    op.create_table(
        "stored_records",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("head_id", sa.String(), nullable=True),
        sa.Column("revision", sa.String(), nullable=False),
        sa.Column("scope", sa.String(), nullable=True),
        sa.Column("forked_from", sa.String(), nullable=True),
        sa.Column("forked_at", sa.String(), nullable=True),
        sa.Column("branches", JSON, nullable=False),
        sa.Column("usage", JSON, nullable=False),
        sa.Column("deferred", JSON, nullable=True),
        sa.Column("format_version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["id"], ["conversations.id"], name=op.f("fk_stored_records_id_conversations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stored_records")),
    )
    op.create_index(op.f("ix_stored_records_scope"), "stored_records", ["scope"])
    op.create_index(op.f("ix_stored_records_updated_at"), "stored_records", ["updated_at"])
    op.create_table(
        "stored_entries",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("parent_id", sa.String(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("message", JSON, nullable=False),
        sa.Column("message_ids", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_stored_entries_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stored_entries")),
    )
    op.create_index(
        op.f("ix_stored_entries_conversation_id"), "stored_entries", ["conversation_id"]
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(
                f"CREATE POLICY {POLICY} ON {table} USING ({_IN_TENANT}) WITH CHECK ({_IN_TENANT})"
            )


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_conversations()
    # The policies go with their tables.
    op.drop_index(op.f("ix_stored_entries_conversation_id"), table_name="stored_entries")
    op.drop_table("stored_entries")
    op.drop_index(op.f("ix_stored_records_updated_at"), table_name="stored_records")
    op.drop_index(op.f("ix_stored_records_scope"), table_name="stored_records")
    op.drop_table("stored_records")


def _refuse_to_lose_conversations() -> None:
    """Revision 0014 has no stored records: a ledger that holds some is not downgraded."""
    held = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM stored_records")).scalar_one()
    if held:
        raise MigrationRefused(
            f"this ledger holds {held} stored conversation record(s), which revision 0014 has "
            "no table for: downgrading would lose them. Forget those conversations first "
            "(agentledger forget), or keep this revision"
        )

"""Agent sessions: the state and events an agent framework (Google's ADK) keeps per session.

Revision ID: 0016
Revises: 0015

Three new tables:

- ``adk_sessions``: one row per session, keyed by its conversation (``id`` refers to
  ``conversations.id``); the framework's id for it (``session_id``, unique with the app and
  the user, which are the conversation's tenant and owner, copied as ``tenant_id`` and
  ``owner_id``), the session-scoped state (JSON) and the time of its last event as the
  framework stamped it (``update_time``, seconds since the epoch, kept exact), and how many
  events it has had (``event_count``, the revision an append compares and sets).
- ``adk_events``: one row per event of a session, in order (``seq``), with the framework's
  event id, invocation id and timestamp, and the event as the framework serialized it (JSON),
  less the texts the ledger's rows hold (``message_ids``: the row of each part, JSON).
- ``adk_states``: the state shared by every session of an app (``tenant_id``; ``owner_id`` is
  ``''``) or of one user of an app (``owner_id``), as JSON, one row (``id``) for each.

Each row carries its tenant; on PostgreSQL the tables get the tenant policy of revision 0010.
Nothing already there changes. This revision copies what it runs; it imports nothing of the
live package.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

TABLES = ("adk_sessions", "adk_events", "adk_states")

POLICY = "agentledger_tenant"
_IN_TENANT = "tenant_id = NULLIF(current_setting('agentledger.tenant_id', true), '')"
"""Revision 0010's policy: a row of the transaction's tenant."""


def _in_conversation(table: str) -> sa.Constraint:
    return sa.ForeignKeyConstraint(
        ["conversation_id"],
        ["conversations.id"],
        name=op.f(f"fk_{table}_conversation_id_conversations"),
    )


def upgrade() -> None:
    op.create_table(
        "adk_sessions",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("state", JSON, nullable=False),
        sa.Column("update_time", sa.Float(precision=53), nullable=False),
        sa.Column("event_count", sa.Integer(), nullable=False),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["id"], ["conversations.id"], name=op.f("fk_adk_sessions_id_conversations")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adk_sessions")),
        sa.UniqueConstraint(
            "tenant_id",
            "owner_id",
            "session_id",
            name=op.f("uq_adk_sessions_tenant_id_owner_id_session_id"),
        ),
    )
    op.create_table(
        "adk_events",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(), nullable=False),
        sa.Column("invocation_id", sa.String(), nullable=False),
        sa.Column("timestamp", sa.Float(precision=53), nullable=False),
        sa.Column("event", JSON, nullable=False),
        sa.Column("message_ids", JSON, nullable=True),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=True),
        _in_conversation("adk_events"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adk_events")),
        sa.UniqueConstraint(
            "conversation_id", "seq", name=op.f("uq_adk_events_conversation_id_seq")
        ),
    )
    op.create_table(
        "adk_states",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("tenant_id", sa.String(), nullable=False),
        sa.Column("owner_id", sa.String(), nullable=False),
        sa.Column("state", JSON, nullable=False),
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adk_states")),
        sa.UniqueConstraint("tenant_id", "owner_id", name=op.f("uq_adk_states_tenant_id_owner_id")),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(
                f"CREATE POLICY {POLICY} ON {table} USING ({_IN_TENANT}) WITH CHECK ({_IN_TENANT})"
            )


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_sessions()
    # The policies go with their tables.
    for table in reversed(TABLES):
        op.drop_table(table)


def _refuse_to_lose_sessions() -> None:
    """Revision 0015 has no sessions: a ledger that holds some is not downgraded."""
    held = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM adk_sessions")).scalar_one()
    if held:
        raise MigrationRefused(
            f"cannot downgrade below 0016: adk_sessions holds {held} sessions, which revision "
            "0015 has no tables for. Delete the sessions first (LedgerSessionService."
            "delete_session) if losing them is intended."
        )

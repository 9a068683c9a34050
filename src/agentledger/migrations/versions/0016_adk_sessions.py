"""Agent sessions: the state and events an agent framework (Google's ADK) keeps per session.

Revision ID: 0016
Revises: 0015

Three new tables:

- ``adk_sessions``: one row per session, keyed by its conversation (``conversation_id`` refers
  to ``conversations.id``); the framework's own names for it (``app_name``, ``user_id``,
  ``session_id``, unique together), the session-scoped state (JSON) and the time of its last
  event as the framework stamped it (``update_time``, seconds since the epoch, kept exact).
- ``adk_events``: one row per event of a session, in order (``seq``), with the framework's
  event id, invocation id and timestamp, and the event as the framework serialized it (JSON).
- ``adk_states``: the state shared by every session of an app (``user_id`` is ``''``) or of
  one user of an app, as JSON.

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


def _owned() -> list[sa.Column[int] | sa.Column[str]]:
    return [
        sa.Column("checksum", sa.BigInteger(), nullable=True),
        sa.Column("tenant_id", sa.String(), nullable=True),
    ]


def _in_conversation(table: str) -> sa.Constraint:
    return sa.ForeignKeyConstraint(
        ["conversation_id"],
        ["conversations.id"],
        name=op.f(f"fk_{table}_conversation_id_conversations"),
    )


def upgrade() -> None:
    op.create_table(
        "adk_sessions",
        sa.Column("conversation_id", sa.String(), nullable=False),
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("state", JSON, nullable=False),
        sa.Column("update_time", sa.Float(precision=53), nullable=False),
        *_owned(),
        _in_conversation("adk_sessions"),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_adk_sessions")),
        sa.UniqueConstraint(
            "app_name",
            "user_id",
            "session_id",
            name=op.f("uq_adk_sessions_app_name_user_id_session_id"),
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
        *_owned(),
        _in_conversation("adk_events"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adk_events")),
        sa.UniqueConstraint(
            "conversation_id", "seq", name=op.f("uq_adk_events_conversation_id_seq")
        ),
    )
    op.create_table(
        "adk_states",
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("state", JSON, nullable=False),
        *_owned(),
        sa.PrimaryKeyConstraint("app_name", "user_id", name=op.f("pk_adk_states")),
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

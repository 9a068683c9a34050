"""Owners and tenants: whose each conversation is, and a log of what was forgotten.

Revision ID: 0010
Revises: 0009

``conversations`` gains ``tenant_id`` and ``owner_id`` (nullable text, indexed): the app's
tenant (an organisation, a workspace) and the user a conversation belongs to. Every other ledger
table gains ``tenant_id``, a copy of its conversation's, so that a query (and PostgreSQL's
row-level security policies) can keep to one tenant without a join; ``agent_runs`` also gains
``owner_id`` (runs are listed, rolled up and forgotten by owner). A subagent's conversation and
runs carry the tenant and owner of the run that spawned it.

``forget_log`` is new: one row per forgetting (``Ledger.forget``, ``forget_owner``,
``forget_inactive``) holding only ids, the time and how many rows of each table went, never
any content, so that an operator can show the deletion happened.

Every row already there holds ``NULL`` in the new columns (it belongs to no tenant and no
owner): its checksum still matches (see ``ADDED`` in ``agentledger.ledger.checksums``), so
nothing is rewritten.

On PostgreSQL every ledger table gets row-level security: one policy, ``agentledger_tenant``,
lets a role other than the tables' owner see and write a row only when its ``tenant_id`` is the
transaction's ``agentledger.tenant_id`` setting (which a scoped handle sets, ``SET LOCAL``);
with no setting, or an empty one, such a role sees no row at all, never every row. The tables'
owner (the role that migrates) is not subject to it (row-level security is enabled, not
forced): migrations, analytics and operators' tools see the whole ledger as before. The
application role (``agentledger db app-role``) is. Revision 0008's deletion trigger now runs as
the owner (``SECURITY DEFINER``, with a fixed ``search_path``), so that a delete by the
application role is logged in ``agentledger_deletions`` without that role being granted it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT = "tenant_id"
OWNER = "owner_id"

INHERITING = (
    "conversation_messages",
    "agent_runs",
    "execution_buffer_rows",
    "step_executions",
    "tool_executions",
    "context_compactions",
)
"""The tables whose rows carry their conversation's tenant."""

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

INDEXED = {"conversations": (TENANT, OWNER), "agent_runs": (TENANT, OWNER)}
"""The owner and tenant columns with an index of their own."""

SECURED = ("conversations", *INHERITING, "forget_log")
"""The tables under row-level security on PostgreSQL: every table holding a tenant's rows."""

POLICY = "agentledger_tenant"
_IN_TENANT = f"{TENANT} = NULLIF(current_setting('agentledger.tenant_id', true), '')"
"""A row of the transaction's tenant. ``current_setting(..., true)`` is NULL in a session that
never set it and ``''`` after a transaction that set it ended: both match no row."""

_LOG_DELETION = "agentledger_log_deletion()"
"""Revision 0008's trigger function that logs a deleted row in ``agentledger_deletions``."""

_RUN_AS_OWNER = f"""DO $$
BEGIN
    EXECUTE 'ALTER FUNCTION {_LOG_DELETION} SECURITY DEFINER SET search_path = '
        || quote_ident(current_schema()) || ', pg_temp';
END
$$"""
"""Run the deletion log as the function's owner, who may write ``agentledger_deletions``,
with the ledger's schema as its only search path (``pg_temp`` last, so a temporary table of
the caller's cannot stand in for the log)."""


def upgrade() -> None:
    op.add_column("conversations", sa.Column(TENANT, sa.String(), nullable=True))
    op.add_column("conversations", sa.Column(OWNER, sa.String(), nullable=True))
    for table in INHERITING:
        op.add_column(table, sa.Column(TENANT, sa.String(), nullable=True))
    op.add_column("agent_runs", sa.Column(OWNER, sa.String(), nullable=True))
    for table, columns in INDEXED.items():
        for column in columns:
            op.create_index(op.f(f"ix_{table}_{column}"), table, [column])
    op.create_table(
        "forget_log",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(TENANT, sa.String(), nullable=True),
        sa.Column(OWNER, sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("conversation_ids", JSON, nullable=False),
        sa.Column("counts", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forget_log")),
    )
    op.create_index(op.f("ix_forget_log_forgotten_at"), "forget_log", ["forgotten_at"])
    op.create_index(op.f(f"ix_forget_log_{TENANT}"), "forget_log", [TENANT])
    if op.get_bind().dialect.name == "postgresql":
        _secure_by_tenant()


def _secure_by_tenant() -> None:
    """Row-level security on every tenant's table (see the module's docstring)."""
    for table in SECURED:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {POLICY} ON {table} USING ({_IN_TENANT}) WITH CHECK ({_IN_TENANT})"
        )
    op.execute(_RUN_AS_OWNER)


def _unsecure() -> None:
    op.execute(f"ALTER FUNCTION {_LOG_DELETION} SECURITY INVOKER RESET search_path")
    for table in reversed(SECURED):
        op.execute(f"DROP POLICY {POLICY} ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_owners()
    if op.get_bind().dialect.name == "postgresql":
        _unsecure()  # first: the policies use the columns dropped below
    op.drop_table("forget_log")
    for table, columns in INDEXED.items():
        for column in columns:
            op.drop_index(op.f(f"ix_{table}_{column}"), table_name=table)
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    op.execute(f"ALTER TABLE agent_runs DROP COLUMN {OWNER}")
    for table in reversed(INHERITING):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {TENANT}")
    op.execute(f"ALTER TABLE conversations DROP COLUMN {OWNER}")
    op.execute(f"ALTER TABLE conversations DROP COLUMN {TENANT}")


def _refuse_to_lose_owners() -> None:
    """Revision 0009 has no owners: a ledger whose conversations have one, or that has
    forgotten anything, is not downgraded (whose each conversation is, and the proof of what
    was deleted, would be lost)."""
    bind = op.get_bind()
    owned = bind.execute(
        sa.text(
            f"SELECT COUNT(*) FROM conversations WHERE {TENANT} IS NOT NULL OR {OWNER} IS NOT NULL"
        )
    ).scalar_one()
    logged = bind.execute(sa.text("SELECT COUNT(*) FROM forget_log")).scalar_one()
    if owned or logged:
        raise MigrationRefused(
            f"cannot downgrade below 0010: {owned} conversations have a tenant or an owner and "
            f"forget_log holds {logged} rows, which revision 0009 has no columns for. Export "
            "what you need first, or clear them by hand if losing them is intended."
        )

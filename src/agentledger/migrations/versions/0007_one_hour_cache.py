"""One-hour cache writes: the part of the cache writes a provider keeps for an hour.

Revision ID: 0007
Revises: 0006

``agent_runs``, ``step_executions`` and ``context_compactions`` gain ``cache_write_1h_tokens``,
the part of ``cache_write_tokens`` written to a one-hour prompt cache (Anthropic's
``ttl: "1h"``, priced at twice the input price where five-minute writes cost less).
``cache_write_tokens`` still counts every write. Every row already there holds the default
(``0``): its checksum still matches (see ``ADDED`` in ``agentledger.ledger.checksums``), so
nothing is rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("agent_runs", "step_executions", "context_compactions")
COLUMN = "cache_write_1h_tokens"


def upgrade() -> None:
    for table in TABLES:
        op.add_column(
            table,
            sa.Column(COLUMN, sa.Integer(), nullable=False, server_default=sa.text("0")),
        )


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_one_hour_writes()
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    for table in reversed(TABLES):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {COLUMN}")


def _refuse_to_lose_one_hour_writes() -> None:
    """Revision 0006 cannot tell one-hour cache writes from five-minute ones: a ledger that
    has recorded any is not downgraded (their count, and what set their price, would be
    lost)."""
    bind = op.get_bind()
    held = {
        table: bind.execute(
            sa.text(f"SELECT COUNT(*) FROM {table} WHERE {COLUMN} > 0")
        ).scalar_one()
        for table in TABLES
    }
    if any(held.values()):
        counts = ", ".join(f"{count} in {table}" for table, count in held.items() if count)
        raise MigrationRefused(
            f"cannot downgrade below revision 0007: the ledger holds rows with one-hour cache "
            f"writes ({counts}), which revision 0006 cannot represent (it would count them as "
            "five-minute writes). Nothing was changed. Restore the backup taken before the "
            "upgrade, or keep running this version."
        )

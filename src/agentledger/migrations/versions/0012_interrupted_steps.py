"""Interrupted steps: the step a cancel cut short is in the trace.

Revision ID: 0012
Revises: 0011

``step_executions`` gains ``interrupted`` (boolean, default false): true for the step a run was
in when it was cancelled (or failed after text was shown), recorded in the interrupt's
transaction as far as it came, with a ``tool_executions`` row for each of its calls (its result
when it returned in time, else an error saying the call was interrupted and whether it had
started). Every row already there holds the default: its checksum still matches (see ``ADDED``
in ``agentledger.ledger.checksums``), so nothing is rewritten.

Downgrading keeps every row: revision 0011 reads an interrupted step as a step whose outcome
``decided_by`` is ``interrupted``. The checksum of an interrupted step covers the flag, so the
downgrade clears those rows' checksums (a row without one is not checked); upgrading again
sets the flag back on them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_steps = sa.table(
    "step_executions",
    sa.column("decided_by", sa.String()),
    sa.column("checksum", sa.BigInteger()),
    sa.column("interrupted", sa.Boolean()),
)
"""The columns of ``step_executions`` this revision reads and writes, as they are at it."""

DECIDED_BY_AN_INTERRUPT = "interrupted"
"""The ``decided_by`` of an interrupted step's outcome."""


def upgrade() -> None:
    op.add_column(
        "step_executions",
        sa.Column("interrupted", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    if op.get_context().as_sql:
        return  # the DDL alone: no rows to look at
    # The interrupted steps a downgrade to 0011 kept (their checksums cleared) are flagged again.
    op.execute(
        _steps.update()
        .where(_steps.c.decided_by == DECIDED_BY_AN_INTERRUPT, _steps.c.checksum.is_(None))
        .values(interrupted=sa.true())
    )


def downgrade() -> None:
    op.execute(_steps.update().where(_steps.c.interrupted).values(checksum=None))
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    op.execute("ALTER TABLE step_executions DROP COLUMN interrupted")

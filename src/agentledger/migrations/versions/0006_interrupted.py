"""Interrupted turns: answers cut short, and the partial output of a step being streamed.

Revision ID: 0006
Revises: 0005

``conversation_messages`` gains ``interrupted`` (true for the part of an answer the user was
shown before its run was cancelled or its process died); ``agent_runs`` gains
``partial_output`` and ``partial_step_index``, what has been shown so far of the step a running
run is streaming, made durable at an interval so that a process killed mid-answer loses none of
it. Every row already there holds the defaults (``false``, ``NULL``): its checksum still matches
(see ``ADDED`` in ``agentledger.ledger.checksums``), so nothing is rewritten. Stop reasons are
text, unconstrained in SQL: the new one, ``cancelled``, needs no change of schema.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentledger.migrations._refusal import MigrationRefused

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "conversation_messages",
        sa.Column("interrupted", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("agent_runs", sa.Column("partial_output", sa.String(), nullable=True))
    op.add_column("agent_runs", sa.Column("partial_step_index", sa.Integer(), nullable=True))


def downgrade() -> None:
    if not op.get_context().as_sql:
        _refuse_to_lose_interrupted_turns()
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    op.execute("ALTER TABLE agent_runs DROP COLUMN partial_step_index")
    op.execute("ALTER TABLE agent_runs DROP COLUMN partial_output")
    op.execute("ALTER TABLE conversation_messages DROP COLUMN interrupted")


def _refuse_to_lose_interrupted_turns() -> None:
    """Revision 0005 has no way to say that an answer was cut short, nor to keep what a
    streaming run has shown, and its code cannot read the stop reason ``cancelled``: a ledger
    that holds any of them is not downgraded."""
    bind = op.get_bind()
    flagged = bind.execute(
        sa.text("SELECT COUNT(*) FROM conversation_messages WHERE interrupted")
    ).scalar_one()
    partial = bind.execute(
        sa.text("SELECT COUNT(*) FROM agent_runs WHERE partial_output IS NOT NULL")
    ).scalar_one()
    cancelled = bind.execute(
        sa.text("SELECT COUNT(*) FROM agent_runs WHERE stop_reason = 'cancelled'")
    ).scalar_one()
    if flagged or partial or cancelled:
        raise MigrationRefused(
            f"cannot downgrade below revision 0006: the ledger holds {flagged} interrupted "
            f"answer(s), {cancelled} cancelled run(s) and {partial} running run(s) with partial "
            "output, which revision 0005 cannot represent (its code would read an answer cut "
            "short as a whole one, and lose what a streaming run has shown). Nothing was "
            "changed. Restore the backup taken before the upgrade, or keep running this "
            "version."
        )

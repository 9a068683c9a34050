"""Row checksums: a ``checksum`` column on every table, so damage reads as an error.

Revision ID: 0003
Revises: 0002

The rows already there are sealed as they are: each row's checksum over the columns it covers at
this revision (:data:`COVERED`), formed as ``agentledger.migrations._checksums_0003`` forms it
(running runs stay unsealed: their totals change with every step).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from agentledger.migrations._checksums_0003 import checksum_over, shape

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MESSAGE = ["role", "content", "name", "tool_calls", "tool_call_id", "reasoning", "metadata"]
_USAGE = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
]
COVERED: dict[str, list[str]] = {
    "conversations": ["id", "kind", "title", "parent_run_id", "created_at", "metadata"],
    "conversation_messages": [
        "id",
        "conversation_id",
        "section",
        "seq",
        *_MESSAGE,
        "run_id",
        "created_at",
    ],
    "agent_runs": [
        "id",
        "conversation_id",
        "parent_run_id",
        "root_run_id",
        "depth",
        "agent_name",
        "model",
        "status",
        "stop_reason",
        "error",
        "started_at",
        "finished_at",
        "step_count",
        *_USAGE,
        "cost_usd",
        "fully_priced",
        "budget",
        "metadata",
    ],
    "execution_buffer_rows": [
        "id",
        "run_id",
        "step_index",
        "seq",
        "section",
        *_MESSAGE,
        "created_at",
    ],
    "step_executions": [
        "id",
        "run_id",
        "step_index",
        "step_type",
        "model",
        "finish_reason",
        "started_at",
        "finished_at",
        "duration_ms",
        *_USAGE,
        "cost_usd",
        "should_continue",
        "stop_reason",
        "decided_by",
        "outcome_detail",
        "final_response_required",
        "error",
        "message_id",
        "content",
        "tool_calls",
        "reasoning",
        "metadata",
    ],
    "tool_executions": [
        "id",
        "run_id",
        "step_id",
        "step_index",
        "position",
        "tool_call_id",
        "tool_name",
        "arguments",
        "validated_arguments",
        "result",
        "is_error",
        "error",
        "started_at",
        "finished_at",
        "duration_ms",
        "child_run_id",
        "metadata",
    ],
}
"""The columns each checksum covers at this revision."""

_BATCH = 2000


def upgrade() -> None:
    for name in COVERED:
        op.add_column(name, sa.Column("checksum", sa.BigInteger(), nullable=True))
    if op.get_context().as_sql:
        return  # DDL only (``agentledger db schema``): there are no rows
    # The rows already there are sealed as they are now: damage from here on shows.
    bind = op.get_bind()
    for name, columns in COVERED.items():
        table = shape(name, columns)
        query = sa.select(*(table.c[c] for c in columns)).order_by(table.c.id)
        if name == "agent_runs":
            query = query.where(table.c.status != "running")  # sealed when they end
        set_checksum = (
            sa.update(table)
            .where(table.c.id == sa.bindparam("row_id"))
            .values(checksum=sa.bindparam("row_checksum"))
        )
        last: str | None = None
        while True:
            page = query if last is None else query.where(table.c.id > last)
            rows = bind.execute(page.limit(_BATCH)).mappings().all()
            if not rows:
                break
            bind.execute(
                set_checksum,
                [{"row_id": r["id"], "row_checksum": checksum_over(columns, r)} for r in rows],
            )
            last = rows[-1]["id"]


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later): no table copy, so the
    # foreign keys pointing at these tables stay satisfied throughout.
    for name in COVERED:
        op.execute(f"ALTER TABLE {name} DROP COLUMN checksum")

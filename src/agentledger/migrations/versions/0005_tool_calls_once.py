"""A step's tool calls stored once: in its tool rows.

Revision ID: 0005
Revises: 0004

Until 0004 every tool call a model made was stored twice: in the step's ``tool_calls`` JSON
(id, name, arguments, and the raw text of arguments that were not JSON) and in the call's
``tool_executions`` row (``tool_call_id``, ``tool_name``, ``arguments``,
``metadata.raw_arguments``). This revision drops ``step_executions.tool_calls`` and adds
``tool_call_count``, how many calls the step made, so that a tool row lost from the end of a
step is still noticed. Before dropping anything it checks, step by step, that the tool rows
hold every call exactly as ``tool_calls`` held it, and each step row against its checksum; if
any differs it refuses (``MigrationError``) and changes nothing. Every step row's checksum is
then computed again, over the new columns, formed as 0003 formed it
(``agentledger.migrations._checksums_0003``).

The downgrade rebuilds ``tool_calls`` from the tool rows, checking that each step has the tool
rows it counted, and seals the rows again as 0004 did.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from agentledger.migrations._checksums_0003 import JSON, checksum_over, shape
from agentledger.migrations._refusal import MigrationRefused

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE_OUTPUT = [
    "id",
    "run_id",
    "step_index",
    "step_type",
    "model",
    "finish_reason",
    "started_at",
    "finished_at",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "should_continue",
    "stop_reason",
    "decided_by",
    "outcome_detail",
    "final_response_required",
    "error",
    "message_id",
    "content",
]
COVERED_BEFORE = [*_BEFORE_OUTPUT, "tool_calls", "reasoning", "metadata"]
"""What a step's checksum covers at 0004 (as 0003 set it)."""
COVERED_AFTER = [*_BEFORE_OUTPUT, "reasoning", "metadata", "tool_call_count"]
"""What it covers from this revision on."""

_PAGE = 500
_RAW_ARGUMENTS = "raw_arguments"


def upgrade() -> None:
    op.add_column(
        "step_executions",
        sa.Column("tool_call_count", sa.Integer(), nullable=False, server_default="0"),
    )
    if not op.get_context().as_sql:  # DDL only (``agentledger db schema``): there are no rows
        _count_calls_and_seal()
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35 and later), as 0003 does.
    op.execute("ALTER TABLE step_executions DROP COLUMN tool_calls")


def downgrade() -> None:
    op.add_column("step_executions", sa.Column("tool_calls", JSON, nullable=True))
    if not op.get_context().as_sql:
        _restore_calls_and_seal()
    op.execute("ALTER TABLE step_executions DROP COLUMN tool_call_count")


def _count_calls_and_seal() -> None:
    bind = op.get_bind()
    steps = _steps(COVERED_BEFORE)
    for page in _pages(bind, steps):
        calls = _calls_of(bind, [row["id"] for row in page])
        updates = []
        for row in page:
            _check_sealed(row, COVERED_BEFORE)
            held = calls.get(row["id"], [])
            if list(row["tool_calls"] or ()) != held:
                raise MigrationRefused(
                    f"cannot upgrade to revision 0005: step {row['id']} of run {row['run_id']} "
                    f"holds tool calls {row['tool_calls']} but its tool rows hold {held}, so "
                    "dropping step_executions.tool_calls would lose information. Nothing was "
                    "changed. Run `agentledger db verify` on this ledger, and restore it from a "
                    "backup if it is damaged."
                )
            after = {**row, "tool_call_count": len(held)}
            updates.append(
                _update(row, tool_call_count=len(held), checksum=_seal(after, COVERED_AFTER))
            )
        _apply(bind, steps, updates)


def _restore_calls_and_seal() -> None:
    bind = op.get_bind()
    steps = _steps(COVERED_AFTER)
    for page in _pages(bind, steps):
        calls = _calls_of(bind, [row["id"] for row in page])
        updates = []
        for row in page:
            _check_sealed(row, COVERED_AFTER)
            held = calls.get(row["id"], [])
            if len(held) != row["tool_call_count"]:
                raise MigrationRefused(
                    f"cannot downgrade below revision 0005: step {row['id']} of run "
                    f"{row['run_id']} counted {row['tool_call_count']} tool call(s) but has "
                    f"{len(held)} tool row(s), so its tool_calls cannot be rebuilt. Nothing was "
                    "changed. Run `agentledger db verify` on this ledger."
                )
            before = {**row, "tool_calls": held or None}
            updates.append(
                _update(row, tool_calls=held or None, checksum=_seal(before, COVERED_BEFORE))
            )
        _apply(bind, steps, updates)


def _steps(covered: Sequence[str]) -> sa.TableClause:
    """``step_executions`` with the columns ``covered`` and the ones this revision writes,
    read and written through their types at 0003 (times aware, JSON decoded)."""
    return shape("step_executions", [*covered, "tool_calls", "tool_call_count"])


_TOOLS = shape(
    "tool_executions", ["step_id", "position", "tool_call_id", "tool_name", "arguments", "metadata"]
)
"""The columns of ``tool_executions`` that hold a step's calls."""


def _pages(bind: sa.Connection, steps: sa.TableClause) -> Iterator[list[dict[str, Any]]]:
    """The step rows, a page at a time, in id order."""
    present = {c["name"] for c in sa.inspect(bind).get_columns("step_executions")}
    wanted = [c for c in steps.c if c.name in present]
    query = sa.select(*wanted).order_by(steps.c.id).limit(_PAGE)
    last: str | None = None
    while True:
        page = bind.execute(query if last is None else query.where(steps.c.id > last))
        rows = [dict(r) for r in page.mappings()]
        if not rows:
            return
        yield rows
        last = rows[-1]["id"]


def _calls_of(bind: sa.Connection, step_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The tool calls each step made, from its tool rows, as ``tool_calls`` held them."""
    tools = _TOOLS
    query = (
        sa.select(
            tools.c.step_id,
            tools.c.tool_call_id,
            tools.c.tool_name,
            tools.c.arguments,
            tools.c.metadata,
        )
        .where(tools.c.step_id.in_(step_ids))
        .order_by(tools.c.step_id, tools.c.position)
    )
    calls: dict[str, list[dict[str, Any]]] = {}
    for row in bind.execute(query):
        call: dict[str, Any] = {
            "id": row.tool_call_id,
            "name": row.tool_name,
            "arguments": row.arguments or {},
        }
        raw = (row.metadata or {}).get(_RAW_ARGUMENTS)
        if raw is not None:
            call[_RAW_ARGUMENTS] = raw
        calls.setdefault(row.step_id, []).append(call)
    return calls


def _check_sealed(row: Mapping[str, Any], covered: Sequence[str]) -> None:
    """Refuse a step row that does not match its checksum: this revision seals every row
    again, and must not seal damage as if it were data."""
    if row["checksum"] is not None and row["checksum"] != checksum_over(covered, row):
        raise MigrationRefused(
            f"cannot migrate past revision 0005: step {row['id']} of run {row['run_id']} does "
            "not match its checksum, so the ledger is damaged. Nothing was changed. Restore it "
            "from a backup; `agentledger db verify` lists every damaged row."
        )


def _seal(row: Mapping[str, Any], covered: Sequence[str]) -> int | None:
    """The row's checksum over ``covered``, the columns of the revision it is migrated to
    (a row without one, written by hand, stays without)."""
    return None if row["checksum"] is None else checksum_over(covered, row)


def _update(row: Mapping[str, Any], **values: Any) -> dict[str, Any]:
    return {"step_id": row["id"], **{f"new_{name}": value for name, value in values.items()}}


def _apply(bind: sa.Connection, steps: sa.TableClause, updates: list[dict[str, Any]]) -> None:
    if not updates:
        return
    names = [key.removeprefix("new_") for key in updates[0] if key != "step_id"]
    statement = (
        sa.update(steps)
        .where(steps.c.id == sa.bindparam("step_id"))
        .values({name: sa.bindparam(f"new_{name}") for name in names})
    )
    bind.execute(statement, updates)

"""A run's row: reading it, and ending it, sealed with the checksum of the whole row.

A run's totals change with every step while it runs, so its row has no checksum until it
ends (commit, failure, abandon); ending it writes the end columns and the checksum together.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from .._values import AgentState, AgentStatus, printable
from ._connection_reads import ConnectionReads
from ._lookup import check_id, not_found
from ._queries import load_steps
from ._row_mapping import run_columns_at_end
from ._statements import statements_for
from .checksums import sealed
from .tables import agent_runs

_RUN_ROW = select(agent_runs).where(agent_runs.c.id == bindparam("run_id"))
_END_RUN = update(agent_runs).where(agent_runs.c.id == bindparam("run_id"))
"""Sets the columns its row names (the run's end, and its checksum)."""
_END_RUN_IF_RUNNING = _END_RUN.where(agent_runs.c.status == AgentStatus.RUNNING.value)


def run_row(conn: Connection, run_id: str) -> dict[str, Any]:
    """The row of run ``run_id``; :class:`NotFoundError` when there is none."""
    check_id("run", run_id)
    rows = statements_for(conn.dialect).select(conn, _RUN_ROW, {"run_id": run_id})
    if not rows:
        raise not_found("run", run_id)
    return rows[0]


def end_run(
    conn: Connection,
    run_id: str,
    values: dict[str, Any],
    *,
    only_if_running: bool = False,
    row: dict[str, Any] | None = None,
) -> bool:
    """Write the columns that end a run, with the checksum of the whole row they make (``row``:
    the run's row as this process knows it, else it is read). With ``only_if_running``, a run
    that is no longer running is left alone (False)."""
    if row is None or only_if_running:
        row = run_row(conn, run_id)
    if only_if_running and row["status"] != AgentStatus.RUNNING:
        return False
    ended = sealed(agent_runs, {**row, **values})
    statement = _END_RUN_IF_RUNNING if only_if_running else _END_RUN
    columns = {**values, "checksum": ended["checksum"], "run_id": run_id}
    return bool(statements_for(conn.dialect).execute(conn, statement, columns).rowcount)


def recorded_totals(
    conn: Connection,
    conversation_id: str,
    run_id: str,
    status: AgentStatus,
    error: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The columns that end a run, with totals summed from the step rows it recorded."""
    steps = load_steps(ConnectionReads(conn), run_id)
    recorded = AgentState(conversation_id=conversation_id, run_id=run_id, step_executions=steps)
    # An exception's message may hold what no backend stores (a NUL): it is diagnostics, escaped.
    return run_columns_at_end(recorded, status, printable(error) if error else error, now)

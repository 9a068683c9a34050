"""Recovery: finding the runs whose process is gone (stale runs), deciding whether a run may be
taken over, and abandoning stale runs.

A run is stale when it is still ``running`` and its conversation's lease expired (or another
run took it), or, with ``stale_after``, when it has not beaten for that long. Resuming one is
the agent's business (``Agent.resume`` rebuilds its state and goes on, redoing the step in
progress, whose partial output the new step replaces); abandoning one only needs the ledger: it
is marked ``interrupted``, its buffer flushed and its conversation freed. The conversation stays
clean either way: a run's answer only ever reaches it at its commit, but for what a streaming
step had shown when its process died (its partial output), which an abandon commits as a
cancel would, flagged ``interrupted``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, and_, delete, false, or_, select, update

from .._recording import interrupted_answer
from .._values import AgentStatus
from ..errors import ConversationBusyError, UsageError
from ._arguments import quiet_since
from ._engine import Database
from ._interrupts import append_interrupted_answer, count_new_version
from ._run_ending import end_run, recorded_totals, run_row
from .tables import agent_runs, conversations, execution_buffer_rows

ABANDONED = "abandoned by recover(): its process stopped before the run ended"


def stale_condition(now: datetime, stale_after: float | None) -> Any:
    """SQL: a running run whose process is gone."""
    quiet = (
        agent_runs.c.heartbeat_at <= quiet_since(now, stale_after)
        if stale_after is not None
        else false()
    )
    return and_(
        agent_runs.c.status == AgentStatus.RUNNING.value,
        or_(
            conversations.c.lease_run_id.is_(None),
            conversations.c.lease_run_id != agent_runs.c.id,
            conversations.c.lease_expires_at <= now,
            quiet,
        ),
    )


def stale_query(now: datetime, stale_after: float | None) -> Select[Any]:
    """The rows of the stale runs, oldest first."""
    return (
        select(agent_runs)
        .join(conversations, conversations.c.id == agent_runs.c.conversation_id)
        .where(stale_condition(now, stale_after))
        .order_by(agent_runs.c.started_at)
    )


def check_claimable(run: Any, conversation: Any, now: datetime, stale_after: float | None) -> None:
    """Raise unless the run (its row) may be taken over now: failed, with its conversation
    free; or running, with its process gone (see the module)."""
    if run["status"] == AgentStatus.FAILED:
        if conversation["lease_holder"] is None or conversation["lease_expires_at"] <= now:
            return
        raise ConversationBusyError(
            f"run {run['id']} failed, but another run ({conversation['lease_run_id']}) is in "
            f"progress on conversation {run['conversation_id']}; resume it once that one ends"
        )
    if run["status"] != AgentStatus.RUNNING:
        raise UsageError(
            f"run {run['id']} is {run['status']}: only running runs whose process is gone, and "
            "failed runs, can be resumed"
        )
    expired = conversation["lease_expires_at"] is None or conversation["lease_expires_at"] <= now
    taken_over = conversation["lease_run_id"] != run["id"]
    quiet = stale_after is not None and run["heartbeat_at"] <= quiet_since(now, stale_after)
    if not (expired or taken_over or quiet):
        raise ConversationBusyError(
            f"run {run['id']} is still running: its lease on conversation "
            f"{run['conversation_id']} holds until {conversation['lease_expires_at']:%H:%M:%S} UTC "
            f"and it beat at {run['heartbeat_at']:%H:%M:%S}. Another process is working on it "
            "(or claimed it first); if it is dead, wait for the lease to expire, or pass "
            "stale_after."
        )
    if taken_over and conversation["lease_holder"] is not None and not expired:
        raise ConversationBusyError(
            f"run {run['id']} cannot be resumed now: run {conversation['lease_run_id']} holds "
            f"conversation {run['conversation_id']}"
        )


def abandon(database: Database, run_id: str, stale_after: float | None) -> bool:
    """Mark run ``run_id`` interrupted, flush its buffer and free its conversation, if it is
    still stale once its rows are locked (False when it was resumed or ended meanwhile)."""
    return database.write(
        f"abandoning run {run_id}", lambda conn: _abandon(conn, run_id, stale_after, database)
    )


def _abandon(conn: Connection, run_id: str, stale_after: float | None, database: Database) -> bool:
    now = database.clock()
    # Lock in the order claims, steps and commits do (the conversation's row, then the run's),
    # then look again: a run resumed or finished meanwhile is not stale.
    conversation_id = conn.execute(
        select(agent_runs.c.conversation_id).where(agent_runs.c.id == run_id)
    ).scalar()
    conn.execute(
        select(conversations.c.id).where(conversations.c.id == conversation_id).with_for_update()
    )
    still_stale = conn.execute(
        select(agent_runs.c.id, agent_runs.c.conversation_id)
        .join(conversations, conversations.c.id == agent_runs.c.conversation_id)
        .where(agent_runs.c.id == run_id, stale_condition(now, stale_after))
        .with_for_update(of=agent_runs)
    ).first()
    if still_stale is None:
        return False
    _keep_what_was_shown(conn, still_stale.conversation_id, run_id, now)
    interrupted = AgentStatus.INTERRUPTED
    totals = recorded_totals(conn, still_stale.conversation_id, run_id, interrupted, ABANDONED, now)
    totals["stop_reason"] = None
    end_run(conn, run_id, totals, only_if_running=True)
    conn.execute(delete(execution_buffer_rows).where(execution_buffer_rows.c.run_id == run_id))
    conn.execute(
        update(conversations)
        .where(
            conversations.c.id == still_stale.conversation_id,
            conversations.c.lease_run_id == run_id,
        )
        .values(lease_holder=None, lease_run_id=None, lease_expires_at=None, updated_at=now)
    )
    return True


def _keep_what_was_shown(
    conn: Connection, conversation_id: str, run_id: str, now: datetime
) -> None:
    """Commit the partial output of the step the run was streaming when its process died, as
    its answer flagged interrupted (as a cancel would have)."""
    run = run_row(conn, run_id)
    answer = interrupted_answer(run["partial_output"] or "")
    if answer is not None:
        append_interrupted_answer(conn, conversation_id, run_id, answer, run)
        count_new_version(conn, conversation_id, now)

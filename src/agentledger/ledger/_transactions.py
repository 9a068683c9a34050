"""The run as a sequence of short transactions: begin, one per step, commit or fail; and the
lease that keeps one running run per conversation.

Every write checks that this process still holds the conversation's lease (a fencing token,
new for every attempt at a run): a process that stalled past its lease and was taken over
cannot write into the run that replaced it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    update,
)

from .._ids import Clock, new_id
from .._text import printable
from ..context import Compaction, CompactionKind
from ..continuation import ExecutionBudget
from ..errors import (
    ConversationBusyError,
    LeaseLostError,
    LedgerCorruptError,
    LedgerUnavailableError,
    NotFoundError,
    UsageError,
)
from ..messages import Message, Messages, MessageStore
from ..recording import filed_messages
from ..state import AgentState, AgentStatus
from ..steps import StepExecution
from ._checksum import sealed, verify
from ._compiled import hot
from ._engine import Connections, EngineSettings, with_retries
from ._rows import (
    budget_json,
    compaction_columns,
    in_sequence,
    message_columns,
    message_of,
    run_columns_at_end,
    step_columns,
    step_execution_of,
    tool_columns,
)
from .tables import (
    agent_runs,
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    step_executions,
    tool_executions,
)

# The statements of every step, built once (building and keying a statement costs more than
# running it through SQLAlchemy's compiled cache).
_FENCE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        conversations.c.lease_holder == bindparam("token"),
    )
    .values(lease_expires_at=bindparam("expires"))
)
_BEAT = (
    update(agent_runs)
    .where(agent_runs.c.id == bindparam("run_id"))
    .values(heartbeat_at=bindparam("beat"), step_count=bindparam("steps"))
)
_HEARTBEAT = (
    update(agent_runs)
    .where(agent_runs.c.id == bindparam("run_id"))
    .values(heartbeat_at=bindparam("beat"))
)
_INSERT_STEP = insert(step_executions)
_INSERT_TOOLS = insert(tool_executions)
_INSERT_BUFFER = insert(execution_buffer_rows)
_INSERT_MESSAGES = insert(conversation_messages)
_FLUSH_BUFFER = delete(execution_buffer_rows).where(
    execution_buffer_rows.c.run_id == bindparam("run_id")
)
_INSERT_RUN = insert(agent_runs)
_INSERT_COMPACTION = insert(context_compactions)
_TAKE_LEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        or_(
            conversations.c.lease_holder.is_(None),
            conversations.c.lease_expires_at <= bindparam("now"),
        ),
    )
    .values(
        lease_holder=bindparam("token"),
        lease_run_id=bindparam("run_id"),
        lease_expires_at=bindparam("expires"),
        updated_at=bindparam("now"),
    )
)
_RELEASED: dict[str, Any] = {
    "lease_holder": None,
    "lease_run_id": None,
    "lease_expires_at": None,
    "updated_at": bindparam("now"),
}
_RELEASE = (
    update(conversations)
    .where(
        conversations.c.id == bindparam("conversation_id"),
        conversations.c.lease_holder == bindparam("token"),
    )
    .values(**_RELEASED)
)
_RELEASE_AND_BUMP = _RELEASE.values(version=conversations.c.version + 1)
_NEXT_SEQ = select(func.max(conversation_messages.c.seq).label("last")).where(
    conversation_messages.c.conversation_id == bindparam("conversation_id")
)
_END_RUN = update(agent_runs).where(agent_runs.c.id == bindparam("run_id"))
"""Sets the columns its row names (the run's end, and its checksum)."""
_END_RUN_IF_RUNNING = _END_RUN.where(agent_runs.c.status == "running")
_RUN_ROW = select(agent_runs).where(agent_runs.c.id == bindparam("run_id"))
_TAKE_OUT_OF_CONTEXT = (
    update(conversation_messages)
    .where(conversation_messages.c.id == bindparam("row_id"))
    .values(
        section=bindparam("new_section"),
        in_context=False,
        summary_id=bindparam("new_summary"),
        checksum=bindparam("new_checksum"),
    )
)

RESUME_PREFIX = "resume:"
"""Lease tokens taken by ``claim_run`` begin with this."""


@dataclass
class _Lease:
    token: str
    conversation_id: str
    next_buffer_seq: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    """Set when the run ends here, or when its lease turned out to be lost: no more beats."""
    due: float = 0.0
    """When the heartbeat renews the lease next (``time.monotonic()``)."""
    run_row: dict[str, Any] | None = None
    """The run's row as this process wrote or read it, so that sealing its end needs no read."""
    next_seq: int | None = None
    last_message_id: str | None = None
    """Where the conversation ends, when this process wrote its last message (the user's, at
    begin): nobody else writes to a conversation while its lease is held, so the commit needs
    not look."""


class RunTransactions:
    """The SQL side of :class:`agentledger.Recorder`."""

    def __init__(
        self, connections: Connections, settings: EngineSettings, clock: Clock, lease_seconds: float
    ) -> None:
        self.connections = connections
        self.engine = connections.engine
        self.settings = settings
        self.clock = clock
        self.lease = timedelta(seconds=lease_seconds)
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self._interval = max(lease_seconds / 3, 0.05)
        self._beating: threading.Thread | None = None
        self._closed = threading.Event()
        self.sql = hot(self.engine.dialect)

    # --- the run's transactions ---------------------------------------------------------------

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        run_id = _run_id(state)
        token = new_id()
        lease = _Lease(token, state.conversation_id)

        def work() -> None:
            now = self.clock()
            with self.connections.write() as conn:
                self._take_lease(
                    conn, state.conversation_id, run_id, token, now, state.parent_run_id
                )
                lease.run_row = _run_row(state, agent_name, now)
                self.sql.execute(conn, _INSERT_RUN, lease.run_row)
                if user_message is not None:
                    seq = _next_seq(conn, state.conversation_id)
                    row = _message_row(user_message, state.conversation_id, seq, "messages", run_id)
                    self.sql.execute(conn, _INSERT_MESSAGES, sealed(conversation_messages, row))
                    lease.next_seq, lease.last_message_id = seq + 1, user_message.id

        try:
            self._write(
                work,
                f"beginning run {run_id}",
                took_effect=lambda: select(conversations.c.id).where(
                    conversations.c.id == state.conversation_id,
                    conversations.c.lease_holder == token,
                ),
            )
        except LedgerUnavailableError as exc:
            # The begin may have taken effect unseen: end that run failed if it did, so that
            # its conversation is free at once rather than when the lease expires.
            self._hold(run_id, lease)
            with contextlib.suppress(Exception):
                self.fail_run(state, f"{type(exc).__name__}: {exc}")
            self._drop(run_id)
            raise
        self._hold(run_id, lease)

    def record_step(self, before: AgentState, after: AgentState) -> None:
        run_id, execution = _run_id(after), after.current_execution
        if execution is None:
            raise UsageError("record_step needs a state whose run has taken a step")
        lease = self._lease_of(run_id)
        filed = filed_messages(before, after)
        buffer = [
            sealed(
                execution_buffer_rows,
                {
                    **message_columns(message),
                    "run_id": run_id,
                    "step_index": execution.step_index,
                    "seq": lease.next_buffer_seq + n,
                    "section": section,
                },
            )
            for n, (section, message) in enumerate(filed)
        ]
        step = sealed(step_executions, step_columns(run_id, execution))
        masking = _masking_row(after, run_id, execution)
        tools = [
            sealed(tool_executions, tool_columns(run_id, step["id"], execution.step_index, n, e))
            for n, e in enumerate(execution.step.tool_executions)
        ]

        def work() -> None:
            now = self.clock()
            with self.connections.write() as conn:
                self._fence(conn, run_id, lease, now)
                sql = self.sql
                sql.execute(conn, _BEAT, {"run_id": run_id, "beat": now, "steps": after.step_count})
                sql.execute(conn, _INSERT_STEP, step)
                sql.execute_many(conn, _INSERT_TOOLS, tools)
                sql.execute_many(conn, _INSERT_BUFFER, buffer)
                if masking is not None:
                    sql.execute(conn, _INSERT_COMPACTION, masking)

        self._write(
            work,
            f"recording step {execution.step_index} of {run_id}",
            took_effect=lambda: select(step_executions.c.id).where(
                step_executions.c.id == step["id"]
            ),
        )
        lease.next_buffer_seq += len(buffer)

    def commit_run(self, state: AgentState) -> None:
        run_id = _run_id(state)
        lease = self._lease_of(run_id)

        def work() -> None:
            now = self.clock()
            with self.connections.write() as conn:
                self._fence(conn, run_id, lease, now)
                if lease.next_seq is not None and lease.last_message_id is not None:
                    new = _after(state, lease.last_message_id)
                    seq = lease.next_seq
                else:
                    new = _unpersisted(conn, state)
                    seq = _next_seq(conn, state.conversation_id)
                rows = [
                    sealed(
                        conversation_messages,
                        _message_row(m, state.conversation_id, seq + n, "messages", run_id),
                    )
                    for n, m in enumerate(new)
                ]
                self.sql.execute_many(conn, _INSERT_MESSAGES, rows)
                self.sql.execute(conn, _FLUSH_BUFFER, {"run_id": run_id})
                values = run_columns_at_end(state, state.status.value, None, now)
                end_run(conn, run_id, values, row=lease.run_row)
                self._release(conn, state.conversation_id, lease, now, bump_version=True)

        # When it raises, the lease stays held: the caller ends the run with fail_run.
        self._write(
            work,
            f"committing run {run_id}",
            took_effect=lambda: (
                select(agent_runs.c.id)
                .join(conversations, conversations.c.id == agent_runs.c.conversation_id)
                .where(
                    agent_runs.c.id == run_id,
                    agent_runs.c.status == state.status.value,
                    or_(
                        conversations.c.lease_holder.is_(None),
                        conversations.c.lease_holder != lease.token,
                    ),
                )
            ),
        )
        self._drop(run_id)

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        """Record ``compaction``; with a ``summary``, in the same transaction: the summary
        appended to the ``summary`` section, and the messages it replaced (``moved``, and the
        summaries before it) taken out of the context and pointed at it, conversation messages
        moved to the ``buffer`` section. Refused, with nothing written, while a run holds the
        conversation or when the messages are no longer in the context."""
        conversation_id = state.conversation_id
        replaced = [
            *(
                m.id
                for m in state.store.select(AgentState.SUMMARY_SECTION, AgentState.BUFFER_SECTION)
            ),
            *(m.id for m in moved),
        ]

        def work() -> None:
            now = self.clock()
            row = compaction_columns(compaction)
            with self.connections.write() as conn:
                if summary is not None:
                    row.update(self._replace(conn, conversation_id, summary, replaced, now))
                self.sql.execute(conn, _INSERT_COMPACTION, sealed(context_compactions, row))

        self._write(
            work,
            f"recording a compaction of conversation {conversation_id}",
            took_effect=lambda: select(context_compactions.c.id).where(
                context_compactions.c.id == compaction.id
            ),
        )

    def _replace(
        self,
        conn: Connection,
        conversation_id: str,
        summary: Message,
        replaced: Sequence[str],
        now: datetime,
    ) -> dict[str, Any]:
        """Write ``summary`` in place of the messages ``replaced``; the compaction's positions."""
        # Taking the conversation's row first serializes this with runs and other compactions.
        claimed = conn.execute(
            update(conversations)
            .where(
                conversations.c.id == conversation_id,
                or_(
                    conversations.c.lease_holder.is_(None),
                    conversations.c.lease_expires_at <= now,
                ),
            )
            .values(version=conversations.c.version + 1, updated_at=now)
        ).rowcount
        if not claimed:
            raise ConversationBusyError(
                f"conversation {conversation_id} is busy: a run is in progress on it. "
                "Compact it once the run has ended."
            )
        columns = conversation_messages.c
        rows = [
            dict(r)
            for r in conn.execute(
                select(conversation_messages)
                .where(columns.conversation_id == conversation_id, columns.id.in_(replaced))
                .order_by(columns.seq)
            ).mappings()
        ]
        if len(rows) != len(set(replaced)) or not all(r["in_context"] for r in rows):
            raise ConversationBusyError(
                f"conversation {conversation_id} changed while its summary was being written "
                "(another process compacted it): nothing was changed; load it and compact again"
            )
        seq = _next_seq(conn, conversation_id)
        for r in rows:
            verify(conversation_messages, r)
            if r["section"] == AgentState.DEFAULT_SECTION:
                r["section"] = AgentState.BUFFER_SECTION
            r.update(in_context=False, summary_id=summary.id)
        self.sql.execute(
            conn,
            _INSERT_MESSAGES,
            sealed(
                conversation_messages,
                _message_row(summary, conversation_id, seq, AgentState.SUMMARY_SECTION, None),
            ),
        )
        conn.execute(
            _TAKE_OUT_OF_CONTEXT,
            [
                {
                    "row_id": r["id"],
                    "new_section": r["section"],
                    "new_summary": summary.id,
                    "new_checksum": sealed(conversation_messages, r)["checksum"],
                }
                for r in rows
            ],
        )
        positions = [r["seq"] for r in rows if r["section"] == AgentState.BUFFER_SECTION]
        return {
            "first_seq": min(positions, default=None),
            "last_seq": max(positions, default=None),
        }

    def _write(
        self, work: Callable[[], None], what: str, *, took_effect: Callable[[], Any]
    ) -> None:
        """Run the transaction ``work``. When the database fails, ask it once whether the
        transaction took effect all the same (its COMMIT went through and only the
        acknowledgement was lost: ``took_effect`` selects a row then). If it did, that is the
        truth and the run goes on; if it did not, or the database cannot say, the error stands.
        """
        try:
            with_retries(self.settings, work, what=what)
        except LedgerUnavailableError:
            try:
                with self.engine.connect() as conn:
                    confirmed = conn.execute(took_effect()).first() is not None
            except Exception:  # still away: the caller gets the original error
                confirmed = False
            if not confirmed:
                raise

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        """End the run ``failed``, keeping what it recorded, and free its conversation.

        The totals are those of the step rows, not of ``state``: a step whose commit went
        through while its acknowledgement was lost is in the ledger, and counts.
        """
        run_id = _run_id(state)
        lease = self._lease_of(run_id)

        def work() -> None:
            now = self.clock()
            with self.connections.write() as conn:
                self._fence(conn, run_id, lease, now)
                values = recorded_totals(
                    conn,
                    state.conversation_id,
                    run_id,
                    AgentStatus.FAILED.value,
                    error or state.error,
                    now,
                )
                end_run(conn, run_id, values, row=lease.run_row)
                self._release(conn, state.conversation_id, lease, now, bump_version=False)

        try:
            with_retries(self.settings, work, what=f"marking run {run_id} failed")
        finally:
            self._drop(run_id)

    # --- taking over a run ----------------------------------------------------------------------

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        token = RESUME_PREFIX + new_id()
        claimed: dict[str, Any] = {}

        def work() -> None:
            now = self.clock()
            with self.connections.write() as conn:
                run = _run_row_of(conn, run_id)
                conversation = (
                    conn.execute(
                        select(conversations).where(conversations.c.id == run["conversation_id"])
                    )
                    .mappings()
                    .one()
                )
                _check_claimable(
                    run, conversation, now, self._quiet_after(conversation, stale_after)
                )
                _cas_lease(conn, conversation, run_id, token, now + self.lease)
                conn.execute(
                    update(agent_runs)
                    .where(agent_runs.c.id == run_id)
                    .values(
                        status="running",
                        heartbeat_at=now,
                        finished_at=None,
                        error=None,
                        checksum=None,  # a running run's totals change: sealed again at its end
                    )
                )
                claimed["state"] = rebuild_state(conn, run)
                claimed["buffer_seq"] = _next_buffer_seq(conn, run_id)
                claimed["row"] = dict(run)

        with_retries(self.settings, work, what=f"claiming run {run_id}")
        state: AgentState = claimed["state"]
        lease = _Lease(token, state.conversation_id, claimed["buffer_seq"], run_row=claimed["row"])
        self._hold(run_id, lease)
        return state

    # --- leases ---------------------------------------------------------------------------------

    def _quiet_after(self, conversation: Any, stale_after: float | None) -> float | None:
        """How long a run must be silent for ``stale_after`` to take its lease.

        A lease taken to resume the run is protected for two heartbeats whatever
        ``stale_after`` says: two processes recovering one run at once, with ``stale_after=0``,
        must not take it from each other in turn.
        """
        if stale_after is None or not str(conversation["lease_holder"] or "").startswith(
            RESUME_PREFIX
        ):
            return stale_after
        return max(stale_after, 2 * self.lease.total_seconds() / 3)

    def _take_lease(
        self,
        conn: Connection,
        conversation_id: str,
        run_id: str,
        token: str,
        now: datetime,
        parent_run_id: str | None = None,
    ) -> None:
        expires = now + self.lease
        taken = self.sql.execute(
            conn,
            _TAKE_LEASE,
            {
                "conversation_id": conversation_id,
                "token": token,
                "run_id": run_id,
                "expires": expires,
                "now": now,
            },
        ).rowcount
        if taken:
            return
        current = conn.execute(
            select(conversations.c.lease_run_id, conversations.c.lease_expires_at).where(
                conversations.c.id == conversation_id
            )
        ).first()
        if current is not None:
            raise ConversationBusyError(
                f"conversation {conversation_id} is busy: run {current.lease_run_id} holds it "
                f"until {current.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC. Wait for that run to "
                "finish; if its process died, recover it once the lease expires "
                "(Agent.recover or `agentledger recover`)."
            )
        conn.execute(
            insert(conversations),
            sealed(
                conversations,
                {
                    "id": conversation_id,
                    "kind": "subagent" if parent_run_id else "main",
                    "parent_run_id": parent_run_id,
                    "version": 0,
                    "lease_holder": token,
                    "lease_run_id": run_id,
                    "lease_expires_at": expires,
                    "created_at": now,
                    "updated_at": now,
                },
            ),
        )

    def _fence(self, conn: Connection, run_id: str, lease: _Lease, now: datetime) -> None:
        """Extend the lease if this process still holds it; fail loudly if it does not."""
        if not self._extend(conn, lease, now):
            raise LeaseLostError(
                f"run {run_id} lost its lease on conversation {lease.conversation_id}: it was not "
                "renewed in time and another process took the conversation over. This process's "
                "remaining work on the run is discarded; the run's recorded steps are kept."
            )

    def _release(
        self,
        conn: Connection,
        conversation_id: str,
        lease: _Lease,
        now: datetime,
        *,
        bump_version: bool,
    ) -> None:
        self.sql.execute(
            conn,
            _RELEASE_AND_BUMP if bump_version else _RELEASE,
            {"conversation_id": conversation_id, "token": lease.token, "now": now},
        )

    def _hold(self, run_id: str, lease: _Lease) -> None:
        lease.due = time.monotonic() + self._interval
        with self._lock:
            self._leases[run_id] = lease
            beating = self._beating is not None and self._beating.is_alive()
            if not beating and not self._closed.is_set():
                # One thread per handle beats for all its runs (started at the first, and again
                # in a forked child, which has no thread of its parent's).
                self._beating = threading.Thread(
                    target=self._heartbeat, name="agentledger-heartbeat", daemon=True
                )
                self._beating.start()

    def _heartbeat(self) -> None:
        """Renew every held lease a third of the way through its life, until the handle closes.
        A missed beat is tried again at the next interval; a lease found lost is let go."""
        wait = self._interval
        while not self._closed.wait(wait):
            now = time.monotonic()
            with self._lock:
                due = [(r, lease) for r, lease in self._leases.items() if lease.due <= now]
                upcoming = [lease.due for lease in self._leases.values() if lease.due > now]
            for run_id, lease in due:
                lease.due = now + self._interval
                with contextlib.suppress(Exception):
                    if not self._beat(run_id, lease):
                        lease.stop.set()
                        self._forget(run_id, lease)
            wait = max(min(upcoming, default=now + self._interval) - time.monotonic(), 0.01)

    def _beat(self, run_id: str, lease: _Lease) -> bool:
        """Extend ``lease`` and note the run's heartbeat; False if the lease is no longer held."""
        if lease.stop.is_set():
            return True
        now = self.clock()
        with self.connections.write() as conn:
            held = self._extend(conn, lease, now)
            if held:
                self.sql.execute(conn, _HEARTBEAT, {"run_id": run_id, "beat": now})
        return held

    def _extend(self, conn: Connection, lease: _Lease, now: datetime) -> bool:
        """Push the lease's expiry on if this process still holds it (False if it does not)."""
        row = {"conversation_id": lease.conversation_id, "token": lease.token}
        return bool(self.sql.execute(conn, _FENCE, {**row, "expires": now + self.lease}).rowcount)

    def _forget(self, run_id: str, lease: _Lease) -> None:
        with self._lock:
            if self._leases.get(run_id) is lease:
                del self._leases[run_id]

    def _lease_of(self, run_id: str) -> _Lease:
        with self._lock:
            lease = self._leases.get(run_id)
        if lease is None:
            raise UsageError(
                f"run {run_id} was not begun or claimed through this ledger handle; begin it with "
                "begin_run (Agent.run) or take it over with claim_run (Agent.resume)"
            )
        return lease

    def _drop(self, run_id: str) -> None:
        with self._lock:
            lease = self._leases.pop(run_id, None)
        if lease is not None:
            lease.stop.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
            beating, self._beating = self._beating, None
        for lease in leases:
            lease.stop.set()
        if beating is not None and beating is not threading.current_thread():
            beating.join(timeout=5)


def _run_id(state: AgentState) -> str:
    if state.run_id is None:
        raise UsageError("the state has no run: begin one first (Agent.run does)")
    return state.run_id


def _run_row(state: AgentState, agent_name: str, now: datetime) -> dict[str, Any]:
    run_id = _run_id(state)
    return {
        "id": run_id,
        "conversation_id": state.conversation_id,
        "parent_run_id": state.parent_run_id,
        "root_run_id": state.root_run_id or run_id,
        "depth": state.depth,
        "agent_name": agent_name,
        "status": AgentStatus.RUNNING.value,
        "started_at": state.run_started_at or now,
        "heartbeat_at": now,
        "budget": budget_json(state.budget),
        "metadata": state.metadata or None,
    }


def _masking_row(state: AgentState, run_id: str, execution: StepExecution) -> dict[str, Any] | None:
    """The ``context_compactions`` row of the masking done before ``execution``, if any."""
    masking = execution.step.context_masking
    if masking is None:
        return None
    compaction = Compaction(
        conversation_id=state.conversation_id,
        kind=CompactionKind.MASKING,
        messages=masking.masked,
        tokens_before=masking.tokens_before,
        tokens_after=masking.tokens_after,
        run_id=run_id,
        step_index=execution.step_index,
        created_at=execution.started_at,
    )
    return sealed(context_compactions, compaction_columns(compaction))


def _message_row(
    message: Message, conversation_id: str, seq: int, section: str, run_id: str | None
) -> dict[str, Any]:
    return {
        **message_columns(message),
        "conversation_id": conversation_id,
        "section": section,
        "seq": seq,
        "run_id": run_id,
    }


def _next_buffer_seq(conn: Connection, run_id: str) -> int:
    """The next position in a run's execution buffer."""
    column = execution_buffer_rows.c
    last = conn.execute(select(func.max(column.seq)).where(column.run_id == run_id)).scalar()
    return 0 if last is None else int(last) + 1


def _next_seq(conn: Connection, conversation_id: str) -> int:
    """The next position in a conversation."""
    (row,) = hot(conn.dialect).select(conn, _NEXT_SEQ, {"conversation_id": conversation_id})
    return 0 if row["last"] is None else int(row["last"]) + 1


def _unpersisted(conn: Connection, state: AgentState) -> Messages:
    """The conversation messages of ``state`` after the last one the ledger holds."""
    last = conn.execute(
        select(conversation_messages.c.id)
        .where(
            conversation_messages.c.conversation_id == state.conversation_id,
            conversation_messages.c.section == "messages",
        )
        .order_by(conversation_messages.c.seq.desc())
        .limit(1)
    ).scalar()
    return state.messages() if last is None else _after(state, last)


def _after(state: AgentState, last: str) -> Messages:
    """The conversation messages of ``state`` after the message ``last``."""
    messages = state.messages()
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == last:
            return messages[index + 1 :]
    raise UsageError(
        f"the state of run {state.run_id} does not contain the conversation's last stored "
        f"message {last}: it was not loaded from this ledger's conversation "
        f"{state.conversation_id}, so the ledger cannot tell which messages are new"
    )


def _run_row_of(conn: Connection, run_id: str) -> dict[str, Any]:
    rows = hot(conn.dialect).select(conn, _RUN_ROW, {"run_id": run_id})
    if not rows:
        raise NotFoundError(f"no run {run_id!r} in this ledger (see `agentledger runs`)")
    return rows[0]


def _check_claimable(run: Any, conversation: Any, now: datetime, stale_after: float | None) -> None:
    if run["status"] == "failed":
        if conversation["lease_holder"] is None or conversation["lease_expires_at"] <= now:
            return
        raise ConversationBusyError(
            f"run {run['id']} failed, but another run ({conversation['lease_run_id']}) is in "
            f"progress on conversation {run['conversation_id']}; resume it once that one ends"
        )
    if run["status"] != "running":
        raise UsageError(
            f"run {run['id']} is {run['status']}: only running runs whose process is gone, and "
            "failed runs, can be resumed"
        )
    expired = conversation["lease_expires_at"] is None or conversation["lease_expires_at"] <= now
    taken_over = conversation["lease_run_id"] != run["id"]
    quiet = stale_after is not None and run["heartbeat_at"] <= now - timedelta(seconds=stale_after)
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


def _cas_lease(
    conn: Connection, conversation: Any, run_id: str, token: str, expires: datetime
) -> None:
    """Take the lease from whoever held it when we looked: exactly one claimer wins."""
    observed = conversation["lease_holder"]
    holder = conversations.c.lease_holder
    same = holder.is_(None) if observed is None else holder == observed
    won = conn.execute(
        update(conversations)
        .where(and_(conversations.c.id == conversation["id"], same))
        .values(lease_holder=token, lease_run_id=run_id, lease_expires_at=expires)
    ).rowcount
    if not won:
        raise ConversationBusyError(
            f"run {run_id} was claimed by another process a moment ago; it is being resumed there"
        )


def rebuild_state(conn: Connection, run: Any) -> AgentState:
    """The state of a run as the ledger holds it: the conversation, the buffer, the steps."""
    run_id = run["id"]
    verify(agent_runs, run)
    messages = (
        conn.execute(
            select(conversation_messages)
            .where(conversation_messages.c.conversation_id == run["conversation_id"])
            .order_by(conversation_messages.c.seq)
        )
        .mappings()
        .all()
    )
    buffer = (
        conn.execute(
            select(execution_buffer_rows)
            .where(execution_buffer_rows.c.run_id == run_id)
            .order_by(execution_buffer_rows.c.seq)
        )
        .mappings()
        .all()
    )
    in_sequence(messages, "seq", 0, f"conversation {run['conversation_id']}")
    in_sequence(buffer, "seq", 0, f"the execution buffer of run {run_id}")
    steps = load_steps(conn, run_id)
    if len(steps) != run["step_count"]:
        raise LedgerCorruptError(
            f"run {run_id} recorded {run['step_count']} steps but the ledger reads {len(steps)}: "
            "the database file is damaged; restore it from a backup, and see "
            "`agentledger db verify`."
        )
    store = store_of([*messages, *buffer])
    state = AgentState(
        conversation_id=run["conversation_id"],
        run_id=run_id,
        parent_run_id=run["parent_run_id"],
        root_run_id=run["root_run_id"],
        depth=run["depth"],
        step_executions=steps,
        status=AgentStatus.RUNNING,
        budget=ExecutionBudget.model_validate(run["budget"] or {}),
        run_started_at=run["started_at"],
    )
    return state.with_message_store(store)


def store_of(rows: Iterable[Any], base: MessageStore | None = None) -> MessageStore:
    """``base`` (or an empty store) with message rows (conversation or buffer rows) appended
    to their sections."""
    sections: dict[str, list[Message]] = {}
    for row in rows:
        if row.get("in_context", True) is False:
            continue  # replaced by a summary: kept in the ledger, out of the model's context
        sections.setdefault(row["section"], []).append(message_of(row))
    store = base if base is not None else MessageStore()
    for name, messages in sections.items():
        store = store.section(name).append_messages(messages)
    return store


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
        row = _run_row_of(conn, run_id)
    if only_if_running and row["status"] != "running":
        return False
    ended = sealed(agent_runs, {**row, **values})
    statement = _END_RUN_IF_RUNNING if only_if_running else _END_RUN
    columns = {**values, "checksum": ended["checksum"], "run_id": run_id}
    return bool(hot(conn.dialect).execute(conn, statement, columns).rowcount)


def recorded_totals(
    conn: Connection,
    conversation_id: str,
    run_id: str,
    status: str,
    error: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The columns that end a run, with totals summed from the step rows it recorded."""
    recorded = AgentState(
        conversation_id=conversation_id, run_id=run_id, step_executions=load_steps(conn, run_id)
    )
    # An exception's message may hold what no backend stores (a NUL): it is diagnostics, escaped.
    return run_columns_at_end(recorded, status, printable(error) if error else error, now)


def load_steps(conn: Connection, run_id: str) -> tuple[StepExecution, ...]:
    """A run's steps, rebuilt from their rows and their tool rows."""
    steps = (
        conn.execute(
            select(step_executions)
            .where(step_executions.c.run_id == run_id)
            .order_by(step_executions.c.step_index)
        )
        .mappings()
        .all()
    )
    tools = conn.execute(
        select(tool_executions)
        .where(tool_executions.c.run_id == run_id)
        .order_by(tool_executions.c.step_index, tool_executions.c.position)
    ).mappings()
    by_step: dict[str, list[Any]] = {}
    for tool in tools:
        by_step.setdefault(tool["step_id"], []).append(tool)
    in_sequence(steps, "step_index", 0, f"the steps of run {run_id}")
    return tuple(step_execution_of(s, by_step.get(s["id"], ())) for s in steps)


def stale_condition(now: datetime, stale_after: float | None) -> Any:
    """SQL: a running run whose process is gone."""
    quiet = (
        agent_runs.c.heartbeat_at <= now - timedelta(seconds=stale_after)
        if stale_after is not None
        else false()
    )
    return and_(
        agent_runs.c.status == "running",
        or_(
            conversations.c.lease_run_id.is_(None),
            conversations.c.lease_run_id != agent_runs.c.id,
            conversations.c.lease_expires_at <= now,
            quiet,
        ),
    )


def stale_query(now: datetime, stale_after: float | None) -> Any:
    return (
        select(agent_runs)
        .join(conversations, conversations.c.id == agent_runs.c.conversation_id)
        .where(stale_condition(now, stale_after))
        .order_by(agent_runs.c.started_at)
    )


def claimed_ids(rows: Sequence[Any]) -> list[str]:
    return [row["id"] for row in rows]

"""``LedgerRecorder``: a run as a sequence of short write transactions (begin, one per step and
one per flush of a streaming step's partial output, commit, fail or interrupt), taking over a
run to resume it, and compactions of a conversation's context.

Every write of a run checks and extends its conversation's lease first (:mod:`._leases`). When
the database fails in the middle of a write, the recorder asks it whether the transaction took
effect all the same (its COMMIT went through and only the acknowledgement was lost): if so,
that is the truth and the run goes on; if not, or if the database cannot say, the error stands.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, or_, select, update

from .._recording import SPAWNED_BY, RunResult, check_shown, interrupted_answer
from .._values import (
    AgentState,
    AgentStatus,
    Compaction,
    FiledMessage,
    Message,
    StepExecution,
    StopReason,
    ToolExecution,
    new_id,
)
from ..errors import ConversationBusyError, LedgerUnavailableError
from ._engine import Database
from ._interrupts import (
    RECORD_PARTIAL_OUTPUT,
    add_late_tool_result,
    append_interrupted_answer,
    interrupted_answer_of,
)
from ._leases import RESUME_PREFIX, Lease, LeaseKeeper
from ._lookup import not_found
from ._reads import ConversationLoader, next_buffer_seq, next_seq, rebuild_state
from ._recovery import check_claimable, stale_query
from ._row_mapping import compaction_columns, run_columns_at_end
from ._run_ending import end_run, recorded_totals, run_row
from ._scope import holds
from ._scope_conditions import within
from ._state_rows import (
    begun_run_row,
    claim_for_compaction,
    masking_row,
    message_row,
    messages_after,
    run_id_of,
    step_rows,
    unpersisted,
)
from ._statements import statements_for
from .checksums import check_row, sealed
from .tables import (
    agent_runs,
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    step_executions,
    tool_executions,
)

# Every step's statements, built once (building and keying one costs more than running it).
_RECORD_PROGRESS = (
    update(agent_runs)
    .where(agent_runs.c.id == bindparam("run_id"))
    .values(
        heartbeat_at=bindparam("beat"),
        step_count=bindparam("steps"),
        partial_output=None,  # the step is recorded: what it streamed is in it
        partial_step_index=None,
    )
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
_TENANT_OF = select(conversations.c.tenant_id)
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


class LedgerRecorder:
    """The ledger's :class:`agentledger._recording.Recorder`: what ``AgentBuilder.with_ledger``
    records runs with (``ledger.recorder``)."""

    def __init__(self, database: Database, lease_seconds: float) -> None:
        self._hold(database, LeaseKeeper(database, lease_seconds), ConversationLoader(database))

    def scoped(self, database: Database) -> LedgerRecorder:
        """The recorder of a scoped handle (``database``): its own reads keep to the scope;
        the leases, their heartbeat and the conversations kept loaded are this one's."""
        return self._sharing(database, self.leases, self.conversations.scoped(database))

    @classmethod
    def _sharing(
        cls, database: Database, leases: LeaseKeeper, conversations: ConversationLoader
    ) -> LedgerRecorder:
        """A recorder on ``database`` with another's ``leases`` (and so its heartbeat): made
        without ``__init__``, which would start leases of its own."""
        recorder = cls.__new__(cls)
        recorder._hold(database, leases, conversations)
        return recorder

    def _hold(
        self, database: Database, leases: LeaseKeeper, conversations: ConversationLoader
    ) -> None:
        """Set every attribute of a recorder: one place for a new one and a scoped one."""
        self.database = database
        self.leases = leases
        self.conversations = conversations
        self.sql = statements_for(database.engine.dialect)

    def close(self) -> None:
        self.leases.close()

    # --- reads the loop needs -------------------------------------------------------------------

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        return self.conversations.load(conversation_id)

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        # Subagent runs are resumed through their parent, whose redone spawn finds them.
        query = stale_query(self.database.clock(), stale_after).where(
            agent_runs.c.parent_run_id.is_(None)
        )
        query = within(query, self.database.scope, agent_runs)
        return self.database.read(
            "looking for stale runs", lambda conn: [r.id for r in conn.execute(query)]
        )

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        query = (
            select(agent_runs.c.id, agent_runs.c.status, agent_runs.c.metadata)
            .where(agent_runs.c.parent_run_id == parent_run_id)
            .order_by(agent_runs.c.started_at)
        )
        what = f"looking for the subagent runs of {parent_run_id}"
        for row in self.database.read(what, lambda conn: conn.execute(query).all()):
            if (row.metadata or {}).get(SPAWNED_BY) == spawned_by:
                return row.id, AgentStatus(row.status)
        return None

    def run_result(self, run_id: str) -> RunResult:
        def read(conn: Connection) -> RunResult:
            row = self._run_in_scope(conn, run_id)
            state = rebuild_state(conn, row)
            result = RunResult.of(state.model_copy(update={"status": AgentStatus(row["status"])}))
            if row["status"] != AgentStatus.INTERRUPTED:
                return result
            answer = interrupted_answer_of(conn, run_id) or None  # what the user was shown
            return result.model_copy(update={"answer": answer, "stop_reason": row["stop_reason"]})

        return self.database.read(f"reading the result of run {run_id}", read)

    # --- a run's transactions -------------------------------------------------------------------

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        run_id = run_id_of(state)
        lease = Lease(new_id(), state.conversation_id)
        scope = self.database.scope

        def work(conn: Connection) -> None:
            now = self.database.clock()
            self.leases.take(conn, lease, run_id, now, state.parent_run_id, scope)
            lease.run_row = begun_run_row(state, agent_name, now, lease)
            self.sql.execute(conn, _INSERT_RUN, lease.run_row)
            if user_message is not None:
                seq = next_seq(conn, state.conversation_id)
                row = message_row(
                    user_message, state.conversation_id, seq, "messages", run_id, lease.tenant_id
                )
                self.sql.execute(conn, _INSERT_MESSAGES, row)
                lease.next_seq, lease.last_message_id = seq + 1, user_message.id

        try:
            self._write(
                work,
                f"beginning run {run_id}",
                took_effect=lambda: select(conversations.c.id).where(
                    conversations.c.id == state.conversation_id,
                    conversations.c.lease_holder == lease.token,
                ),
            )
        except LedgerUnavailableError as exc:
            # The begin may have taken effect unseen: end that run failed if it did, so that
            # its conversation is free at once rather than when the lease expires.
            self.leases.keep(run_id, lease)
            with contextlib.suppress(Exception):
                self.fail_run(state, f"{type(exc).__name__}: {exc}")
            self.leases.drop(run_id)
            raise
        self.leases.keep(run_id, lease)

    def record_step(
        self, run_id: str, execution: StepExecution, filed: Sequence[FiledMessage]
    ) -> None:
        lease = self.leases.held(run_id)
        index = execution.step_index
        step, tools, buffer = step_rows(lease, run_id, execution, filed)
        masking = masking_row(lease, run_id, execution)
        # Bound before the transaction: it holds the write lock only to send them.
        now, sql = self.database.clock(), self.sql
        progress = {"run_id": run_id, "beat": now, "steps": index + 1}
        prepared = [
            sql.prepared(_RECORD_PROGRESS, [progress]),
            sql.prepared(_INSERT_STEP, [step]),
            sql.prepared(_INSERT_TOOLS, tools),
            sql.prepared(_INSERT_BUFFER, buffer),
            sql.prepared(_INSERT_COMPACTION, [masking] if masking is not None else []),
        ]

        def work(conn: Connection) -> None:
            self.leases.check(conn, run_id, lease, now)
            for each in prepared:
                sql.run(conn, each)

        self._write(
            work,
            f"recording step {index} of {run_id}",
            took_effect=lambda: select(step_executions.c.id).where(
                step_executions.c.id == step["id"]
            ),
        )
        lease.next_buffer_seq += len(buffer)

    def record_partial_output(self, run_id: str, step_index: int, text: str) -> None:
        check_shown(text)
        lease = self.leases.held(run_id)

        def work(conn: Connection) -> None:
            now = self.database.clock()
            self.leases.check(conn, run_id, lease, now)
            values = {"run_id": run_id, "text": text, "step": step_index, "beat": now}
            self.sql.execute(conn, RECORD_PARTIAL_OUTPUT, values)

        # Idempotent: a flush whose acknowledgement was lost is simply written again next time.
        self.database.write(f"recording the partial output of step {step_index} of {run_id}", work)

    def record_late_tool_result(self, run_id: str, execution: ToolExecution) -> None:
        self.database.write(
            f"recording a late result of tool call {execution.tool_call.id} of {run_id}",
            lambda conn: add_late_tool_result(conn, run_id, execution),
        )

    def interrupt_run(
        self,
        run_id: str,
        *,
        partial_text: str,
        step: StepExecution | None = None,
        error: str | None = None,
    ) -> RunResult:
        lease = self.leases.held(run_id)
        answer = interrupted_answer(partial_text)
        stop_reason = StopReason.CANCELLED if error is None else StopReason.ERROR
        rows = None if step is None else step_rows(lease, run_id, step, ())

        def work(conn: Connection) -> None:
            now = self.database.clock()
            self.leases.check(conn, run_id, lease, now)
            if rows is not None:  # the step in flight, as far as it came: before the totals
                step_row, tools, _ = rows
                self.sql.execute(conn, _INSERT_STEP, step_row)
                self.sql.execute_many(conn, _INSERT_TOOLS, tools)
            if answer is not None:
                append_interrupted_answer(conn, lease.conversation_id, run_id, answer, lease)
            self.sql.execute(conn, _FLUSH_BUFFER, {"run_id": run_id})
            ended = recorded_totals(
                conn, lease.conversation_id, run_id, AgentStatus.INTERRUPTED, error, now
            )
            ended["stop_reason"] = stop_reason.value
            end_run(conn, run_id, ended, row=lease.run_row)
            self.leases.release(conn, lease, now, bump_version=True)

        try:
            self._write(
                work,
                f"interrupting run {run_id}",
                took_effect=lambda: select(agent_runs.c.id).where(
                    agent_runs.c.id == run_id,
                    agent_runs.c.stop_reason == stop_reason.value,
                ),
            )
        finally:
            self.leases.drop(run_id)
        return self.run_result(run_id)

    def commit_run(self, state: AgentState) -> None:
        run_id = run_id_of(state)
        lease = self.leases.held(run_id)

        def work(conn: Connection) -> None:
            now = self.database.clock()
            self.leases.check(conn, run_id, lease, now)
            if lease.next_seq is not None and lease.last_message_id is not None:
                new, seq = messages_after(state, lease.last_message_id), lease.next_seq
            else:
                new, seq = unpersisted(conn, state), next_seq(conn, state.conversation_id)
            rows = [
                message_row(m, state.conversation_id, seq + n, "messages", run_id, lease.tenant_id)
                for n, m in enumerate(new)
            ]
            self.sql.execute_many(conn, _INSERT_MESSAGES, rows)
            self.sql.execute(conn, _FLUSH_BUFFER, {"run_id": run_id})
            ended = run_columns_at_end(state, state.status, None, now)
            end_run(conn, run_id, ended, row=lease.run_row)
            self.leases.release(conn, lease, now, bump_version=True)

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
        self.leases.drop(run_id)

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        """End the run ``failed``, keeping what it recorded, and free its conversation.

        The totals are those of the step rows, not of ``state``: a step whose commit went
        through while its acknowledgement was lost is in the ledger, and counts.
        """
        run_id = run_id_of(state)
        lease = self.leases.held(run_id)

        def work(conn: Connection) -> None:
            now = self.database.clock()
            self.leases.check(conn, run_id, lease, now)
            failed, why = AgentStatus.FAILED, error or state.error
            values = recorded_totals(conn, state.conversation_id, run_id, failed, why, now)
            end_run(conn, run_id, values, row=lease.run_row)
            self.leases.release(conn, lease, now, bump_version=False)

        try:
            self.database.write(f"marking run {run_id} failed", work)
        finally:
            self.leases.drop(run_id)

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        lease: Lease | None = None

        def work(conn: Connection) -> AgentState:
            nonlocal lease
            now = self.database.clock()
            run = self._run_in_scope(conn, run_id)
            conversation = (
                conn.execute(
                    select(conversations).where(conversations.c.id == run["conversation_id"])
                )
                .mappings()
                .one()
            )
            quiet = self.leases.protected_for(conversation, stale_after)
            check_claimable(run, conversation, now, quiet)
            token = RESUME_PREFIX + new_id()
            self.leases.take_over(conn, conversation, run_id, token, now)
            conn.execute(
                update(agent_runs)
                .where(agent_runs.c.id == run_id)
                .values(
                    status=AgentStatus.RUNNING,
                    heartbeat_at=now,
                    finished_at=None,
                    error=None,
                    checksum=None,  # a running run's totals change: sealed again at its end
                )
            )
            state = rebuild_state(conn, run)
            lease = Lease(token, state.conversation_id, next_buffer_seq(conn, run_id))
            lease.run_row = dict(run)
            lease.tenant_id, lease.owner_id = conversation["tenant_id"], conversation["owner_id"]
            return state

        state = self.database.write(f"claiming run {run_id}", work)
        assert lease is not None
        self.leases.keep(run_id, lease)
        return state

    # --- compactions ----------------------------------------------------------------------------

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
        earlier = state.store.select(AgentState.SUMMARY_SECTION, AgentState.BUFFER_SECTION)
        replaced = [*(m.id for m in earlier), *(m.id for m in moved)]

        def work(conn: Connection) -> None:
            now = self.database.clock()
            tenant = conn.execute(_TENANT_OF.where(conversations.c.id == conversation_id)).scalar()
            row = {**compaction_columns(compaction), "tenant_id": tenant}
            if summary is not None:
                row.update(self._replace(conn, conversation_id, summary, replaced, now, tenant))
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
        tenant_id: str | None,
    ) -> dict[str, Any]:
        """Write ``summary`` in place of the messages ``replaced``; the compaction's positions."""
        claim_for_compaction(conn, conversation_id, now)
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
        seq = next_seq(conn, conversation_id)
        for r in rows:
            check_row(conversation_messages, r)
            if r["section"] == AgentState.DEFAULT_SECTION:
                r["section"] = AgentState.BUFFER_SECTION
            r.update(in_context=False, summary_id=summary.id)
        summary_row = message_row(
            summary, conversation_id, seq, AgentState.SUMMARY_SECTION, None, tenant_id
        )
        self.sql.execute(conn, _INSERT_MESSAGES, summary_row)
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

    def _run_in_scope(self, conn: Connection, run_id: str) -> dict[str, Any]:
        """The row of run ``run_id``; :class:`NotFoundError` when there is none in the scope."""
        row = run_row(conn, run_id)
        if not holds(self.database.scope, row):
            raise not_found("run", run_id)
        return row

    # --- writing --------------------------------------------------------------------------------

    def _write(
        self, work: Callable[[Connection], None], what: str, *, took_effect: Callable[[], Any]
    ) -> None:
        """Run the transaction ``work``. When the database fails, ask it once whether the
        transaction took effect all the same (``took_effect()`` selects a row then). If it did,
        that is the truth and the run goes on; if it did not, or the database cannot say, the
        error stands."""
        try:
            self.database.write(what, work)
        except LedgerUnavailableError:
            try:  # in the handle's scope: what row-level security lets it see
                confirmed = self.database.read_once(
                    lambda conn: conn.execute(took_effect()).first() is not None
                )
            except Exception:  # still away: the caller gets the original error
                confirmed = False
            if not confirmed:
                raise

"""The default recorder: conversations kept in this process, gone when it ends."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from .._values import (
    AgentState,
    AgentStatus,
    Compaction,
    FiledMessage,
    Message,
    StepExecution,
    ToolExecution,
    new_id,
)
from ..errors import ConversationBusyError, NotFoundError
from ._interrupted import check_shown, interrupted_answer, with_late_result
from ._recorder import SPAWNED_BY, RunResult


class InMemoryRecorder:
    """The default recorder: conversations kept in this process, gone when it ends.

    It keeps the same rules as the SQL ledger (one running run per conversation, the
    conversation holding only committed messages), so code written against ``Agent.run``
    behaves the same before a ledger is configured.
    """

    def __init__(self) -> None:
        self._conversations: dict[str, AgentState] = {}
        self._runs: dict[str, AgentState] = {}
        self._busy: dict[str, str] = {}
        self._compactions: dict[str, list[Compaction]] = {}
        self._steps: dict[str, dict[int, StepExecution]] = {}
        self._partial: dict[str, tuple[int, str]] = {}
        self._interrupted: dict[str, tuple[str, str | None]] = {}
        self._lock = threading.Lock()

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        with self._lock:
            if conversation_id is None:
                state = AgentState.empty(conversation_id=new_id())
                self._conversations[state.conversation_id] = state
                return state
            if conversation_id not in self._conversations:
                raise NotFoundError(
                    f"no conversation {conversation_id!r} in this process's in-memory recorder; "
                    "start one with run(text) and pass the conversation_id it returns "
                    "(configure a ledger to keep conversations across processes)"
                )
            return self._conversations[conversation_id]

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        with self._lock:
            holder = self._busy.get(state.conversation_id)
            if holder is not None and holder != state.run_id:
                raise ConversationBusyError(
                    f"conversation {state.conversation_id} is busy: run {holder} is in progress "
                    "on it. Wait for it to finish, or continue it with Agent.resume."
                )
            assert state.run_id is not None
            self._busy[state.conversation_id] = state.run_id
            self._runs[state.run_id] = state
            if user_message is not None:  # what a user said is kept even if the run fails
                stored = self._conversations[state.conversation_id]
                self._conversations[state.conversation_id] = stored.with_messages(
                    stored.messages().append(user_message)
                )

    def record_step(
        self, run_id: str, execution: StepExecution, filed: Sequence[FiledMessage]
    ) -> None:
        """Keep the step, for :meth:`interrupt_run` (:meth:`commit_run` and :meth:`fail_run`
        are given the run's state), and discard the step's partial output."""
        with self._lock:
            self._steps.setdefault(run_id, {})[execution.step_index] = execution
            self._partial.pop(run_id, None)

    def record_partial_output(self, run_id: str, step_index: int, text: str) -> None:
        check_shown(text)
        with self._lock:
            self._check_running(run_id)
            self._partial[run_id] = (step_index, text)

    def partial_output(self, run_id: str) -> tuple[int, str] | None:
        """The step index and text of the partial output of a running run, if it has one."""
        with self._lock:
            return self._partial.get(run_id)

    def interrupt_run(
        self,
        run_id: str,
        *,
        partial_text: str,
        step: StepExecution | None = None,
        error: str | None = None,
    ) -> RunResult:
        answer = interrupted_answer(partial_text)
        with self._lock:
            begun = self._check_running(run_id)
            cid = begun.conversation_id
            stored = self._conversations[cid]
            if answer is not None:
                stored = stored.with_messages(stored.messages().append(answer))
                self._conversations[cid] = stored
            steps = self._steps.pop(run_id, {})
            if step is not None:
                steps[step.step_index] = step
            ended = begun.with_message_store(stored.store).model_copy(
                update={
                    "step_executions": tuple(steps[i] for i in sorted(steps)),
                    "status": AgentStatus.INTERRUPTED,
                }
            )
            self._runs[run_id] = ended
            self._interrupted[run_id] = (partial_text, error)
            self._partial.pop(run_id, None)
            self._release(ended)
        return RunResult.of(ended).interrupted(partial_text, error)

    def record_late_tool_result(self, run_id: str, execution: ToolExecution) -> None:
        with self._lock:
            state = self._runs.get(run_id)
            if state is None or not state.step_executions:
                return
            last = state.step_executions[-1]
            if not last.step.interrupted:
                return
            call_id = execution.tool_call.id
            executions = tuple(
                with_late_result(e, execution) if e.tool_call.id == call_id else e
                for e in last.step.tool_executions
            )
            step = last.step.model_copy(update={"tool_executions": executions})
            steps = (*state.step_executions[:-1], last.model_copy(update={"step": step}))
            self._runs[run_id] = state.model_copy(update={"step_executions": steps})

    def _check_running(self, run_id: str) -> AgentState:
        """The state run ``run_id`` began with, while it holds its conversation."""
        state = self._runs.get(run_id)
        if state is None or self._busy.get(state.conversation_id) != run_id:
            raise NotFoundError(
                f"no running run {run_id!r} in this process's in-memory recorder: it ended, or "
                "was never begun here"
            )
        return state

    def commit_run(self, state: AgentState) -> None:
        with self._lock:
            self._forget_progress(state)
            self._conversations[state.conversation_id] = state
            assert state.run_id is not None
            self._runs[state.run_id] = state
            self._release(state)

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        with self._lock:
            self._forget_progress(state)
            assert state.run_id is not None
            self._runs[state.run_id] = state.model_copy(update={"status": AgentStatus.FAILED})
            self._release(state)

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        with self._lock:
            cid = state.conversation_id
            if summary is not None:
                if cid in self._busy:
                    raise ConversationBusyError(
                        f"conversation {cid} is busy: run {self._busy[cid]} is in progress on "
                        "it. Compact it once the run has ended."
                    )
                stored = self._conversations[cid]
                replaced = {m.id for m in moved}
                if not replaced <= {m.id for m in stored.messages()}:
                    raise ConversationBusyError(
                        f"conversation {cid} changed while its summary was being written: "
                        "nothing was changed; load it and compact again"
                    )
                kept = stored.messages().filter(lambda m: m.id not in replaced)
                store = (
                    stored.store.section(AgentState.SUMMARY_SECTION)
                    .set_messages(summary)
                    .section(AgentState.BUFFER_SECTION)
                    .clear()
                    .section(AgentState.DEFAULT_SECTION)
                    .set_messages(kept)
                )
                self._conversations[cid] = stored.with_message_store(store)
            self._compactions.setdefault(cid, []).append(compaction)

    def compactions(self, conversation_id: str) -> list[Compaction]:
        """The compactions of a conversation in this process, oldest first."""
        with self._lock:
            return list(self._compactions.get(conversation_id, ()))

    def _forget_progress(self, state: AgentState) -> None:
        """A run that ends with its state given needs none of what was kept for an interrupt."""
        self._steps.pop(state.run_id or "", None)
        self._partial.pop(state.run_id or "", None)

    def _release(self, state: AgentState) -> None:
        if self._busy.get(state.conversation_id) == state.run_id:
            del self._busy[state.conversation_id]

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        with self._lock:
            state = self._runs.get(run_id)
            if state is None or state.status is not AgentStatus.FAILED:
                raise NotFoundError(
                    f"no failed run {run_id!r} to continue in this process's in-memory recorder"
                )
            self._busy[state.conversation_id] = run_id
            self._steps[run_id] = {e.step_index: e for e in state.step_executions}
            return state.model_copy(update={"status": AgentStatus.RUNNING})

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        return ()  # a run in this process cannot outlive it

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        with self._lock:
            for run_id, state in self._runs.items():
                if (
                    state.parent_run_id == parent_run_id
                    and state.metadata.get(SPAWNED_BY) == spawned_by
                ):
                    return run_id, state.status
        return None

    def run_result(self, run_id: str) -> RunResult:
        with self._lock:
            state = self._runs.get(run_id)
        if state is None:
            raise NotFoundError(f"no run {run_id!r} in this process's in-memory recorder")
        if run_id in self._interrupted:
            return RunResult.of(state).interrupted(*self._interrupted[run_id])
        return RunResult.of(state)

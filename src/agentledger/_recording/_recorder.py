"""The recorder interface, and ``RunResult``.

``Agent.run`` drives a run through a :class:`Recorder`: ``begin_run`` when the user message
arrives, ``record_step`` after every step (and ``record_partial_output`` while a step streams),
then ``commit_run``, ``fail_run`` or, when the run is cancelled, ``interrupt_run``. The SQL ledger
(:mod:`agentledger.ledger`) implements the same interface; the loop never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from .._values import (
    AgentState,
    AgentStatus,
    Compaction,
    FiledMessage,
    Message,
    Spend,
    StepExecution,
    StopReason,
    ToolExecution,
    Usage,
)

SPAWNED_BY = "spawned_by"
"""The key, in a subagent run's metadata, of the idempotency key of the tool call that spawned
it: a parent that redoes a step finds the child it already started instead of starting another."""


class RunResult(BaseModel):
    """What ``Agent.run`` (and ``resume``) returns: the run's ids, answer, outcome and state."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    conversation_id: str
    run_id: str
    answer: str | None
    status: AgentStatus
    stop_reason: StopReason | None
    usage: Usage
    """The run's own steps."""
    cost_usd: float | None
    error: str | None
    spend: Spend
    """The run's own steps and its subagents' run trees: what counts against its limits."""
    child_run_ids: tuple[str, ...] = ()
    """The subagent runs its tools started, in order."""
    state: AgentState

    @classmethod
    def of(cls, state: AgentState) -> RunResult:
        if state.run_id is None:
            raise ValueError("a RunResult needs a state whose run has begun")
        return cls(
            conversation_id=state.conversation_id,
            run_id=state.run_id,
            answer=state.answer(),
            status=state.status,
            stop_reason=state.stop_reason,
            usage=state.usage,
            cost_usd=state.cost_usd,
            error=state.error,
            spend=state.spend(),
            child_run_ids=tuple(
                t.child_run_id
                for e in state.step_executions
                for t in e.step.tool_executions
                if t.child_run_id is not None
            ),
            state=state,
        )

    def interrupted(self, answer: str | None, error: str | None = None) -> RunResult:
        """This result as that of a run cancelled with ``answer`` shown (status
        ``interrupted``, stop reason ``cancelled``), or ended by ``error`` after it was shown
        (stop reason ``error``)."""
        return self.model_copy(
            update={
                "answer": answer or None,
                "status": AgentStatus.INTERRUPTED,
                "stop_reason": StopReason.CANCELLED if error is None else StopReason.ERROR,
                "error": error,
            }
        )


class Recorder(Protocol):
    """Where runs are recorded. Each method is one transaction of the run's life."""

    def load_conversation(self, conversation_id: str | None) -> AgentState:
        """A state holding the conversation (a new one when ``conversation_id`` is None)."""
        ...

    def begin_run(
        self, state: AgentState, *, user_message: Message | None, agent_name: str
    ) -> None:
        """Take the conversation's lease, store the user message, open the run."""
        ...

    def record_step(
        self, run_id: str, execution: StepExecution, filed: Sequence[FiledMessage]
    ) -> None:
        """Store the step ``execution`` of run ``run_id``, with the messages it filed
        (``AgentState.filed``), all or nothing."""
        ...

    def record_partial_output(self, run_id: str, step_index: int, text: str) -> None:
        """Make durable what the caller has been shown so far of step ``step_index`` of run
        ``run_id`` while it streams: ``text`` is all of it since the step began (each call
        replaces the one before). One small write, fenced by the run's lease; the loop calls
        it at a bounded interval, never per token. Recording the step discards it.
        :class:`UnstorableTextError` when ``text`` cannot be stored, with nothing written."""
        ...

    def interrupt_run(
        self,
        run_id: str,
        *,
        partial_text: str,
        step: StepExecution | None = None,
        error: str | None = None,
    ) -> RunResult:
        """End run ``run_id``, cancelled, in one transaction: status ``interrupted``, stop
        reason ``cancelled``; its user message kept, and ``partial_text`` (exactly what the
        caller was shown of the step in progress) committed to the conversation as an
        assistant message flagged ``interrupted`` (none when nothing was shown). ``step`` is
        that step as far as it came (:func:`interrupted_step`), recorded with its tool
        executions, each call answered, like any step, flagged ``interrupted``. The run's
        totals are those of its recorded steps, that one included. A run that could not go
        on after text was shown (its stream cut, its model failing) is ended the same way
        with its ``error``: stop reason ``error``, the error recorded. The execution buffer is
        cleared and the lease freed. Returns the run's result, whose ``answer`` is
        ``partial_text`` (None when empty). :class:`UnstorableTextError` when the text cannot
        be stored, with nothing written and the run still held."""
        ...

    def record_late_tool_result(self, run_id: str, execution: ToolExecution) -> None:
        """Add ``execution``, a tool call that returned after its run was interrupted (a sync
        tool finishing in its thread), to the execution the interrupt recorded for that call
        (:func:`with_late_result`): its result and end kept, still an error, since nothing
        acted on it. Does nothing when the run recorded no interrupted step calling it."""
        ...

    def commit_run(self, state: AgentState) -> None:
        """Append the run's conversation messages, flush its buffer, close it, free the lease.

        When it raises, nothing of the commit took effect and the run is still held: the caller
        ends it with :meth:`fail_run` (``Agent`` does).
        """
        ...

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        """Mark the run failed, keeping its buffer and steps, and free the lease. Its totals are
        those of the steps recorded. Its partial output is discarded (a resume redoes the
        step): a run that cannot go on after text was shown (a stream cut after its first
        delta) is ended with :meth:`interrupt_run`, which keeps that text."""
        ...

    def claim_run(self, run_id: str, *, stale_after: float | None = None) -> AgentState:
        """Take over a stale or failed run: its state, rebuilt, ready to continue."""
        ...

    def record_compaction(
        self,
        state: AgentState,
        compaction: Compaction,
        *,
        summary: Message | None,
        moved: Iterable[Message],
    ) -> None:
        """Record a compaction of ``state``'s conversation. With a ``summary``, all or nothing:
        the summary joins the ``summary`` section, and ``moved`` (the oldest conversation
        messages) and the summaries before it leave the context, kept and pointing at it.
        Raises :class:`ConversationBusyError` while a run holds the conversation, or when the
        messages are no longer in its context."""
        ...

    def stale_run_ids(self, stale_after: float | None = None) -> Sequence[str]:
        """Top-level runs still ``running`` whose process is gone (lease expired, or heartbeat
        older than ``stale_after`` seconds). A stale subagent run is not listed: resuming its
        root redoes the spawn, which finds it and resumes it with the subagent's own agent."""
        ...

    def find_child_run(self, parent_run_id: str, spawned_by: str) -> tuple[str, AgentStatus] | None:
        """The subagent run that the tool call ``spawned_by`` (its idempotency key) of run
        ``parent_run_id`` started, if there is one, with its status."""
        ...

    def run_result(self, run_id: str) -> RunResult:
        """The result of a run that ended, rebuilt from what was recorded."""
        ...


@runtime_checkable
class HasRecorder(Protocol):
    """Something that hands out a :class:`Recorder`, such as :class:`agentledger.ledger.Ledger`
    (``ledger.recorder``): what ``AgentBuilder.with_ledger`` takes besides a recorder."""

    @property
    def recorder(self) -> Recorder: ...

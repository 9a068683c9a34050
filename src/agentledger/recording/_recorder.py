"""The recorder interface, and ``RunResult``.

``Agent.run`` drives a run through a :class:`Recorder`: ``begin_run`` when the user message
arrives, ``record_step`` after every step, then ``commit_run`` or ``fail_run``. The SQL ledger
(:mod:`agentledger.ledger`) implements the same interface; the loop never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ..values import (
    AgentState,
    AgentStatus,
    Compaction,
    FiledMessage,
    Message,
    Spend,
    StepExecution,
    StopReason,
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

    def commit_run(self, state: AgentState) -> None:
        """Append the run's conversation messages, flush its buffer, close it, free the lease.

        When it raises, nothing of the commit took effect and the run is still held: the caller
        ends it with :meth:`fail_run` (``Agent`` does).
        """
        ...

    def fail_run(self, state: AgentState, error: str | None = None) -> None:
        """Mark the run failed, keeping its buffer and steps, and free the lease. Its totals are
        those of the steps recorded."""
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

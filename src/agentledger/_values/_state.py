"""``AgentState``: the immutable aggregate of one conversation and the run in progress."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._continuation import ContinuationOutcome, ExecutionBudget, StopReason
from ._ids import new_id
from ._message import Message
from ._messages import EMPTY_MESSAGES, MessageLike, Messages, MessageStore
from ._steps import AgentStep, StepExecution
from ._usage import Spend, Usage


class AgentStatus(StrEnum):
    """Where a state's run stands. The values match ``agent_runs.status`` in the ledger."""

    READY = "ready"
    """No run has started on this state yet."""
    RUNNING = "running"
    COMPLETED = "completed"
    """The model answered."""
    STOPPED = "stopped"
    """A limit or a criterion stopped the run."""
    FAILED = "failed"
    """The model call failed; the execution buffer is kept and the run can be continued."""
    INTERRUPTED = "interrupted"
    """The run was cancelled (stop reason ``cancelled``), or its process died and the run was
    abandoned; what the user was shown of its answer is kept, flagged ``interrupted``."""

    @classmethod
    def after(cls, outcome: ContinuationOutcome) -> AgentStatus:
        """The status a continuation outcome leaves a run in."""
        if outcome.should_continue:
            return cls.RUNNING
        if outcome.stop_reason is StopReason.ERROR:
            return cls.FAILED
        if outcome.stop_reason in (None, StopReason.COMPLETED):
            return cls.COMPLETED
        return cls.STOPPED


class FiledMessage(NamedTuple):
    """A message a step filed in a section of the store (``state.file``): what the recorder
    stores with the step, so that a run in progress can be rebuilt exactly."""

    section: str
    message: Message


class _Totals(NamedTuple):
    """A run's spend kept as its steps are added, so that a step's limits cost the same at
    the 200th step as at the tenth: ``own`` (its own steps) and ``inclusive`` (with the
    subtrees of the subagents its tools started), and the same before the last step (which
    :meth:`AgentState.with_step_execution` may replace). Valid for the ``steps`` executions
    ending with ``last``."""

    steps: int
    last: StepExecution | None
    own: Spend
    inclusive: Spend
    own_before: Spend
    inclusive_before: Spend

    @classmethod
    def of(cls, executions: tuple[StepExecution, ...]) -> _Totals:
        totals = _NO_STEPS
        for execution in executions:
            totals = totals.plus(execution)
        return totals

    def plus(self, execution: StepExecution) -> _Totals:
        step = execution.step
        own = Spend(
            usage=step.usage,
            cost_usd=step.cost_usd,
            steps=1,
            fully_priced=step.cost_usd is not None or not step.called_model,
        )
        inclusive = own
        for tool in step.tool_executions:
            if tool.subtree is not None:
                inclusive = inclusive + tool.subtree
        return _Totals(
            self.steps + 1,
            execution,
            self.own + own,
            self.inclusive + inclusive,
            self.own,
            self.inclusive,
        )

    def replacing_last(self, execution: StepExecution) -> _Totals:
        before = _Totals(self.steps - 1, None, self.own_before, self.inclusive_before, _NONE, _NONE)
        return before.plus(execution)

    def holds(self, executions: tuple[StepExecution, ...]) -> bool:
        last = executions[-1] if executions else None
        return self.steps == len(executions) and self.last is last


_TOTALS = "_running_totals"
_NONE = Spend.model_construct()  # not Spend(): that would build its validator at import
_NO_STEPS = _Totals(0, None, _NONE, _NONE, _NONE, _NONE)


class AgentState(BaseModel):
    """A conversation, the run in progress on it, and that run's steps. Immutable.

    The store's sections: ``messages`` (the conversation: user messages and final answers),
    ``execution_buffer`` (the tool trace of the run in progress), ``summary`` and ``buffer``
    (context compaction). ``step_executions``, ``usage`` and ``continuation_outcome`` are those
    of the current (or last) run; ``filed`` is what that run's steps filed, in order
    (:meth:`file`).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    DEFAULT_SECTION: ClassVar[str] = "messages"
    EXECUTION_BUFFER_SECTION: ClassVar[str] = "execution_buffer"
    SUMMARY_SECTION: ClassVar[str] = "summary"
    BUFFER_SECTION: ClassVar[str] = "buffer"
    INFERENCE_SECTIONS: ClassVar[tuple[str, ...]] = (
        SUMMARY_SECTION,
        BUFFER_SECTION,
        DEFAULT_SECTION,
        EXECUTION_BUFFER_SECTION,
    )

    conversation_id: str = Field(default_factory=new_id)
    run_id: str | None = None
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    store: MessageStore = MessageStore.model_construct(sections={})
    step_executions: tuple[StepExecution, ...] = ()
    status: AgentStatus = AgentStatus.READY
    budget: ExecutionBudget = ExecutionBudget.model_construct()
    run_started_at: datetime | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    filed: tuple[FiledMessage, ...] = ()

    @classmethod
    def empty(cls, *, conversation_id: str | None = None) -> AgentState:
        """A state with an empty conversation (and a new conversation id unless one is given)."""
        return cls() if conversation_id is None else cls(conversation_id=conversation_id)

    # --- messages ---------------------------------------------------------------------------

    def messages(self) -> Messages:
        """The conversation: the ``messages`` section."""
        return self.store.section(self.DEFAULT_SECTION).messages()

    def execution_buffer(self) -> Messages:
        return self.store.section(self.EXECUTION_BUFFER_SECTION).messages()

    def messages_for_inference(self) -> Messages:
        """What the model sees: summary, buffer, messages, execution buffer, in that order."""
        return self.store.select(*self.INFERENCE_SECTIONS)

    def with_messages(self, messages: MessageLike) -> AgentState:
        """This state with its conversation replaced by ``messages``."""
        return self.with_message_store(
            self.store.section(self.DEFAULT_SECTION).set_messages(messages)
        )

    def with_user_message(self, content: str) -> AgentState:
        """This state with a user message appended to the conversation."""
        return self.with_message_store(
            self.store.section(self.DEFAULT_SECTION).append_message(Message.user(content))
        )

    def with_message_store(self, store: MessageStore) -> AgentState:
        return self.model_copy(update={"store": store})

    def filed_since(self, before: AgentState) -> tuple[FiledMessage, ...]:
        """What was filed after ``before`` (an earlier state of the same run): for the state
        after a step and the state before it, what that step filed."""
        return self.filed[len(before.filed) :]

    def file(self, section: str, messages: MessageLike) -> AgentState:
        """This state with ``messages`` appended to ``section`` and noted at the end of
        :attr:`filed`, as filed by the step in progress: a recorder stores a step's filings
        with the step (the ledger as buffer rows, so that the run can be rebuilt exactly if its
        process dies). Processors file the messages a step adds to the ``messages`` and
        ``execution_buffer`` sections this way; a new run starts with nothing filed."""
        added = (
            messages if isinstance(messages, Messages) else EMPTY_MESSAGES.append_messages(messages)
        )
        if added.is_empty():
            return self
        store = self.store.section(section).append_messages(added)
        filed = (*self.filed, *(FiledMessage(section, m) for m in added))
        return self.model_copy(update={"store": store, "filed": filed})

    # --- the current run ----------------------------------------------------------------------

    @property
    def current_step(self) -> AgentStep | None:
        """The last step of the current run, or ``None`` before its first step."""
        return self.step_executions[-1].step if self.step_executions else None

    @property
    def current_execution(self) -> StepExecution | None:
        return self.step_executions[-1] if self.step_executions else None

    @property
    def continuation_outcome(self) -> ContinuationOutcome | None:
        """The decision taken after the last step of the current run."""
        return self.step_executions[-1].outcome if self.step_executions else None

    @property
    def step_count(self) -> int:
        return len(self.step_executions)

    @property
    def usage(self) -> Usage:
        """Tokens spent by the current run's own steps."""
        return self._running().own.usage

    @property
    def cost_usd(self) -> float | None:
        """What the current run's steps cost, or ``None`` if no step's cost is known."""
        return self._running().own.cost_usd

    @property
    def fully_priced(self) -> bool:
        """True when every step that called the model has a known cost."""
        return self._running().own.fully_priced

    def spend(self, *, inclusive: bool = True) -> Spend:
        """What the current run spent: its own steps, plus (``inclusive``) the run trees of
        the subagents its tools started. Limits are measured against the inclusive spend.
        Kept as the steps are added: asking costs the same at any step of a long run."""
        totals = self._running()
        return totals.inclusive if inclusive else totals.own

    def _running(self) -> _Totals:
        """The running totals, summed afresh only when this state was not made from the
        previous one by :meth:`with_step_execution` (a state built or copied otherwise). They
        are kept in the instance's ``__dict__`` beside the fields, as a cached property is:
        not a field, so not serialized, and not compared by ``==``."""
        totals = self.__dict__.get(_TOTALS)
        if not isinstance(totals, _Totals) or not totals.holds(self.step_executions):
            totals = _Totals.of(self.step_executions)
            self.__dict__[_TOTALS] = totals
        return totals

    @property
    def stop_reason(self) -> StopReason | None:
        outcome = self.continuation_outcome
        return None if outcome is None or outcome.should_continue else outcome.stop_reason

    @property
    def error(self) -> str | None:
        """The error of the last step, if the run failed on it."""
        step = self.current_step
        return step.error if step is not None else None

    def final_response(self) -> Message | None:
        """The answer the current run gave, if it gave one."""
        for execution in reversed(self.step_executions):
            answer = execution.step.final_response()
            if answer is not None:
                return answer
        return None

    def answer(self) -> str | None:
        """The text of :meth:`final_response`."""
        response = self.final_response()
        return response.content if response is not None else None

    def with_step_execution(self, execution: StepExecution) -> AgentState:
        """This state with ``execution`` recorded as the latest step of its run."""
        executions, totals = self.step_executions, self._running()
        if executions and executions[-1].step_index == execution.step_index:
            executions, totals = executions[:-1], totals.replacing_last(execution)
        else:
            totals = totals.plus(execution)
        state = self.model_copy(update={"step_executions": (*executions, execution)})
        state.__dict__[_TOTALS] = totals
        return state

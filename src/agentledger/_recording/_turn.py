"""Recording a turn that code of its own ran: ``Ledger.turn`` (and ``aturn``).

An application with its own loop around a model SDK records each user-level turn as a run:
the user message, each model call as a step (its tool calls and their results as tool
executions), the text already streamed to the user, and the answer. It writes through the same
:class:`Recorder` the agent loop writes through, in the same transactions (the run begun with
its user message; each step all or nothing, once its every tool call has a result; the end), so
every rule of the ledger holds whoever wrote the run: one writer per conversation, checksums,
tenants, and what the user said and was shown is kept however the turn ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Protocol

from pydantic import JsonValue

from .._values import (
    AgentState,
    AgentStatus,
    AgentStep,
    Clock,
    ContinuationOutcome,
    Message,
    Role,
    StepExecution,
    StepType,
    StopReason,
    ToolCall,
    ToolExecution,
    Usage,
    check_storable,
    new_id,
)
from ..errors import UsageError
from ._interrupted import check_shown, interrupted_step
from ._recorder import SPAWNED_BY, Recorder, RunResult

RECORDED_BY = "recorded_by"
"""The run metadata key naming what recorded a run through this API (``"turn"`` unless an
integration names itself): the loop's own runs have none."""

DECIDED_BY = "caller"
"""The ``decided_by`` of the steps a turn records: the caller's code decided, not our loop."""

FLUSH_SECONDS = 0.5
"""How often text passed to :meth:`Turn.shown` is made durable while the turn goes on (it is
always kept when the turn is cut): the agent loop's default."""

_CANCELS = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)


class Pricing(Protocol):
    """What prices a step: ``PriceTable`` is one."""

    def cost(self, model: str | None, usage: Usage) -> float | None: ...


def _cancelled(exc: BaseException) -> bool:
    """True for what cancels rather than fails: a cancelled task, Ctrl-C, a closed generator."""
    return isinstance(exc, _CANCELS)


class TurnStep:
    """A step of a :class:`Turn` that called tools: recorded, all or nothing, when each of
    its tool calls has a result (:meth:`tool_result`)."""

    def __init__(self, turn: Turn, step: AgentStep, index: int) -> None:
        self._turn = turn
        self.step = step
        self.index = index
        self._results: dict[str, ToolExecution] = {}

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        message = self.step.assistant_message
        return tuple(message.tool_calls) if message is not None else ()

    @property
    def recorded(self) -> bool:
        return self._turn._recorded_steps > self.index

    @property
    def waiting_for(self) -> tuple[str, ...]:
        """The ids of its tool calls that have no result yet."""
        return tuple(c.id for c in self.calls if c.id not in self._results)

    def tool_result(
        self,
        call_id: str,
        result: str,
        *,
        is_error: bool = False,
        error: str | None = None,
        duration_ms: float | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """What tool call ``call_id`` returned: ``result`` is exactly what the model is shown
        next (``is_error`` and ``error`` when the tool failed). The step is recorded with the
        last of its calls' results. A call that ran a child turn (``turn.child(...,
        call_id=...)``) is linked to that child's run and counts its spend."""
        call = next((c for c in self.calls if c.id == call_id), None)
        if call is None:
            known = ", ".join(c.id for c in self.calls) or "none"
            raise UsageError(
                f"step {self.index} of run {self._turn.run_id} has no tool call {call_id!r} "
                f"(its calls: {known}); pass the id of one of the step's tool calls"
            )
        if call_id in self._results:
            raise UsageError(
                f"tool call {call_id!r} of step {self.index} already has a result; each call "
                "gets one"
            )
        check_storable(result, f"the result of tool call {call_id!r}")
        execution = self._turn._execution(
            call, result, is_error, error, duration_ms, metadata, asked_at=self.step.finished_at
        )
        self._results[call_id] = execution
        if not self.waiting_for:
            self._turn._record(self)

    def executions(self) -> tuple[ToolExecution, ...]:
        """Its tool executions so far, in the order of its calls."""
        return tuple(self._results[c.id] for c in self.calls if c.id in self._results)


class Turn:
    """One user-level turn, recorded as a run as it happens. Made by ``Ledger.turn(...)``;
    use it as a context manager:

    leaving the block after :meth:`answer` (or :meth:`fail`) is the normal end; an exception
    fails the run (its user message and recorded steps kept, the error recorded, the exception
    raised on); a cancellation (``asyncio.CancelledError``, ``KeyboardInterrupt``,
    ``GeneratorExit``) ends it ``interrupted`` with exactly the text given to :meth:`shown`;
    leaving without an answer is a :class:`UsageError` that names the run (recorded failed).
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        user: str,
        conversation_id: str | None,
        agent_name: str,
        model: str | None,
        prices: Pricing | None,
        clock: Clock,
        metadata: Mapping[str, JsonValue] | None = None,
        parent: Turn | None = None,
        call_id: str | None = None,
        user_metadata: Mapping[str, JsonValue] | None = None,
    ) -> None:
        check_storable(user, "the user message")
        if conversation_id is not None and not conversation_id.strip():
            raise UsageError("a conversation id cannot be empty: pass None for a new one")
        self._recorder, self._prices, self._clock = recorder, prices, clock
        self.agent_name, self.model, self.parent, self.call_id = agent_name, model, parent, call_id
        self.user_message = Message(
            role=Role.USER, content=user, metadata=dict(user_metadata or {}), created_at=clock()
        )
        own: dict[str, JsonValue] = {RECORDED_BY: "turn", **(metadata or {})}
        if call_id is not None:
            own[SPAWNED_BY] = call_id
        self._state: AgentState = AgentState(
            conversation_id=conversation_id or new_id(),
            run_id=new_id(),
            parent_run_id=parent.run_id if parent is not None else None,
            root_run_id=(parent.root_run_id if parent is not None else None),
            depth=parent.state.depth + 1 if parent is not None else 0,
            status=AgentStatus.RUNNING,
            run_started_at=self.user_message.created_at,
            metadata=own,
        ).with_messages([self.user_message])
        self._pending: TurnStep | None = None
        self._recorded_steps = 0
        self._last_end = self.user_message.created_at
        self._shown = ""
        self._flushed_at = 0.0
        self._children: list[Turn] = []
        self._begun = False
        self.result: RunResult | None = None
        """The run's result once the turn has ended."""

    # --- what it is -------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        run_id = self._state.run_id
        assert run_id is not None
        return run_id

    @property
    def conversation_id(self) -> str:
        return self._state.conversation_id

    @property
    def root_run_id(self) -> str:
        return self._state.root_run_id or self.run_id

    @property
    def status(self) -> AgentStatus:
        """``running`` until the turn ends, then how it ended."""
        return self.result.status if self.result is not None else self._state.status

    @property
    def state(self) -> AgentState:
        """The run as recorded so far: its conversation messages and its steps."""
        return self._state

    # --- the block ----------------------------------------------------------------------------

    def __enter__(self) -> Turn:
        self.begin()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.result is not None or not self._begun:
            return
        if exc is None:
            error = (
                f"the turn of run {self.run_id} (conversation {self.conversation_id}) ended "
                "without an answer: call turn.answer(text) or turn.fail(error) before the block "
                "ends. The run was recorded failed; its user message and steps are kept"
            )
            self._end_failed(error)
            raise UsageError(error)
        if _cancelled(exc):
            self._interrupt(None)
        else:
            self._end_failed(f"{type(exc).__name__}: {exc}")

    def begin(self) -> None:
        """Begin the run: take the conversation (:class:`ConversationBusyError` while another
        run holds it) and store the user message. The ``with`` block does it."""
        if self._begun:
            raise UsageError(f"the turn of run {self.run_id} has already begun")
        if self.parent is not None:
            self.parent._open("start a child turn")
        self._recorder.begin_run(
            self._state, user_message=self.user_message, agent_name=self.agent_name
        )
        self._begun = True
        if self.parent is not None:
            self.parent._children.append(self)

    # --- what happened ------------------------------------------------------------------------

    def step(
        self,
        content: str | None = None,
        *,
        tool_calls: Sequence[ToolCall] = (),
        usage: Usage | None = None,
        model: str | None = None,
        cost_usd: float | None = None,
        reasoning: str | None = None,
        finish_reason: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        started_at: datetime | None = None,
    ) -> TurnStep:
        """A model call the turn made: its text (``content``), its ``tool_calls``, what it
        spent (``usage``, priced from the table for ``model``, or the turn's model, unless
        ``cost_usd`` is given) and why it stopped. A step with tool calls is recorded when
        each call has a result (:meth:`TurnStep.tool_result`); one without, at once. Its
        start is the end of the one before (or the turn's start) unless ``started_at``."""
        self._ready_for_a_step("record a step")
        message = Message(
            role=Role.ASSISTANT,
            content=content or "",
            tool_calls=list(tool_calls),
            reasoning=reasoning,
            metadata=dict(metadata or {}),
        )
        step = self._model_step(
            StepType.TOOL_USE if tool_calls else StepType.RESPONSE,
            message,
            usage,
            model,
            cost_usd,
            finish_reason,
            started_at,
        )
        handle = TurnStep(self, step, self._recorded_steps)
        self._pending = handle
        if not tool_calls:
            self._record(handle)
        return handle

    def shown(self, text: str) -> None:
        """``text`` was just shown to the user (a streamed delta of the answer in progress):
        kept, exactly, if the turn is cut before :meth:`answer`, and made durable at a bounded
        interval meanwhile. Recording a step starts it afresh."""
        if self._note_shown(text):
            self.flush_shown()

    def _note_shown(self, text: str) -> bool:
        """Add ``text`` to what was shown; True when it is time to make it durable."""
        self._open("note shown text")
        check_shown(text)
        self._shown += text
        return time.monotonic() - self._flushed_at >= FLUSH_SECONDS

    def flush_shown(self) -> None:
        """Make what was shown so far durable now."""
        self._flushed_at = time.monotonic()
        self._recorder.record_partial_output(self.run_id, self._recorded_steps, self._shown)

    def answer(
        self,
        text: str,
        *,
        usage: Usage | None = None,
        model: str | None = None,
        cost_usd: float | None = None,
        reasoning: str | None = None,
        finish_reason: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> RunResult:
        """The answer the user gets, from a last model call (with its ``usage`` and
        ``model``): recorded as the turn's last step and committed to the conversation with
        the run, at once. Returns the run's result."""
        self._ready_for_a_step("answer")
        if not text:
            raise UsageError(
                f"the answer of run {self.run_id} is empty: pass the text the user gets, or "
                "end the turn with turn.fail(error)"
            )
        check_storable(text, "the answer")
        message = Message(
            role=Role.ASSISTANT,
            content=text,
            reasoning=reasoning,
            metadata=dict(metadata or {}),
        )
        step = self._model_step(
            StepType.RESPONSE, message, usage, model, cost_usd, finish_reason, None
        )
        self._state = self._state.with_messages(
            self._state.messages().append_messages(step.response_messages)
        )
        self._pending = TurnStep(self, step, self._recorded_steps)
        self._record(self._pending, last=True)  # what was shown is now the answer
        completed = self._state.model_copy(update={"status": AgentStatus.COMPLETED})
        self._recorder.commit_run(completed)
        self.result = RunResult.of(completed)
        return self.result

    def fail(self, error: str) -> RunResult:
        """End the turn failed with ``error`` (what went wrong, in words): its user message
        and recorded steps kept. Text already :meth:`shown` is kept too, as an answer
        cut short (status ``interrupted``, stop reason ``error``), as the agent loop keeps
        it."""
        self._open("fail")
        if self._shown:
            return self._interrupt(error)
        return self._end_failed(error)

    def interrupt(self, reason: str | None = None) -> RunResult:
        """End the turn ``interrupted`` now, as a cancellation ends it (the text
        :meth:`shown` kept, a step waiting for tool results recorded with those calls answered
        as interrupted): for code whose turn stops to wait for something outside it (a human's
        approval) and resumes, if ever, as a turn of its own. ``reason`` is recorded as the
        run's error when given."""
        self._open("interrupt")
        return self._interrupt(reason)

    def child(
        self,
        user: str,
        *,
        agent_name: str,
        model: str | None = None,
        call_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Turn:
        """A subagent's turn under this one: a run one level deeper in this run's tree, in a
        conversation of its own, with the task ``user``. ``call_id`` is the tool call of this
        turn's step in progress that runs it: that call's result is then linked to the
        child's run and counts what its tree spent. Use it as a context manager too."""
        self._open("start a child turn")
        return Turn(
            self._recorder,
            user=user,
            conversation_id=None,
            agent_name=agent_name,
            model=model,
            prices=self._prices,
            clock=self._clock,
            metadata=metadata,
            parent=self,
            call_id=call_id,
        )

    # --- inside -------------------------------------------------------------------------------

    def _open(self, doing: str) -> None:
        if not self._begun:
            raise UsageError(
                f"cannot {doing}: the turn of run {self.run_id} has not begun (use it in a "
                "with block, or call begin())"
            )
        if self.result is not None:
            raise UsageError(
                f"cannot {doing}: the turn of run {self.run_id} has ended "
                f"({self.result.status.value})"
            )

    def _ready_for_a_step(self, doing: str) -> None:
        self._open(doing)
        pending = self._pending
        if pending is not None and not pending.recorded:
            waiting = ", ".join(pending.waiting_for)
            raise UsageError(
                f"cannot {doing}: step {pending.index} of run {self.run_id} is waiting for the "
                f"results of its tool calls {waiting}; give each with step.tool_result(...)"
            )
        running = [c.run_id for c in self._children if c.result is None]
        if running:
            raise UsageError(
                f"cannot {doing}: the child turns {', '.join(running)} of run {self.run_id} "
                "have not ended; end each (answer or fail) first"
            )

    def _model_step(
        self,
        kind: StepType,
        message: Message,
        usage: Usage | None,
        model: str | None,
        cost_usd: float | None,
        finish_reason: str | None,
        started_at: datetime | None,
    ) -> AgentStep:
        now = self._clock()
        model = model or self.model
        spent = usage if usage is not None else Usage()
        if cost_usd is None and self._prices is not None and usage is not None:
            cost_usd = self._prices.cost(model, spent)
        return AgentStep(
            step_type=kind,
            assistant_message=message.model_copy(update={"created_at": now}),
            usage=spent,
            cost_usd=cost_usd,
            model=model,
            finish_reason=finish_reason,
            started_at=started_at or self._last_end,
            finished_at=now,
        )

    def _execution(
        self,
        call: ToolCall,
        result: str,
        is_error: bool,
        error: str | None,
        duration_ms: float | None,
        metadata: Mapping[str, JsonValue] | None,
        *,
        asked_at: datetime,
    ) -> ToolExecution:
        """A tool execution ending now: begun ``duration_ms`` ago, or, not given, when its
        step's model call asked for it (``asked_at``), the time a caller that times nothing
        (LangGraph's tools run between two checkpoints) knows it ran."""
        now = self._clock()
        if duration_ms is not None:
            started = now - timedelta(milliseconds=duration_ms)
        else:
            started = min(asked_at, now)
        child = next((c for c in self._children if c.call_id == call.id and c.result), None)
        return ToolExecution(
            tool_call=call,
            arguments=dict(call.arguments) if call.raw_arguments is None else None,
            result=result,
            is_error=is_error or error is not None,
            error=error,
            started_at=started,
            finished_at=now,
            child_run_id=child.run_id if child is not None else None,
            subtree=child.result.spend if child is not None and child.result else None,
            metadata=dict(metadata or {}),
        )

    def _record(self, handle: TurnStep, *, last: bool = False) -> None:
        """Record the step ``handle`` with its tool executions, all or nothing."""
        outcome = ContinuationOutcome(
            should_continue=not last,
            stop_reason=StopReason.COMPLETED if last else None,
            decided_by=DECIDED_BY,
        )
        step = handle.step.model_copy(update={"tool_executions": handle.executions()})
        execution = StepExecution(step_index=handle.index, step=step, outcome=outcome)
        self._recorder.record_step(self.run_id, execution, ())
        self._state = self._state.with_step_execution(execution)
        self._recorded_steps = handle.index + 1
        # The next model call begins once this one's tools have returned.
        self._last_end = max([step.finished_at, *(e.finished_at for e in step.tool_executions)])
        self._shown = ""

    def _end_failed(self, error: str) -> RunResult:
        self._recorder.fail_run(self._state, error)
        failed = self._state.model_copy(update={"status": AgentStatus.FAILED})
        self.result = RunResult.of(failed).model_copy(update={"error": error})
        return self.result

    def _interrupt(self, error: str | None) -> RunResult:
        """End the run ``interrupted``: what was shown committed as the answer cut short, and
        the step in progress (its calls without results answered as interrupted) recorded."""
        pending = self._pending
        open_step = pending if pending is not None and not pending.recorded else None
        now = self._clock()
        step = interrupted_step(
            self._recorded_steps,
            answered=open_step.step if open_step is not None else None,
            shown=self._shown,
            began=self._last_end,
            # Whether a call without a result had started is not known: say it may have.
            started={c.id: now for c in open_step.calls} if open_step is not None else {},
            returned={e.tool_call.id: e for e in open_step.executions()} if open_step else {},
            at=now,
            error=error,
        )
        self.result = self._recorder.interrupt_run(
            self.run_id, partial_text=self._shown, step=step, error=error
        )
        return self.result

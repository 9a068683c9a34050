"""What the loop asks of a driver for one step, and the ``Driver`` protocol drivers implement
(:mod:`agentledger._drivers`: native tool calling, ReAct).

This module is all of the loop a driver sees: the request hands it everything the step needs
(the tools and their executor, the clock and when the step began, the tracer, where its events
go and how its thread awaits), so a driver written outside the package needs only the public
names (``StepRequest``, ``AgentState``, ``AgentStep``...), and nothing travels to it unseen.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import KW_ONLY, dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from .._core import ToolSet
from .._values import (
    AgentState,
    AgentStep,
    Clock,
    Event,
    InferenceDelta,
    ReasoningDelta,
    TextDelta,
    ToolExecution,
)
from ._executor import ToolExecutor
from ._runtime import EventSink, RunAwaiter
from ._tracing import Tracer

T = TypeVar("T")


class Awaiter(Protocol):
    """Waits for an awaitable from a step's thread, and gives its result."""

    def __call__(self, awaitable: Awaitable[T], /) -> T: ...


@dataclass(frozen=True)
class StepRequest:
    """What the loop asks of a driver for one step, and what the driver takes it with.

    A driver reads the step's tools and prompt here, times the step from ``started_at`` with
    ``clock``, tells the caller what its model says as it comes (:meth:`tell`, or any event
    with :meth:`emit`), awaits what must be awaited with ``wait_for`` (an async model's call:
    ``asynchronous`` says whether the run has an event loop it should rather run on), and runs
    the tools its model called with :meth:`run_tools`."""

    step_index: int
    tools: ToolSet
    executor: ToolExecutor
    clock: Clock
    system_prompt: str | None = None
    final_instruction: str | None = None
    """Set for a final-response step: no tools are offered and this closes the messages."""
    tracer: Tracer | None = None
    """Traces the step's model call (the agent's tracer); None traces nothing."""
    _: KW_ONLY
    run_id: str
    """The run the step belongs to."""
    started_at: datetime
    """When the step began (read from ``clock`` as the loop asked for it)."""
    events: EventSink | None = None
    """Where the step's events go: the caller streaming the run (``Agent.stream``), or None
    when nobody listens (then a driver need not ask its model to stream). A sink that raises
    stops the run: that is how a consumer that stopped reading cancels it."""
    wait_for: Awaiter = RunAwaiter()
    """The result of an awaitable, from the step's thread: awaited on the run's event loop
    when the run is asynchronous (cancelling the run cancels it), else on a private one."""
    asynchronous: bool = False
    """Whether the run is on an event loop (``Agent.arun``, ``Agent.astream``): a model's
    asynchronous form is then awaited there with ``wait_for``, in no thread of its own."""

    @property
    def is_final_response(self) -> bool:
        return self.final_instruction is not None

    @property
    def listening(self) -> bool:
        """Whether someone streams the run's events (so the model may stream its text)."""
        return self.events is not None

    def emit(self, event: Event) -> None:
        """Tell ``event`` to whoever streams the run, if anyone does."""
        if self.events is not None:
            self.events(event)

    def tell(self, delta: InferenceDelta) -> None:
        """Tell the caller a piece of the model's answer as it comes: its text as a
        ``TextDelta`` (what a cancelled run keeps, once shown) and its reasoning as a
        ``ReasoningDelta`` (:mod:`agentledger.events`)."""
        if delta.text:
            self.emit(TextDelta(run_id=self.run_id, step_index=self.step_index, text=delta.text))
        if delta.reasoning:
            self.emit(
                ReasoningDelta(run_id=self.run_id, step_index=self.step_index, text=delta.reasoning)
            )

    def run_tools(self, state: AgentState, answered: AgentStep) -> tuple[ToolExecution, ...]:
        """Run the tool calls of ``answered``, the step as its model answered it (before its
        tools ran), with the request's executor: each told as it starts and ends, traced, held
        to the run's budget (counting what the model call spent), and their results in call
        order. A run interrupted while they run records ``answered`` as far as it came."""
        return self.executor.execute_step(answered, state, self.step_index)


class Driver(Protocol):
    """Performs one step of a run: asks the model, runs the tools it called, and returns the
    step (a failed model call is a step of type ``error``, never an exception)."""

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep: ...

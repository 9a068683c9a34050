"""State processors: middleware around each step.

A processor has ``can_process(state)`` and ``process(state, next)``. The agent calls them in a
chain around the step itself: each gets the state before the step and ``next``, which runs the
rest of the chain and the step and returns the state after it. Work done before calling
``next`` happens before the model is asked (context shaping); work done after it sees the new
step (``state.current_step``) and its ``continuation_outcome``.

``can_process`` is asked with the state before the step; a processor that says no is skipped
for that step. The chain is listed outermost first: :class:`agentledger.AgentBuilder` puts the
user's processors outside the built-in ones, so they see the state after the built-ins have
filed the step's messages.

A processor may also be a plain function ``(state, next) -> state``, its ``process`` alone: it
processes every step (:class:`FunctionProcessor`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._values import AgentState, AgentStatus

Next = Callable[[AgentState], AgentState]


@runtime_checkable
class StateProcessor(Protocol):
    """Middleware over one step of the agent loop."""

    def can_process(self, state: AgentState) -> bool: ...

    def process(self, state: AgentState, next: Next) -> AgentState: ...


ProcessFunction = Callable[[AgentState, Next], AgentState]
"""A processor as a plain function: what :meth:`StateProcessor.process` does, at every step."""


@dataclass(frozen=True)
class FunctionProcessor:
    """A plain function ``(state, next) -> state`` run as a :class:`StateProcessor` that
    processes every state: the chain runs it, and holds it to the contract, as any other."""

    function: ProcessFunction

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Next) -> AgentState:
        return self.function(state, next)


def as_processor(processor: StateProcessor | ProcessFunction) -> StateProcessor:
    """``processor`` as the chain runs it: an object as it is, a function wrapped."""
    if isinstance(processor, StateProcessor):
        return processor
    return FunctionProcessor(processor)


def processor_name(processor: StateProcessor) -> str:
    """What an error calls ``processor``: its function's name, or its class's."""
    if isinstance(processor, FunctionProcessor):
        return getattr(processor.function, "__qualname__", repr(processor.function))
    return type(processor).__name__


class AppendToolTraceToBuffer:
    """Files the step's trace (tool calls and results) in the ``execution_buffer`` section."""

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Next) -> AgentState:
        new_state = next(state)
        step = new_state.current_step
        if step is None:
            return new_state
        return new_state.file(AgentState.EXECUTION_BUFFER_SECTION, step.trace_messages)


class AppendStepMessages:
    """Files the step's output in the conversation.

    With ``separate_tool_trace`` only the answer goes there; without it, every message the step
    produced (tool calls, tool results, answer), which is the inline behaviour.
    """

    def __init__(self, *, separate_tool_trace: bool = True) -> None:
        self.separate_tool_trace = separate_tool_trace

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Next) -> AgentState:
        new_state = next(state)
        step = new_state.current_step
        if step is None:
            return new_state
        output = step.response_messages if self.separate_tool_trace else step.output_messages()
        output = output.filter(lambda m: bool(m.content or m.tool_calls or m.tool_call_id))
        return new_state.file(AgentState.DEFAULT_SECTION, output)

    def __repr__(self) -> str:
        return f"AppendStepMessages(separate_tool_trace={self.separate_tool_trace})"


class ClearExecutionBuffer:
    """Empties the ``execution_buffer`` section when the run stops.

    A run that failed keeps its buffer, so it can be continued where it stopped.
    """

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next: Next) -> AgentState:
        new_state = next(state)
        outcome = new_state.continuation_outcome
        if outcome is None or outcome.should_continue or new_state.status is AgentStatus.FAILED:
            return new_state
        store = new_state.store.section(AgentState.EXECUTION_BUFFER_SECTION).clear()
        return new_state.with_message_store(store)


def run_chain(processors: Sequence[StateProcessor], state: AgentState, step: Next) -> AgentState:
    """Run ``step`` inside ``processors`` (outermost first)."""

    def call(index: int, current: AgentState) -> AgentState:
        if index == len(processors):
            return step(current)
        processor = processors[index]

        def next_(later: AgentState) -> AgentState:
            return call(index + 1, later)

        if processor.can_process(current):
            return processor.process(current, next_)
        return next_(current)

    return call(0, state)

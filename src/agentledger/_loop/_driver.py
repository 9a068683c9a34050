"""What the loop asks of a driver for one step, and the ``Driver`` protocol drivers implement
(:mod:`agentledger._drivers`: native tool calling, ReAct)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .._core import ToolSet
from .._values import AgentState, AgentStep, Clock
from ._executor import ToolExecutor
from ._tracing import Tracer


@dataclass(frozen=True)
class StepRequest:
    """What the loop asks of a driver for one step."""

    step_index: int
    tools: ToolSet
    executor: ToolExecutor
    clock: Clock
    system_prompt: str | None = None
    final_instruction: str | None = None
    """Set for a final-response step: no tools are offered and this closes the messages."""
    tracer: Tracer | None = None
    """Traces the step's model call (the agent's tracer); None traces nothing."""

    @property
    def is_final_response(self) -> bool:
        return self.final_instruction is not None


class Driver(Protocol):
    """Performs one step of a run: asks the model, runs the tools it called, and returns the
    step (a failed model call is a step of type ``error``, never an exception)."""

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep: ...

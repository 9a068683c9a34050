"""The agent loop: steps until the continuation criteria say stop.

What the loop decides (start or continue a run, what the next step is, go on or stop) is pure
code over values; asking the model and running tools happen in the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ._ids import Clock, new_id
from .continuation import ExecutionBudget
from .criteria import Criterion, decide, pending_outcome
from .drivers import Driver, StepRequest
from .errors import ProcessorError
from .executor import ToolExecutor
from .processors import StateProcessor, run_chain
from .state import AgentState, AgentStatus
from .steps import StepExecution
from .tools import EMPTY_TOOLS, ToolSet

DEFAULT_FINAL_INSTRUCTION = (
    "You have reached the limit of this run ({reason}) and cannot call tools any more. "
    "Answer the user now with what you have found so far, and say what is missing."
)


class FinalResponse(StrEnum):
    """What a run stopped by a limit before the model answered does."""

    GENERATE = "generate"
    """One more inference, with no tools offered, asks the model for its answer."""
    NONE = "none"
    """The run ends without an answer."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything an :class:`Agent` runs with; made by :class:`agentledger.AgentBuilder`."""

    driver: Driver
    tools: ToolSet
    processors: tuple[StateProcessor, ...]
    criteria: tuple[Criterion, ...]
    budget: ExecutionBudget
    clock: Clock
    name: str = "agent"
    system_prompt: str | None = None
    final_response: FinalResponse = FinalResponse.GENERATE
    final_instruction: str = DEFAULT_FINAL_INSTRUCTION
    max_parallel_tools: int = 1


class Agent:
    """Runs the loop over an :class:`AgentState`.

    ``execute(state)`` runs until the run stops and returns the last state; ``iterate(state)``
    yields the state after every step. A state whose last run finished starts a new run (a
    fresh execution buffer, the conversation kept); a state whose run is still ``running`` or
    ``failed`` continues that run.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self._executor = ToolExecutor(
            config.tools, clock=config.clock, max_parallel=config.max_parallel_tools
        )
        # A final-response step offers no tools; any call the model still makes gets an
        # "unknown tool" result instead of running.
        self._no_tools = ToolExecutor(EMPTY_TOOLS, clock=config.clock)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def tools(self) -> ToolSet:
        return self.config.tools

    @property
    def processors(self) -> Sequence[StateProcessor]:
        return self.config.processors

    def execute(self, state: AgentState) -> AgentState:
        last = state
        for last in self.iterate(state):  # noqa: B007 - the last state is the result
            pass
        return last

    def iterate(self, state: AgentState) -> Iterator[AgentState]:
        state = self.begin(state)
        while True:
            state = self.step(state)
            yield state
            outcome = state.continuation_outcome
            if outcome is None or not outcome.should_continue:
                return

    def begin(self, state: AgentState) -> AgentState:
        """Start a new run on ``state``, or pick up the one in progress."""
        if state.run_id is not None and state.status in (AgentStatus.RUNNING, AgentStatus.FAILED):
            return state.model_copy(update={"status": AgentStatus.RUNNING})
        store = state.store.section(AgentState.EXECUTION_BUFFER_SECTION).clear()
        return state.model_copy(
            update={
                "run_id": new_id(),
                "store": store,
                "step_executions": (),
                "status": AgentStatus.RUNNING,
                "run_started_at": self.config.clock(),
                "budget": state.budget.tightened(self.config.budget),
            }
        )

    def step(self, state: AgentState) -> AgentState:
        """One step: the processors around the driver's step and the continuation decision."""
        after = run_chain(self.config.processors, state, self._perform_step)
        if after.current_step is state.current_step:
            raise ProcessorError(
                "a step ended without reaching the driver: every processor must call next(state) "
                f"(processors: {', '.join(type(p).__name__ for p in self.config.processors)})"
            )
        return after

    def _perform_step(self, state: AgentState) -> AgentState:
        index = state.step_count
        step = self.config.driver.perform_step(state, self._request(state, index))
        judged = state.with_step_execution(StepExecution(step_index=index, step=step))
        outcome = decide(
            judged,
            self.config.criteria,
            final_response=self.config.final_response is FinalResponse.GENERATE,
        )
        return judged.with_step_execution(
            StepExecution(step_index=index, step=step, outcome=outcome)
        ).model_copy(update={"status": AgentStatus.after(outcome)})

    def _request(self, state: AgentState, index: int) -> StepRequest:
        previous = pending_outcome(state.step_executions)
        final = previous is not None and previous.final_response_required
        reason = previous.stop_reason if previous is not None else None
        return StepRequest(
            step_index=index,
            tools=EMPTY_TOOLS if final else self.config.tools,
            executor=self._no_tools if final else self._executor,
            clock=self.config.clock,
            system_prompt=self.config.system_prompt,
            final_instruction=self.config.final_instruction.format(reason=reason)
            if final
            else None,
        )

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={self.tools!r})"

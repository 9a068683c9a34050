"""What a streamed run tells its caller as it goes: typed, frozen, JSON-ready events.

Every event carries a ``type`` field naming it and the ``run_id`` of the run it comes from, so
one stream can hold a run and its subagent runs (``RunStarted`` gives each run's depth and
parent). ``event.model_dump(mode="json")`` is what a server sends (say, as server-sent events).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._continuation import StopReason
from ._message import ToolCall
from ._state import AgentStatus
from ._usage import Usage


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    run_id: str


class RunStarted(_Event):
    """A run began: its user message and its run row are recorded."""

    type: Literal["run_started"] = "run_started"
    conversation_id: str
    agent_name: str
    depth: int = 0
    parent_run_id: str | None = None


class TextDelta(_Event):
    """Text of the answer, as the model produced it; a step's deltas joined are its text."""

    type: Literal["text_delta"] = "text_delta"
    step_index: int
    text: str


class ReasoningDelta(_Event):
    """Reasoning (thinking) the model produced, as it came."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    step_index: int
    text: str


class ToolCallStarted(_Event):
    """A tool the model called starts running."""

    type: Literal["tool_call_started"] = "tool_call_started"
    step_index: int
    call: ToolCall


class ToolCallFinished(_Event):
    """A tool call ended: its result (an error result when ``is_error``) and how long it took."""

    type: Literal["tool_call_finished"] = "tool_call_finished"
    step_index: int
    call_id: str
    result: str
    is_error: bool = False
    duration_ms: float | None = None


class StepRecorded(_Event):
    """A step's transaction committed: the step is in the ledger."""

    type: Literal["step_recorded"] = "step_recorded"
    step_index: int
    usage: Usage
    cost_usd: float | None = None


class RunFinished(_Event):
    """The run is over and recorded (committed, or failed). The fields are its summary;
    ``result`` is the whole :class:`agentledger.RunResult` (state included), kept out of the
    JSON dump."""

    type: Literal["run_finished"] = "run_finished"
    conversation_id: str
    answer: str | None
    status: AgentStatus
    stop_reason: StopReason | None = None
    usage: Usage
    cost_usd: float | None = None
    error: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    result: object = Field(default=None, exclude=True, repr=False)

    @classmethod
    def of(cls, result: Any) -> RunFinished:
        """The event that tells a run's end, from its :class:`agentledger.RunResult` (attached
        whole): what an app sends for a run whose stream it closed, which tells none."""
        return cls(
            run_id=result.run_id,
            conversation_id=result.conversation_id,
            answer=result.answer,
            status=result.status,
            stop_reason=result.stop_reason,
            usage=result.usage,
            cost_usd=result.cost_usd,
            error=result.error,
            result=result,
        )


Event = Annotated[
    RunStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallFinished
    | StepRecorded
    | RunFinished,
    Field(discriminator="type"),
]
"""Any event of a streamed run, told apart by its ``type``."""

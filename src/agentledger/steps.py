"""The execution trace: steps, the tool executions within them, and their outcomes."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._ids import new_id
from .continuation import ContinuationOutcome
from .llm import InferenceResponse
from .messages import EMPTY_MESSAGES, Message, Messages, Role, ToolCall
from .usage import Spend, Usage


def _milliseconds(started_at: datetime, finished_at: datetime) -> float:
    return (finished_at - started_at).total_seconds() * 1000.0


class ToolExecution(BaseModel):
    """One tool call and what came of it.

    ``result`` is exactly what the model is shown; ``arguments`` are the validated arguments
    (``None`` when validation failed); ``error`` says what went wrong when ``is_error``.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_id)
    """Also the id of the ``tool`` message that carries the result."""
    tool_call: ToolCall
    arguments: dict[str, JsonValue] | None = None
    result: str
    is_error: bool = False
    error: str | None = None
    started_at: datetime
    finished_at: datetime
    child_run_id: str | None = None
    subtree: Spend | None = None
    """For a tool that ran a subagent: what that subagent's run tree spent."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def tool_name(self) -> str:
        return self.tool_call.name

    @property
    def tool_call_id(self) -> str:
        return self.tool_call.id

    @property
    def duration_ms(self) -> float:
        return _milliseconds(self.started_at, self.finished_at)

    def to_message(self) -> Message:
        """The ``tool`` message that carries the result back to the model."""
        return Message(
            id=self.id,
            role=Role.TOOL,
            content=self.result,
            tool_call_id=self.tool_call.id,
            name=self.tool_call.name,
            created_at=self.finished_at,
        )


class StepType(StrEnum):
    """What a step was."""

    TOOL_USE = "tool_use"
    """The model asked for tools, which ran."""
    RESPONSE = "response"
    """The model answered in text."""
    FINAL_RESPONSE = "final_response"
    """The extra inference, with no tools, that asks for an answer after a limit stopped the run."""
    ERROR = "error"
    """The model call failed, or (``ReActDriver``) the model kept sending output that could not
    be parsed."""
    INVALID_OUTPUT = "invalid_output"
    """The model's output could not be parsed (``ReActDriver``); the error was fed back to it."""


class ContextMasking(BaseModel):
    """What observation masking did before a step (:mod:`agentledger.context`): how many tool
    results it masked, and the context's tokens before and after."""

    model_config = ConfigDict(frozen=True)

    masked: int
    tokens_before: int
    tokens_after: int


class AgentStep(BaseModel):
    """One inference and the tools it called.

    ``input_messages`` is what the model saw. Its output is split in two: ``trace_messages``
    (the assistant message that called tools, and the tool results) and ``response_messages``
    (the assistant's answer without tool calls). ``assistant_message`` is the message the model
    produced, with its text, tool calls and reasoning; reasoning is trace, never conversation, so
    an answer in ``response_messages`` is that message without it (same id).
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_id)
    step_type: StepType
    input_messages: Messages = EMPTY_MESSAGES
    trace_messages: Messages = EMPTY_MESSAGES
    response_messages: Messages = EMPTY_MESSAGES
    inference_response: InferenceResponse | None = None
    assistant_message: Message | None = None
    tool_executions: tuple[ToolExecution, ...] = ()
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    context_masking: ContextMasking | None = None
    """Set when tool results were masked to fit the context before this step."""

    def output_messages(self) -> Messages:
        """Trace, then response: everything the step added, in order."""
        return self.trace_messages.append_messages(self.response_messages)

    @property
    def usage(self) -> Usage:
        response = self.inference_response
        return response.usage if response is not None else Usage()

    @property
    def cost_usd(self) -> float | None:
        response = self.inference_response
        return response.cost_usd if response is not None else None

    @property
    def model(self) -> str | None:
        response = self.inference_response
        return response.model if response is not None else None

    @property
    def finish_reason(self) -> str | None:
        response = self.inference_response
        return response.finish_reason if response is not None else None

    def has_tool_calls(self) -> bool:
        response = self.inference_response
        return response is not None and response.has_tool_calls()

    def final_response(self) -> Message | None:
        """The last answer message of this step, if it gave one."""
        return self.response_messages.last()

    @property
    def tool_errors(self) -> tuple[ToolExecution, ...]:
        return tuple(e for e in self.tool_executions if e.is_error)

    @property
    def duration_ms(self) -> float:
        return _milliseconds(self.started_at, self.finished_at)


class StepExecution(BaseModel):
    """A step with its index in the run and the continuation outcome judged after it.

    ``outcome`` is ``None`` only while the continuation criteria are judging the step.
    """

    model_config = ConfigDict(frozen=True)

    step_index: int
    step: AgentStep
    outcome: ContinuationOutcome | None = None

    @property
    def usage(self) -> Usage:
        return self.step.usage

    @property
    def started_at(self) -> datetime:
        return self.step.started_at

    @property
    def finished_at(self) -> datetime:
        return self.step.finished_at

    @property
    def duration_ms(self) -> float:
        return self.step.duration_ms

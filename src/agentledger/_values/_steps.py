"""The execution trace: steps, the tool executions within them, and their outcomes.

A step holds each fact once. The model's output is the assistant message; what the call spent
and how it ended are the step's own fields; each tool execution is one of the message's tool
calls (the same object) and what came of it. The step's trace and answer are views of those,
built by :func:`split_output`, which is also how the ledger rebuilds a step it stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._continuation import ContinuationOutcome
from ._ids import new_id
from ._message import TOOL_ERROR_KEY, Message, Role, ToolCall
from ._messages import EMPTY_MESSAGES, Messages
from ._usage import Spend, Usage


def _milliseconds(started_at: datetime, finished_at: datetime) -> float:
    return (finished_at - started_at).total_seconds() * 1000.0


MCP_SERVER_KEY = "mcp_server"
"""The tool execution metadata key (``tool_executions.metadata``) naming the MCP server a
call went to; the agent's own tools have none."""

MCP_TOOL_KEY = "mcp_tool"
"""The metadata key naming the tool as its MCP server knows it (the agent may prefix it)."""


class ToolExecution(BaseModel):
    """One tool call and what came of it.

    ``tool_call`` is the call as the model sent it (the very object in the step's assistant
    message); ``arguments`` are the arguments the tool was called with, after validation
    (``None`` when validation failed); ``result`` is exactly what the model is shown, and
    ``error`` says what went wrong when ``is_error``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

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
            metadata={TOOL_ERROR_KEY: True} if self.is_error else {},
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
    """What observation masking did before a step (:mod:`agentledger._core`): how many tool
    results it masked, and the context's tokens before and after."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    masked: int
    tokens_before: int
    tokens_after: int


class AgentStep(BaseModel):
    """One inference and the tools it called.

    ``assistant_message`` is what the model produced (text, tool calls, reasoning and provider
    metadata), ``None`` when the call failed; ``usage``, ``cost_usd``, ``model`` and
    ``finish_reason`` are what the call spent and how it ended (kept also for a response the
    step refused, which has no message). ``input_messages`` is what the model was sent; it lives
    in memory only (the ledger does not store it).

    The step's output is read from the message and the tool executions: ``trace_messages``
    (the assistant message that called tools, then the tool results) and ``response_messages``
    (the assistant's answer, without its reasoning: reasoning is trace, never conversation).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str = Field(default_factory=new_id)
    step_type: StepType
    input_messages: Messages = EMPTY_MESSAGES
    assistant_message: Message | None = None
    tool_executions: tuple[ToolExecution, ...] = ()
    usage: Usage = Usage.model_construct()
    cost_usd: float | None = None
    """The price of the model call when it is known; ``None`` means unknown, never free."""
    model: str | None = None
    finish_reason: str | None = None
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    context_masking: ContextMasking | None = None
    """Set when tool results were masked to fit the context before this step."""
    interrupted: bool = False
    """The run ended while this step was in progress (cancelled, or failed after text was
    shown): the step holds what it had come to, its text as far as it was shown or its model's
    whole response, and each tool call's result or the notice that it was interrupted. Its
    usage is what the model call spent, when it had answered."""

    @property
    def trace_messages(self) -> Messages:
        """The assistant message that called tools and the tool results, in order."""
        return split_output(self.assistant_message, self.tool_executions)[0]

    @property
    def response_messages(self) -> Messages:
        """The answer, when the model gave one: the assistant message without its reasoning
        and provider metadata (same id)."""
        return _response(self.assistant_message)

    def output_messages(self) -> Messages:
        """Trace, then response: everything the step added, in order."""
        trace, response = split_output(self.assistant_message, self.tool_executions)
        return trace.append_messages(response)

    @property
    def called_model(self) -> bool:
        """True when the model answered this step with a message: a step whose cost is
        expected to be known (``step_executions.message_id IS NOT NULL`` in SQL)."""
        return self.assistant_message is not None

    def has_tool_calls(self) -> bool:
        return self.assistant_message is not None and bool(self.assistant_message.tool_calls)

    def final_response(self) -> Message | None:
        """The last answer message of this step, if it gave one."""
        return self.response_messages.last()

    @property
    def tool_errors(self) -> tuple[ToolExecution, ...]:
        return tuple(e for e in self.tool_executions if e.is_error)

    @property
    def duration_ms(self) -> float:
        return _milliseconds(self.started_at, self.finished_at)


REACT_METADATA_KEY = "react"
"""The key under which ``ReActDriver`` keeps, in an assistant message's ``metadata``, the model's
raw text (``raw``) and, for a decision it could not parse, the error fed back (``error``)."""


def output_error(message: Message) -> str | None:
    """What was wrong with the output ``message`` holds, when a driver rejected it (for
    ``ReActDriver``, a malformed decision). A rejected output is trace, never an answer."""
    react = message.metadata.get(REACT_METADATA_KEY)
    error = react.get("error") if isinstance(react, dict) else None
    return error if isinstance(error, str) else None


def split_output(
    assistant: Message | None, executions: Sequence[ToolExecution]
) -> tuple[Messages, Messages]:
    """Trace and response of a step, from the message the model produced and its tool runs.

    A message that calls tools is trace, followed by the results, and so is an output the driver
    rejected (:func:`output_error`); any other is the answer, without its reasoning and provider
    metadata (they stay on the step).
    """
    if assistant is not None and _is_trace(assistant):
        return Messages.of(assistant, *(e.to_message() for e in executions)), EMPTY_MESSAGES
    return EMPTY_MESSAGES, _response(assistant)


def _is_trace(assistant: Message) -> bool:
    return bool(assistant.tool_calls) or output_error(assistant) is not None


def _response(assistant: Message | None) -> Messages:
    """The answer in ``assistant`` (the step's message), if it is one (see
    :func:`split_output`): read without building the trace's messages."""
    if assistant is None or _is_trace(assistant) or not assistant.content:
        return EMPTY_MESSAGES
    answer = assistant.model_copy(update={"reasoning": None, "metadata": {}})
    return Messages.of(answer)


class StepExecution(BaseModel):
    """A step with its index in the run and the continuation outcome judged after it.

    ``outcome`` is ``None`` only while the continuation criteria are judging the step.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

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

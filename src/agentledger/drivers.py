"""Drivers turn a state into a step: ask the model, run the tools it called, file the output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ._ids import Clock
from ._text import check_storable, printable
from .errors import UnstorableTextError
from .executor import ToolExecutor
from .llm import LLM, InferenceRequest, InferenceResponse, ModelSettings
from .messages import Message, Messages, Role
from .state import AgentState
from .steps import AgentStep, StepType, ToolExecution
from .tools import ToolSet
from .usage import Spend


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

    @property
    def is_final_response(self) -> bool:
        return self.final_instruction is not None


class Driver(Protocol):
    """Performs one step of a run."""

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep: ...


@dataclass(frozen=True)
class ToolCallingDriver:
    """Native tool calling: the model is offered the tools' schemas and returns tool calls.

    A failed model call does not raise: it becomes a step of type ``error`` whose ``error``
    says what happened, and the run stops as ``failed``. So does a response holding text the
    ledger cannot store (a NUL character or a lone surrogate): an ``UnstorableTextError``.
    """

    llm: LLM
    model: str | None = None
    settings: ModelSettings = ModelSettings()

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep:
        started_at = request.clock()
        messages = inference_messages(state, request)
        inference = InferenceRequest(
            messages=messages,
            tools=() if request.is_final_response else request.tools.schemas(),
            model=self.model,
            settings=self.settings,
        )
        try:
            response = checked_response(self.llm.complete(inference))
        except Exception as exc:  # the run fails and keeps its buffer; it can be continued
            return failed_step(exc, messages, request, started_at)
        executions = execute_tools(response, state, request)
        return step_from_response(
            response, executions, messages, request, started_at, request.clock()
        )


REACT_METADATA_KEY = "react"
"""The key under which ``ReActDriver`` keeps, in an assistant message's ``metadata``, the model's
raw text (``raw``) and, for a decision it could not parse, the error fed back (``error``)."""


def failed_step(
    exc: Exception, messages: Messages, request: StepRequest, started_at: datetime
) -> AgentStep:
    """The step of a model call that raised: type ``error``, so the run fails and keeps its
    buffer, and can be continued. NUL characters and lone surrogates in the exception's message
    are escaped (:func:`printable`), so the error can always be recorded."""
    refused = exc.response if isinstance(exc, _RefusedResponse) else None
    return AgentStep(
        step_type=StepType.ERROR,
        input_messages=messages,
        # A response refused for its text still spent tokens: the step keeps what it cost.
        inference_response=_spend_of(refused) if refused is not None else None,
        started_at=started_at,
        finished_at=request.clock(),
        error=printable(f"{_error_name(exc)}: {exc}"),
    )


def _error_name(exc: Exception) -> str:
    return UnstorableTextError.__name__ if isinstance(exc, _RefusedResponse) else type(exc).__name__


class _RefusedResponse(UnstorableTextError):
    """A model response holding text the ledger cannot store; ``response`` is the response."""

    def __init__(self, message: str, response: InferenceResponse) -> None:
        super().__init__(message)
        self.response = response


def _spend_of(response: InferenceResponse) -> InferenceResponse:
    """``response`` without its text: its usage, cost, model and finish reason."""
    return InferenceResponse(
        usage=response.usage,
        cost_usd=response.cost_usd,
        model=printable(response.model) if response.model else response.model,
        finish_reason=printable(response.finish_reason)
        if response.finish_reason
        else response.finish_reason,
    )


_MODEL_OUTPUT_RULE = (
    "text the ledger stores must be valid Unicode without NUL characters, so the step failed: "
    "the run keeps its buffer and can be resumed (the model may answer differently)"
)


def checked_response(response: InferenceResponse) -> InferenceResponse:
    """``response``, once it is known that the ledger can store all its text (content,
    reasoning, tool calls, metadata...); else :class:`~agentledger.UnstorableTextError`, which a
    driver turns into a failed step."""
    try:
        check_storable(response, "the model's response", what_to_do=_MODEL_OUTPUT_RULE)
    except UnstorableTextError as exc:
        raise _RefusedResponse(str(exc), response) from None
    return response


def execute_tools(
    response: InferenceResponse, state: AgentState, request: StepRequest
) -> tuple[ToolExecution, ...]:
    """Run the tool calls of ``response`` with the request's executor."""
    spent = Spend(usage=response.usage, cost_usd=response.cost_usd, steps=1)
    return request.executor.execute(response.tool_calls, state, request.step_index, in_flight=spent)


def output_error(message: Message) -> str | None:
    """What was wrong with the output ``message`` holds, when a driver rejected it (for
    ``ReActDriver``, a malformed decision). A rejected output is trace, never an answer."""
    react = message.metadata.get(REACT_METADATA_KEY)
    error = react.get("error") if isinstance(react, dict) else None
    return error if isinstance(error, str) else None


def inference_messages(state: AgentState, request: StepRequest) -> Messages:
    """The system prompt, the state's inference messages and, for a final-response step,
    the instruction that asks for the answer."""
    messages = state.messages_for_inference()
    if request.system_prompt:
        messages = Messages.of(Message.system(request.system_prompt)).append_messages(messages)
    if request.final_instruction:
        messages = messages.append(Message.user(request.final_instruction))
    return messages


def step_from_response(
    response: InferenceResponse,
    executions: tuple[ToolExecution, ...],
    input_messages: Messages,
    request: StepRequest,
    started_at: datetime,
    finished_at: datetime,
) -> AgentStep:
    """File a model response and its tool executions as trace or response messages."""
    assistant = Message(
        role=Role.ASSISTANT,
        content=response.content,
        tool_calls=response.tool_calls,
        reasoning=response.reasoning,
        metadata=response.metadata,
        created_at=finished_at,
    )
    trace, answer = split_output(assistant, executions)
    return AgentStep(
        step_type=_step_type(response, request),
        input_messages=input_messages,
        trace_messages=trace,
        response_messages=answer,
        inference_response=response,
        assistant_message=assistant,
        tool_executions=executions,
        started_at=started_at,
        finished_at=finished_at,
    )


def split_output(
    assistant: Message, executions: Sequence[ToolExecution]
) -> tuple[Messages, Messages]:
    """Trace and response of a step, from the message the model produced and its tool runs.

    A message that calls tools is trace, followed by the results, and so is an output the driver
    rejected (:func:`output_error`); any other is the answer, without its reasoning and provider
    metadata (they stay on the step).
    """
    if assistant.tool_calls or output_error(assistant) is not None:
        return Messages.of(assistant, *(e.to_message() for e in executions)), Messages()
    if not assistant.content:
        return Messages(), Messages()
    return Messages(), Messages.of(assistant.model_copy(update={"reasoning": None, "metadata": {}}))


def _step_type(response: InferenceResponse, request: StepRequest) -> StepType:
    if request.is_final_response:
        return StepType.FINAL_RESPONSE
    return StepType.TOOL_USE if response.tool_calls else StepType.RESPONSE

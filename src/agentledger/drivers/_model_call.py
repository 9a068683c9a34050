"""One model call made into a step, the part every driver shares: what the model is sent, the
check that its answer can be stored, the tools it called, and the step itself (or the failed
step when the call raised)."""

from __future__ import annotations

from datetime import datetime

from ..errors import UnstorableTextError
from ..loop import StepRequest
from ..values import (
    AgentState,
    AgentStep,
    InferenceResponse,
    Message,
    Messages,
    Role,
    Spend,
    StepType,
    ToolExecution,
    check_storable,
    printable,
)


def inference_messages(state: AgentState, request: StepRequest) -> Messages:
    """The system prompt, the state's inference messages and, for a final-response step,
    the instruction that asks for the answer."""
    messages = state.messages_for_inference()
    if request.system_prompt:
        messages = Messages.of(Message.system(request.system_prompt)).append_messages(messages)
    if request.final_instruction:
        messages = messages.append(Message.user(request.final_instruction))
    return messages


_MODEL_OUTPUT_RULE = (
    "text the ledger stores must be valid Unicode without NUL characters, so the step failed: "
    "the run keeps its buffer and can be resumed (the model may answer differently)"
)


class RefusedResponse(UnstorableTextError):
    """A model response holding text the ledger cannot store; ``response`` is the response,
    whose usage, cost, model and finish reason the failed step keeps."""

    def __init__(self, message: str, response: InferenceResponse) -> None:
        super().__init__(message)
        self.response = response


def checked_response(response: InferenceResponse) -> InferenceResponse:
    """``response``, once it is known that the ledger can store all its text (content,
    reasoning, tool calls, metadata...); else :class:`RefusedResponse` (an
    :class:`~agentledger.UnstorableTextError`), which a driver turns into a failed step."""
    try:
        check_storable(response, "the model's response", what_to_do=_MODEL_OUTPUT_RULE)
    except UnstorableTextError as exc:
        raise RefusedResponse(str(exc), response) from None
    return response


def failed_step(
    exc: Exception, messages: Messages, request: StepRequest, started_at: datetime
) -> AgentStep:
    """The step of a model call that raised: type ``error``, so the run fails and keeps its
    buffer, and can be continued. A response refused for its text still spent tokens: the
    step keeps what it cost. NUL characters and lone surrogates in the exception's message are
    escaped (:func:`printable`), so the error can always be recorded."""
    refused = isinstance(exc, RefusedResponse)
    spent = exc.response if isinstance(exc, RefusedResponse) else _NO_RESPONSE
    name = UnstorableTextError.__name__ if refused else type(exc).__name__
    return AgentStep(
        step_type=StepType.ERROR,
        input_messages=messages,
        usage=spent.usage,
        cost_usd=spent.cost_usd,
        model=_printable_or_none(spent.model),
        finish_reason=_printable_or_none(spent.finish_reason),
        started_at=started_at,
        finished_at=request.clock(),
        error=printable(f"{name}: {exc}"),
    )


_NO_RESPONSE = InferenceResponse.model_construct()


def _printable_or_none(text: str | None) -> str | None:
    return printable(text) if text else text


def execute_tools(
    response: InferenceResponse, state: AgentState, request: StepRequest
) -> tuple[ToolExecution, ...]:
    """Run the tool calls of ``response`` with the request's executor."""
    spent = Spend(usage=response.usage, cost_usd=response.cost_usd, steps=1)
    return request.executor.execute(response.tool_calls, state, request.step_index, in_flight=spent)


def step_from_response(
    response: InferenceResponse,
    executions: tuple[ToolExecution, ...],
    input_messages: Messages,
    request: StepRequest,
    started_at: datetime,
    finished_at: datetime,
) -> AgentStep:
    """The step of a model response and its tool executions: the assistant message it
    produced, and what the call spent and how it ended."""
    assistant = Message(
        role=Role.ASSISTANT,
        content=response.content,
        tool_calls=response.tool_calls,
        reasoning=response.reasoning,
        metadata=response.metadata,
        created_at=finished_at,
    )
    return AgentStep(
        step_type=_step_type(response, request),
        input_messages=input_messages,
        assistant_message=assistant,
        tool_executions=executions,
        usage=response.usage,
        cost_usd=response.cost_usd,
        model=response.model,
        finish_reason=response.finish_reason,
        started_at=started_at,
        finished_at=finished_at,
    )


def _step_type(response: InferenceResponse, request: StepRequest) -> StepType:
    if request.is_final_response:
        return StepType.FINAL_RESPONSE
    return StepType.TOOL_USE if response.tool_calls else StepType.RESPONSE

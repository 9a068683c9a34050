"""One model call made into a step, the part every driver shares: what the model is sent, the
check that its answer can be stored, the tools it called, and the step itself (or the failed
step when the call raised)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from .._loop._driver import StepRequest
from .._values import (
    EMPTY_MESSAGES,
    LLM,
    AgentState,
    AgentStep,
    AsyncLLM,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    Role,
    StepType,
    StreamingLLM,
    StreamItem,
    ToolExecution,
    check_storable,
    printable,
)
from ..errors import UnstorableTextError


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
    :class:`~agentledger.errors.UnstorableTextError`), which a driver turns into a failed step."""
    try:
        check_storable(response, "the model's response", what_to_do=_MODEL_OUTPUT_RULE)
    except UnstorableTextError as exc:
        raise RefusedResponse(str(exc), response) from None
    return response


def failed_step(exc: Exception, messages: Messages, request: StepRequest) -> AgentStep:
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
        started_at=request.started_at,
        finished_at=request.clock(),
        error=printable(f"{name}: {exc}"),
    )


_NO_RESPONSE = InferenceResponse.model_construct()


def _printable_or_none(text: str | None) -> str | None:
    return printable(text) if text else text


def execute_tools(
    response: InferenceResponse, state: AgentState, request: StepRequest
) -> tuple[ToolExecution, ...]:
    """Run the tool calls of ``response`` through the request (:meth:`StepRequest.run_tools`),
    with the step as the model answered it: a cancel while they run records it."""
    if not response.tool_calls:
        return ()
    answered = step_from_response(response, (), EMPTY_MESSAGES, request, request.started_at)
    return request.run_tools(state, answered)


def step_from_response(
    response: InferenceResponse,
    executions: tuple[ToolExecution, ...],
    input_messages: Messages,
    request: StepRequest,
    finished_at: datetime,
) -> AgentStep:
    """The step of a model response and its tool executions, begun when the request says and
    finished ``finished_at``: the assistant message it produced, and what the call spent and
    how it ended."""
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
        started_at=request.started_at,
        finished_at=finished_at,
    )


def _step_type(response: InferenceResponse, request: StepRequest) -> StepType:
    if request.is_final_response:
        return StepType.FINAL_RESPONSE
    return StepType.TOOL_USE if response.tool_calls else StepType.RESPONSE


@runtime_checkable
class _AsyncCompleting(Protocol):
    """A model whose ``acomplete`` may be awaited: :class:`AsyncLLM`'s first half, enough for
    a model that cannot stream asynchronously."""

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse: ...


@dataclass(frozen=True)
class ModelAbilities:
    """A driver's model and the forms of it the driver may call, decided once, when the driver
    is made, from the protocols the model implements: :class:`StreamingLLM` (``stream``),
    :class:`AsyncLLM` (``acomplete`` and ``astream``), or ``acomplete`` alone. A form the
    model gains later is not used; one it loses fails its step."""

    llm: LLM
    streaming: StreamingLLM | None
    """The model, when it can stream (``stream``)."""
    awaited: _AsyncCompleting | None
    """The model, when it can be awaited (``acomplete``)."""
    async_streaming: AsyncLLM | None
    """The model, when it can stream on an event loop (``astream``, with ``acomplete``)."""

    @classmethod
    def of(cls, llm: LLM) -> ModelAbilities:
        return cls(
            llm=llm,
            streaming=llm if isinstance(llm, StreamingLLM) else None,
            awaited=llm if isinstance(llm, _AsyncCompleting) else None,
            async_streaming=llm if isinstance(llm, AsyncLLM) else None,
        )


def ask_model(
    model: ModelAbilities,
    inference: InferenceRequest,
    state: AgentState,
    request: StepRequest,
    *,
    tell: bool = True,
) -> InferenceResponse:
    """The model's response to ``inference``: awaited with the request's ``wait_for`` when the
    run is asynchronous and the model can be awaited (else called here, in the step's thread).
    When someone listens to the run's events and ``tell`` is set, the model streams (when it
    can) and its text is told as it comes (:meth:`StepRequest.tell`); a model that cannot
    stream tells its whole text as one delta. With a tracer, the call is traced (its span
    current while it runs)."""
    if request.tracer is None:
        return _asked(model, inference, request, tell=tell)
    with request.tracer.model_call(model.llm, inference, state, request.step_index) as trace:
        response = _asked(model, inference, request, tell=tell)
        trace.answered(response)
        return response


def _asked(
    model: ModelAbilities, inference: InferenceRequest, request: StepRequest, *, tell: bool
) -> InferenceResponse:
    told = request.tell if tell and request.listening else None
    if request.asynchronous and model.awaited is not None:
        return request.wait_for(_ask_async(model, model.awaited, inference, told))
    if told is not None and model.streaming is not None:
        return _streamed(model.streaming.stream(inference), told)
    response = model.llm.complete(inference)
    if told is not None:
        told(InferenceDelta(text=response.content, reasoning=response.reasoning or ""))
    return response


async def _ask_async(
    model: ModelAbilities,
    awaited: _AsyncCompleting,
    inference: InferenceRequest,
    told: Callable[[InferenceDelta], None] | None,
) -> InferenceResponse:
    if told is not None and model.async_streaming is not None:
        async for item in model.async_streaming.astream(inference):
            if isinstance(item, InferenceResponse):
                return item
            if isinstance(item, InferenceDelta):
                told(item)
        raise _no_response(model.llm)
    response = await awaited.acomplete(inference)
    assert isinstance(response, InferenceResponse)
    if told is not None:
        told(InferenceDelta(text=response.content, reasoning=response.reasoning or ""))
    return response


def _streamed(
    items: Iterator[StreamItem], told: Callable[[InferenceDelta], None]
) -> InferenceResponse:
    for item in items:
        if isinstance(item, InferenceResponse):
            return item
        if isinstance(item, InferenceDelta):
            told(item)
    raise _no_response(items)


def _no_response(source: object) -> RuntimeError:
    return RuntimeError(
        f"the stream of {type(source).__name__} ended without its whole response: a stream "
        "yields its deltas, then exactly one InferenceResponse"
    )

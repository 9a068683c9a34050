"""One model call made into a step, the part every driver shares: what the model is sent, the
check that its answer can be stored, the tools it called, and the step itself (or the failed
step when the call raised)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import cast

from .._loop import StepRequest, emit, event_loop, listening, note_told, note_tool_step, wait_for
from .._values import (
    EMPTY_MESSAGES,
    LLM,
    AgentState,
    AgentStep,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    ReasoningDelta,
    Role,
    Spend,
    StepType,
    TextDelta,
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
    response: InferenceResponse, state: AgentState, request: StepRequest, started_at: datetime
) -> tuple[ToolExecution, ...]:
    """Run the tool calls of ``response`` with the request's executor, the step as the model
    answered it (begun ``started_at``) noted first: a cancel while they run records it."""
    spent = Spend(usage=response.usage, cost_usd=response.cost_usd, steps=1)
    if response.tool_calls:
        answered = step_from_response(response, (), EMPTY_MESSAGES, request, started_at, started_at)
        note_tool_step(state.run_id, request.step_index, answered)
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


def ask_model(
    llm: LLM,
    inference: InferenceRequest,
    state: AgentState,
    request: StepRequest,
    *,
    tell: bool = True,
) -> InferenceResponse:
    """The model's response to ``inference``: awaited on the run's event loop when the run is
    asynchronous and the model has ``acomplete``/``astream`` (else called here, in the step's
    thread). When someone listens to the run's events and ``tell`` is set, the model streams
    (``stream``/``astream`` when it has them) and its text is told as it comes, as
    :class:`TextDelta` and :class:`ReasoningDelta`; a model that cannot stream tells its whole
    text as one delta. With a tracer, the call is traced (its span current while it runs)."""
    if request.tracer is None:
        return _asked(llm, inference, state, request, tell=tell)
    with request.tracer.model_call(llm, inference, state, request.step_index) as trace:
        response = _asked(llm, inference, state, request, tell=tell)
        trace.answered(response)
        return response


def _asked(
    llm: LLM, inference: InferenceRequest, state: AgentState, request: StepRequest, *, tell: bool
) -> InferenceResponse:
    told = _teller(state, request) if tell and listening() else None
    if event_loop() is not None and hasattr(llm, "acomplete"):
        return wait_for(_ask_async(llm, inference, told))
    if told is not None and hasattr(llm, "stream"):
        return _streamed(cast(Iterator[object], llm.stream(inference)), told)
    response = llm.complete(inference)
    if told is not None:
        told(InferenceDelta(text=response.content, reasoning=response.reasoning or ""))
    return response


async def _ask_async(
    llm: object, inference: InferenceRequest, told: Callable[[InferenceDelta], None] | None
) -> InferenceResponse:
    if told is not None and hasattr(llm, "astream"):
        items = cast(AsyncIterator[object], llm.astream(inference))
        async for item in items:
            if isinstance(item, InferenceResponse):
                return item
            if isinstance(item, InferenceDelta):
                told(item)
        raise _no_response(llm)
    response = await llm.acomplete(inference)  # type: ignore[attr-defined]
    assert isinstance(response, InferenceResponse)
    if told is not None:
        told(InferenceDelta(text=response.content, reasoning=response.reasoning or ""))
    return response


def _streamed(items: Iterator[object], told: Callable[[InferenceDelta], None]) -> InferenceResponse:
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


def _teller(state: AgentState, request: StepRequest) -> Callable[[InferenceDelta], None]:
    """Tells the listener a step's deltas, as events of the run."""
    run_id, index = state.run_id or "", request.step_index

    def told(delta: InferenceDelta) -> None:
        if delta.text:
            note_told(run_id, index, delta.text)
            emit(TextDelta(run_id=run_id, step_index=index, text=delta.text))
        if delta.reasoning:
            emit(ReasoningDelta(run_id=run_id, step_index=index, text=delta.reasoning))

    return told

"""``ToolCallingDriver``: native tool calling, the default driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._loop._driver import StepRequest
from .._values import LLM, AgentState, AgentStep, InferenceRequest, ModelSettings
from ._model_call import (
    ModelAbilities,
    ask_model,
    checked_response,
    execute_tools,
    failed_step,
    inference_messages,
    step_from_response,
)


@dataclass(frozen=True)
class ToolCallingDriver:
    """Native tool calling: the model is offered the tools' schemas and returns tool calls.

    A failed model call does not raise: it becomes a step of type ``error`` whose ``error``
    says what happened, and the run stops as ``failed``. So does a response holding text the
    ledger cannot store (a NUL character or a lone surrogate): an ``UnstorableTextError``.

    Whether the model streams its text to a listener (``StreamingLLM``) and is awaited in an
    asynchronous run (``AsyncLLM``) is decided when the driver is made, from the methods the
    model has then.
    """

    llm: LLM
    model: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    _abilities: ModelAbilities = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_abilities", ModelAbilities.of(self.llm))

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep:
        messages = inference_messages(state, request)
        inference = InferenceRequest(
            messages=messages,
            tools=() if request.is_final_response else request.tools.schemas(),
            model=self.model,
            settings=self.settings,
        )
        try:
            response = checked_response(ask_model(self._abilities, inference, state, request))
        except Exception as exc:  # the run fails and keeps its buffer; it can be continued
            return failed_step(exc, messages, request)
        executions = execute_tools(response, state, request)
        return step_from_response(response, executions, messages, request, request.clock())

"""The provider-neutral model interface: the tools a model is offered, one request in, one
response out, and the ``LLM`` protocol every provider and test double implements."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._messages import EMPTY_MESSAGES, Messages, Role, ToolCalls
from ._usage import Usage


class ToolSchema(BaseModel):
    """A tool as a model is told about it: its name, what it does, and the JSON schema of its
    arguments."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str
    description: str
    parameters: dict[str, JsonValue]


class ModelSettings(BaseModel):
    """Sampling and output settings passed to the model with every request.

    ``None`` leaves a setting to the provider's default; ``extra`` is sent to the provider as
    it is, for settings this model does not name.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop_sequences: tuple[str, ...] = ()
    tool_choice: Literal["auto", "required", "none"] | None = None
    parallel_tool_calls: bool | None = None
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class InferenceRequest(BaseModel):
    """What the model is asked: the messages it sees, the system prompt first when there is one,
    and the schemas of the tools it is offered (empty when none are)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    messages: Messages = EMPTY_MESSAGES
    tools: tuple[ToolSchema, ...] = ()
    model: str | None = None
    settings: ModelSettings = ModelSettings.model_construct()

    def system_prompt(self) -> str | None:
        """The leading system message's text, for wire formats that send it apart."""
        first = self.messages.first()
        return first.content if first is not None and first.role is Role.SYSTEM else None


class InferenceResponse(BaseModel):
    """What the model answered: text, tool calls or both, with what it cost.

    ``cost_usd`` is the price of this call when the provider reports it; ``None`` means
    unknown, never free.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    content: str = ""
    tool_calls: ToolCalls = ()
    reasoning: str | None = None
    usage: Usage = Usage.model_construct()
    finish_reason: str | None = None
    model: str | None = None
    cost_usd: float | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)


class LLM(Protocol):
    """Anything that can complete an inference request: a provider client or a test double."""

    def complete(self, request: InferenceRequest) -> InferenceResponse: ...

"""The provider-neutral model interface: the tools a model is offered, one request in, one
response out (whole, or streamed as deltas then the whole), and the protocols every provider
and test double implements: ``LLM`` (``complete``), and optionally ``StreamingLLM``
(``stream``) and ``AsyncLLM`` (``acomplete``, ``astream``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._message import Role, ToolCalls
from ._messages import EMPTY_MESSAGES, Messages
from ._usage import Usage


class ToolSchema(BaseModel):
    """A tool as a model is told about it: its name, what it does, and the JSON schema of its
    arguments.

    ``strict`` asks the provider to hold the model's arguments to the schema exactly (OpenAI's
    and Anthropic's ``strict: true``); the schema is then sent in strict form: no additional
    properties, every property required."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str
    description: str
    parameters: dict[str, JsonValue]
    strict: bool = False


ToolChoice = Literal["auto", "required", "none"] | str
"""``"auto"``, ``"required"``, ``"none"``, or the name of one of the request's tools, which the
model must then call."""

ResponseFormat = type[BaseModel] | dict[str, JsonValue]
"""The shape the model's answer must take: a pydantic model class, or a JSON schema."""


class ModelSettings(BaseModel):
    """Sampling and output settings passed to the model with every request.

    ``None`` leaves a setting to the provider's default; ``extra`` is sent to the provider as
    it is, for settings this model does not name. ``tool_choice`` may name one of the
    request's tools, which the model must then call. ``timeout`` (seconds) replaces the
    client's timeout for this request. ``response_format`` (a pydantic model class or a JSON
    schema) makes the model answer with JSON of that shape, in strict mode; the response's
    ``parsed`` holds it read back.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    stop_sequences: tuple[str, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    timeout: float | None = Field(default=None, gt=0)
    response_format: ResponseFormat | None = None
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
    unknown, never free. ``parsed`` is the content read back as the request's
    ``response_format`` asked (an instance of its model class, or a dict for a JSON schema);
    ``None`` when none was asked or the content does not match it (the content is kept
    either way). It is not serialized: the content is the record.
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
    parsed: BaseModel | dict[str, Any] | None = Field(default=None, exclude=True)

    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)


class InferenceDelta(BaseModel):
    """A piece of a response while it streams: text the model produced since the last delta,
    and reasoning (thinking) likewise; either may be empty.

    A stream's text deltas, joined, are the final response's ``content``; its reasoning deltas,
    joined, its ``reasoning``. Tool calls are not streamed piece by piece: they arrive whole,
    on the final :class:`InferenceResponse`."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    text: str = ""
    reasoning: str = ""


StreamItem = InferenceDelta | InferenceResponse
"""What a stream yields: zero or more :class:`InferenceDelta`, then exactly one
:class:`InferenceResponse`, the whole response, equal (content, tool calls, usage, cost, finish
reason, model) to what ``complete`` would have returned for the same answer."""


@runtime_checkable
class LLM(Protocol):
    """Anything that can complete an inference request: a provider client or a test double."""

    def complete(self, request: InferenceRequest) -> InferenceResponse: ...


@runtime_checkable
class StreamingLLM(Protocol):
    """An ``LLM`` that can also stream its response: ``stream`` yields items of :data:`StreamItem`.

    A stream that fails before its first delta raises the same errors ``complete`` would
    (after the same retries); one cut after a delta has been yielded is not retried (the
    caller has shown that text) and raises ``ProviderStreamCutError``, whose ``partial`` holds
    the response as far as it came."""

    def complete(self, request: InferenceRequest) -> InferenceResponse: ...

    def stream(self, request: InferenceRequest) -> Iterator[StreamItem]: ...


@runtime_checkable
class AsyncLLM(Protocol):
    """An ``LLM`` with asynchronous forms: ``acomplete`` as ``complete``, ``astream`` as
    ``stream``, on an event loop. A provider that implements only ``complete`` still works in
    the asynchronous loop, which runs it in a worker thread."""

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse: ...

    def astream(self, request: InferenceRequest) -> AsyncIterator[StreamItem]: ...

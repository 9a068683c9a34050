"""``OpenAIChat``: the Chat Completions API, spoken by OpenAI and by most local servers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx
from pydantic import JsonValue

from .._values import (
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    PriceTable,
    ToolCall,
    ToolSchema,
    Usage,
    chat_message,
    chat_reasoning,
    tool_call_from_chat,
)
from ..errors import ProviderResponseError
from ._http import DEFAULT_TIMEOUT, HttpProvider
from ._retries import RetryPolicy, status_of_error
from ._sse import ServerSentEvent, StreamAssembler, StreamErrorEvent
from ._structured import forced_tool, output_schema, strict_tool_parameters


class OpenAIChat(HttpProvider):
    """A model behind an OpenAI-compatible Chat Completions API.

    Works against OpenAI and compatible servers (vLLM, Ollama, llama.cpp's server, LM Studio):
    pass ``base_url`` (e.g. ``http://localhost:11434/v1``); a local server needs no API key.
    The key and the base URL default to ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``.

    Tool-call arguments arrive as JSON text; text that is not a JSON object is kept in
    :attr:`ToolCall.raw_arguments` and answered with an error result the model sees. Usage
    includes cached prompt tokens and reasoning tokens when the server reports them.
    ``max_tokens_parameter`` names the field that carries ``max_output_tokens``: by default
    ``max_completion_tokens`` at OpenAI (its current models refuse ``max_tokens``) and
    ``max_tokens`` elsewhere, which every compatible server reads.
    """

    provider: ClassVar[str] = "OpenAI"
    api_key_variable: ClassVar[str] = "OPENAI_API_KEY"
    base_url_variable: ClassVar[str] = "OPENAI_BASE_URL"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    endpoint: ClassVar[str] = "/chat/completions"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        prices: PriceTable | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        max_tokens_parameter: str | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            retry=retry,
            prices=prices,
            headers=headers,
            transport=transport,
        )
        at_openai = self.base_url == self.default_base_url
        self.max_tokens_parameter = max_tokens_parameter or (
            "max_completion_tokens" if at_openai else "max_tokens"
        )

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def payload(self, request: InferenceRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": [chat_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [_wire_tool(t) for t in request.tools]
        body.update(_settings(request.settings, self.max_tokens_parameter, bool(request.tools)))
        return body | _structured(request)

    def parse(self, body: Mapping[str, Any]) -> InferenceResponse:
        choice = body["choices"][0]
        message = choice["message"]
        refusal = message.get("refusal")
        metadata: dict[str, JsonValue] = {}
        if body.get("id"):
            metadata["response_id"] = body["id"]
        return InferenceResponse(
            content=message.get("content") or refusal or "",
            tool_calls=[self._tool_call(c) for c in message.get("tool_calls") or ()],
            reasoning=chat_reasoning(message),
            usage=_usage(body.get("usage") or {}),
            finish_reason="refusal" if refusal else choice.get("finish_reason"),
            model=body.get("model"),
            metadata=metadata,
        )

    def _tool_call(self, wire: Mapping[str, Any]) -> ToolCall:
        if wire.get("type") == "custom":
            raise custom_tool_call(self.provider, (wire.get("custom") or {}).get("name"))
        return tool_call_from_chat(wire)

    def stream_payload(self, request: InferenceRequest) -> dict[str, Any]:
        return super().stream_payload(request) | {"stream_options": {"include_usage": True}}

    def assembler(self) -> StreamAssembler:
        return _ChunkAssembler()


class _ChunkAssembler(StreamAssembler):
    """``chat.completion.chunk`` events back into one ``chat.completion``: text, refusal and
    reasoning pieces joined, tool calls assembled by their ``index`` (id and name first, the
    arguments in pieces), the usage from the last chunk; ``data: [DONE]`` ends the stream."""

    def __init__(self) -> None:
        super().__init__()
        self.head: dict[str, Any] = {}
        self.content = ""
        self.refusal = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None

    def feed(self, event: ServerSentEvent) -> list[InferenceDelta]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = json.loads(event.data)
        error = chunk.get("error")
        if error is not None:
            raise StreamErrorEvent(*_stream_error(error), body=chunk)
        self.head = self.head or {k: chunk[k] for k in ("id", "model") if k in chunk}
        self.usage = chunk.get("usage") or self.usage
        deltas: list[InferenceDelta] = []
        for choice in chunk.get("choices") or ():
            deltas.extend(self._choice(choice))
        return deltas

    def _choice(self, choice: Mapping[str, Any]) -> list[InferenceDelta]:
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        delta = choice.get("delta") or {}
        for piece in delta.get("tool_calls") or ():
            self._call(piece)
        text, refusal = delta.get("content") or "", delta.get("refusal") or ""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        self.content += text
        self.refusal += refusal
        return self.emit(text=text + refusal, reasoning=reasoning)

    def _call(self, piece: Mapping[str, Any]) -> None:
        call = self.calls.setdefault(piece.get("index", len(self.calls)), {"arguments": ""})
        function = piece.get("function") or {}
        call["id"] = call.get("id") or piece.get("id")
        call["name"] = call.get("name") or function.get("name")
        call["arguments"] += function.get("arguments") or ""

    def body(self) -> Mapping[str, Any]:
        return self._body(with_calls=True)

    def partial_body(self) -> Mapping[str, Any]:
        """Tool calls are whole only once the choice has finished."""
        return self._body(with_calls=self.finish_reason is not None)

    def _body(self, *, with_calls: bool) -> Mapping[str, Any]:
        message: dict[str, Any] = {
            "content": self.content or None,
            "refusal": self.refusal or None,
            "reasoning_content": self.reasoning or None,
        }
        if with_calls and self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": _function(c)}
                for _, c in sorted(self.calls.items())
            ]
        choice = {"message": message, "finish_reason": self.finish_reason}
        return {**self.head, "choices": [choice], "usage": self.usage}


def custom_tool_call(provider: str, name: object) -> ProviderResponseError:
    """The error for a call of a custom (free-form text) tool: the loop runs function tools,
    whose arguments are JSON, so it has nothing to run the call with; failing says so, where
    a parse would answer the call with an error the user never sees."""
    return ProviderResponseError(
        f"{provider} answered with a call of the custom tool {name!r}, which agentledger "
        "cannot run: its tools are function tools, called with JSON arguments. Define the "
        "tool as a function tool (a Tool), not as a custom tool given through "
        "ModelSettings(extra=...).",
        provider=provider,
    )


def _function(call: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": call["name"], "arguments": call["arguments"]}


def _stream_error(error: object) -> tuple[int, str]:
    """The HTTP status an error chunk stands for, and its message."""
    if not isinstance(error, Mapping):
        return 500, str(error)
    status = status_of_error(_name(error.get("code")), _name(error.get("type")))
    return status, str(error.get("message") or error)


def _name(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _wire_tool(schema: ToolSchema) -> dict[str, Any]:
    function = {
        "name": schema.name,
        "description": schema.description,
        "parameters": strict_tool_parameters(schema),
    }
    return {"type": "function", "function": function | ({"strict": True} if schema.strict else {})}


def _structured(request: InferenceRequest) -> dict[str, Any]:
    """A named tool to call, and the response format, as Chat Completions takes them (over
    what ``extra`` says)."""
    wire: dict[str, Any] = {}
    name = forced_tool(request)
    if name is not None:
        wire["tool_choice"] = {"type": "function", "function": {"name": name}}
    response_format = request.settings.response_format
    if response_format is not None:
        output = output_schema(response_format)
        wire["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": output.name, "schema": output.schema, "strict": True},
        }
    return wire


def _settings(settings: ModelSettings, max_tokens_parameter: str, tools: bool) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        max_tokens_parameter: settings.max_output_tokens,
        "stop": list(settings.stop_sequences) or None,
        "tool_choice": settings.tool_choice if tools else None,
        "parallel_tool_calls": settings.parallel_tool_calls if tools else None,
    }
    return {k: v for k, v in wire.items() if v is not None} | settings.extra


def _usage(wire: Mapping[str, Any]) -> Usage:
    prompt = _details(wire, "prompt_tokens_details")
    completion = _details(wire, "completion_tokens_details")
    return Usage(
        input_tokens=wire.get("prompt_tokens") or 0,
        output_tokens=wire.get("completion_tokens") or 0,
        cache_read_tokens=prompt.get("cached_tokens") or 0,
        cache_write_tokens=prompt.get("cache_write_tokens") or 0,
        reasoning_tokens=completion.get("reasoning_tokens") or 0,
    )


def _details(wire: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    details = wire.get(key)
    return details if isinstance(details, Mapping) else {}

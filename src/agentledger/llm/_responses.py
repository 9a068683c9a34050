"""``OpenAIResponses``: OpenAI's Responses API, used statelessly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, cast

from pydantic import JsonValue

from .._values import (
    REASONING_ITEMS,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    ToolSchema,
    Usage,
    input_items,
    reasoning_summary,
    tool_call_from_item,
)
from ..errors import ConfigurationError
from ._http import HttpProvider
from ._openai import _details, _stream_error, custom_tool_call
from ._sse import ServerSentEvent, StreamAssembler, StreamErrorEvent
from ._structured import forced_tool, output_schema, strict_tool_parameters

_FINISH = {"max_output_tokens": "length"}
"""Why a response is incomplete, as the finish reason ``OpenAIChat`` gives for the same end."""


class OpenAIResponses(HttpProvider):
    """A model behind OpenAI's Responses API (``POST /responses``), without server-side state.

    Every request carries the whole conversation as ``input`` items, with ``store: false``:
    the system prompt travels as ``instructions``, tool calls and results as
    ``function_call`` and ``function_call_output`` items. Reasoning items come back encrypted
    (``include: ["reasoning.encrypted_content"]``); they are kept whole in the assistant
    message's metadata and sent back, before that message's tool calls, in every later
    request of the run, so a reasoning model keeps its chain of thought across tool calls.
    Reasoning summaries (ask for them with
    ``ModelSettings(extra={"reasoning": {"summary": "auto"}})``) become the step's
    ``reasoning``. Usage includes cached input tokens and reasoning tokens; an answer cut by
    ``max_output_tokens`` finishes with ``"length"``, as with :class:`OpenAIChat`. The key and
    the base URL default to ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``. The API has no stop
    sequences: a request that names some is refused before it is sent.
    """

    provider: ClassVar[str] = "OpenAI"
    api_key_variable: ClassVar[str] = "OPENAI_API_KEY"
    base_url_variable: ClassVar[str] = "OPENAI_BASE_URL"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    endpoint: ClassVar[str] = "/responses"

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def payload(self, request: InferenceRequest) -> dict[str, Any]:
        instructions = request.system_prompt()
        messages = request.messages.root[1:] if instructions is not None else request.messages
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "input": [item for m in messages for item in input_items(m)],
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if instructions:
            body["instructions"] = instructions
        if request.tools:
            body["tools"] = [_wire_tool(t) for t in request.tools]
        body.update(_settings(request.settings, bool(request.tools)))
        return body | _structured(request)

    def parse(self, body: Mapping[str, Any]) -> InferenceResponse:
        """The ``output_text`` parts of the message items joined (refusals after them), the
        ``function_call`` items as tool calls, the reasoning items' summaries as reasoning.
        Output items of other types (server tools' calls, ``web_search_call`` and the like,
        and any type this client does not know yet) carry nothing to read and are passed
        over, never a failure; a ``custom_tool_call``, which no agentledger tool can answer,
        is a clear error."""
        output = [_item(i) for i in body.get("output") or ()]
        parts = [p for i in output if i["type"] == "message" for p in i.get("content") or ()]
        text = "".join(p.get("text") or "" for p in parts if p["type"] == "output_text")
        refusal = "".join(p.get("refusal") or "" for p in parts if p["type"] == "refusal")
        custom = [i for i in output if i["type"] == "custom_tool_call"]
        if custom:
            raise custom_tool_call(self.provider, custom[0].get("name"))
        calls = [tool_call_from_item(i) for i in output if i["type"] == "function_call"]
        reasoning = [i for i in output if i["type"] == "reasoning"]
        metadata: dict[str, JsonValue] = {}
        if body.get("id"):
            metadata["response_id"] = body["id"]
        if reasoning:
            metadata[REASONING_ITEMS] = cast(list[JsonValue], reasoning)
        return InferenceResponse(
            content=text + refusal,
            tool_calls=calls,
            reasoning=reasoning_summary(reasoning),
            usage=_usage(body.get("usage") or {}),
            finish_reason="refusal" if refusal else _finish_reason(body, bool(calls)),
            model=body.get("model"),
            metadata=metadata,
        )

    def assembler(self) -> StreamAssembler:
        return _ResponseAssembler()


class _ResponseAssembler(StreamAssembler):
    """Responses stream events back into one ``response``: ``response.completed`` (or
    ``response.incomplete``) carries the whole response and ends the stream; text, refusal and
    reasoning summary deltas are yielded as they come; the output items, each from its
    ``response.output_item.added`` to its ``response.output_item.done``, make the answer as
    far as it came when the stream is cut. ``response.failed`` and ``error`` raise."""

    def __init__(self) -> None:
        super().__init__()
        self.head: dict[str, Any] = {}
        self.final: Mapping[str, Any] | None = None
        self.items: dict[int, dict[str, Any]] = {}
        self.whole: set[int] = set()
        self.texts: dict[int, str] = {}
        self.summaries: dict[tuple[int, int], str] = {}

    def feed(self, event: ServerSentEvent) -> list[InferenceDelta]:
        data = json.loads(event.data)
        kind = data.get("type") or event.event
        if kind in ("response.created", "response.in_progress"):
            response = data["response"]
            self.head = {k: response[k] for k in ("id", "model") if k in response}
        elif kind == "response.output_item.added":
            self.items[data["output_index"]] = dict(data["item"])
        elif kind == "response.output_item.done":
            self.items[data["output_index"]] = dict(data["item"])
            self.whole.add(data["output_index"])
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            return self._text(data["output_index"], data["delta"])
        elif kind == "response.reasoning_summary_text.delta":
            return self._summary(data["output_index"], data["summary_index"], data["delta"])
        elif kind in ("response.completed", "response.incomplete"):
            self.final = data["response"]
            self.done = True
        elif kind == "response.failed":
            raise StreamErrorEvent(*_stream_error(data["response"].get("error") or "failed"))
        elif kind == "error":
            raise StreamErrorEvent(*_stream_error(data.get("error") or data))
        return []

    def _text(self, index: int, delta: str) -> list[InferenceDelta]:
        self.texts[index] = self.texts.get(index, "") + delta
        return self.emit(text=delta)

    def _summary(self, index: int, part: int, delta: str) -> list[InferenceDelta]:
        """A summary part's text; parts after the first are set apart as ``parse`` joins them."""
        key = (index, part)
        separator = "\n\n" if delta and self.reasoning and not self.summaries.get(key) else ""
        self.summaries[key] = self.summaries.get(key, "") + delta
        return self.emit(reasoning=separator + delta)

    def body(self) -> Mapping[str, Any]:
        return self.final if self.final is not None else self.partial_body()

    def partial_body(self) -> Mapping[str, Any]:
        """Text and reasoning as far as they came; function calls only once whole."""
        output = [self._partial_item(i) for i in sorted(self.items)]
        return self.head | {"output": [i for i in output if i is not None], "status": None}

    def _partial_item(self, index: int) -> dict[str, Any] | None:
        item = self.items[index]
        if index in self.whole:
            return item
        if item.get("type") == "message":
            text = self.texts.get(index, "")
            return item | {"content": [{"type": "output_text", "text": text}]}
        if item.get("type") == "reasoning":
            parts = sorted((k[1], t) for k, t in self.summaries.items() if k[0] == index)
            return item | {"summary": [{"type": "summary_text", "text": t} for _, t in parts]}
        return None


def _wire_tool(schema: ToolSchema) -> dict[str, Any]:
    """A function tool, flat; ``strict`` only when the tool asks for it (its schema is then
    made strict), since a schema need not meet strict mode's rules (every property required,
    no additional properties)."""
    return {
        "type": "function",
        "name": schema.name,
        "description": schema.description,
        "parameters": strict_tool_parameters(schema),
        "strict": schema.strict,
    }


def _structured(request: InferenceRequest) -> dict[str, Any]:
    """A named tool to call, and the response format (``text.format``), as the Responses API
    takes them (over what ``extra`` says)."""
    wire: dict[str, Any] = {}
    name = forced_tool(request)
    if name is not None:
        wire["tool_choice"] = {"type": "function", "name": name}
    response_format = request.settings.response_format
    if response_format is not None:
        output = output_schema(response_format)
        json_schema = {"type": "json_schema", "name": output.name, "schema": output.schema}
        text = request.settings.extra.get("text")
        wire["text"] = (text if isinstance(text, dict) else {}) | {
            "format": json_schema | {"strict": True}
        }
    return wire


def _settings(settings: ModelSettings, tools: bool) -> dict[str, Any]:
    if settings.stop_sequences:
        raise ConfigurationError(
            f"the Responses API has no stop sequences, so {list(settings.stop_sequences)!r} "
            "cannot be sent: leave ModelSettings.stop_sequences empty, or use OpenAIChat "
            "(Chat Completions), which takes them."
        )
    wire: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_output_tokens": settings.max_output_tokens,
        "tool_choice": settings.tool_choice if tools else None,
        "parallel_tool_calls": settings.parallel_tool_calls if tools else None,
    }
    return {k: v for k, v in wire.items() if v is not None} | settings.extra


def _item(wire: object) -> dict[str, Any]:
    if not isinstance(wire, dict) or not isinstance(wire.get("type"), str):
        raise TypeError(f"an output item must be an object with a type, not {wire!r}")
    return wire


def _finish_reason(body: Mapping[str, Any], calls: bool) -> str | None:
    """``stop`` or ``tool_calls`` for a completed response, as Chat Completions says; why an
    incomplete one stopped; ``None`` while it is not finished."""
    status = body.get("status")
    if status == "completed":
        return "tool_calls" if calls else "stop"
    if status == "incomplete":
        reason = _details(body, "incomplete_details").get("reason")
        return _FINISH.get(reason, reason) if isinstance(reason, str) else "incomplete"
    return status if isinstance(status, str) else None


def _usage(wire: Mapping[str, Any]) -> Usage:
    return Usage(
        input_tokens=wire.get("input_tokens") or 0,
        output_tokens=wire.get("output_tokens") or 0,
        cache_read_tokens=_details(wire, "input_tokens_details").get("cached_tokens") or 0,
        cache_write_tokens=_details(wire, "input_tokens_details").get("cache_write_tokens") or 0,
        reasoning_tokens=_details(wire, "output_tokens_details").get("reasoning_tokens") or 0,
    )

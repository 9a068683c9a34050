"""``AnthropicMessages``: Anthropic's Messages API."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import httpx
from pydantic import JsonValue

from .._values import (
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    PriceTable,
    ToolSchema,
    Usage,
    anthropic_system,
    anthropic_turns,
    assistant_from_blocks,
)
from ..errors import ConfigurationError
from ._http import DEFAULT_TIMEOUT, HttpProvider
from ._retries import RetryPolicy, status_of_error
from ._sse import ServerSentEvent, StreamAssembler, StreamErrorEvent
from ._structured import forced_tool, output_schema, strict_tool_parameters

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none"}
CacheSetting = Literal["5m", "1h"] | None
_CACHE_CONTROL: dict[str, dict[str, str]] = {
    "5m": {"type": "ephemeral"},
    "1h": {"type": "ephemeral", "ttl": "1h"},
}
MAX_CACHE_BREAKPOINTS = 4
"""The API refuses a request with more ``cache_control`` blocks than this."""


class AnthropicMessages(HttpProvider):
    """A Claude model behind Anthropic's Messages API.

    The system prompt travels apart from the messages; tool calls and results are
    ``tool_use`` and ``tool_result`` blocks, and consecutive results share one user turn.
    Thinking blocks (enable them with ``ModelSettings(extra={"thinking": {...}})``) become the
    step's ``reasoning`` and are kept whole in the assistant message's metadata, from where
    they are sent back while the run lasts. Server tool blocks (``server_tool_use`` and the
    ``*_tool_result`` blocks of web search, web fetch, code execution, ...) and block types
    this client does not know are kept whole likewise (``KEPT_BLOCKS``) and go back in the
    order they came. An answer paused with ``stop_reason: "pause_turn"`` (a long server tool
    loop) is continued within the call: the request is sent again with the paused content as
    the last assistant turn, and the answers come back as one response (content and blocks
    in order, usage summed), streamed or not, at most ``max_continuations`` times. Usage
    counts cache writes and reads. The key and
    the base URL default to ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL``;
    ``max_tokens`` is the output limit when the request's settings name none (the API
    requires one).

    Prompt caching is on by default: ``cache="5m"`` marks the last tool definition, the system
    prompt and the end of the conversation before the run's trace with ``cache_control``, so
    the next step and the next turn read that prefix from the cache (at a tenth of the input
    price) instead of paying it again; ``cache="1h"`` keeps the entries an hour (the writes
    cost twice the input price instead of 1.25 times), ``cache=None`` sends no breakpoints.
    """

    provider: ClassVar[str] = "Anthropic"
    api_key_variable: ClassVar[str] = "ANTHROPIC_API_KEY"
    base_url_variable: ClassVar[str] = "ANTHROPIC_BASE_URL"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    endpoint: ClassVar[str] = "/v1/messages"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        prices: PriceTable | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        cache: CacheSetting = "5m",
    ) -> None:
        if cache is not None and cache not in _CACHE_CONTROL:
            raise ConfigurationError(
                f"AnthropicMessages(cache={cache!r}) is not a cache setting: pass cache='5m' "
                "(the default: entries live five minutes), cache='1h' (one hour) or cache=None "
                "(no prompt caching)."
            )
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
        self.max_tokens = max_tokens
        self.cache: CacheSetting = cache

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        return headers | {"x-api-key": api_key} if api_key else headers

    def payload(self, request: InferenceRequest) -> dict[str, Any]:
        system = anthropic_system(request.messages)
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.settings.max_output_tokens or self.max_tokens,
            "messages": anthropic_turns(request.messages),
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [_wire_tool(t) for t in request.tools]
        body.update(_settings(request.settings, bool(request.tools)))
        body.update(_structured(request, body))
        _check_sampling(body)
        _add_cache_breakpoints(body, self.cache)
        return body

    def parse(self, body: Mapping[str, Any]) -> InferenceResponse:
        """The message's blocks read as an assistant message reads them (text joined, thinking
        as reasoning, ``tool_use`` blocks as tool calls; thinking, server tool and unknown
        blocks kept whole in the metadata, so that an unknown block type never fails the
        parse and everything goes back as it came), with the usage and the stop reason."""
        message = assistant_from_blocks(body["content"])
        metadata: dict[str, JsonValue] = {}
        if body.get("id"):
            metadata["response_id"] = body["id"]
        return InferenceResponse(
            content=message.content,
            tool_calls=message.tool_calls,
            reasoning=message.reasoning,
            usage=_usage(body.get("usage") or {}),
            finish_reason=body.get("stop_reason"),
            model=body.get("model"),
            metadata=metadata | message.metadata,
        )

    def continuation(
        self, payload: dict[str, Any], body: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """After ``stop_reason: "pause_turn"`` (a server tool loop ran long), the same request
        with the paused content, as it came, as the last (assistant) turn: the API carries
        the turn on from there."""
        if body.get("stop_reason") != "pause_turn":
            return None
        turn = {"role": "assistant", "content": list(body["content"])}
        return payload | {"messages": [*payload["messages"], turn]}

    def joined(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> Mapping[str, Any]:
        """The continuation's message, with the paused content before its own and the usage
        of both."""
        usage = _summed(before.get("usage") or {}, after.get("usage") or {})
        return dict(after) | {"content": [*before["content"], *after["content"]], "usage": usage}

    def assembler(self) -> StreamAssembler:
        return _EventAssembler()


class _EventAssembler(StreamAssembler):
    """Messages stream events back into one ``message``: ``message_start`` opens it (with the
    input usage), each content block is built from its ``content_block_start`` and deltas
    (``text_delta``, ``citations_delta``, ``input_json_delta``, ``thinking_delta``,
    ``signature_delta``; others are ignored) until its
    ``content_block_stop``, ``message_delta`` brings the stop reason and the output usage,
    ``message_stop`` ends it; ``ping`` is ignored and ``error`` raises."""

    def __init__(self) -> None:
        super().__init__()
        self.message: dict[str, Any] = {"content": []}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}
        self.whole: set[int] = set()

    def feed(self, event: ServerSentEvent) -> list[InferenceDelta]:
        data = json.loads(event.data)
        kind = data.get("type") or event.event
        if kind == "message_start":
            self.message = dict(data["message"])
        elif kind == "content_block_start":
            self.blocks[data["index"]] = dict(data["content_block"])
        elif kind == "content_block_delta":
            return self._delta(data["index"], data["delta"])
        elif kind == "content_block_stop":
            self._stop(data["index"])
        elif kind == "message_delta":
            self._message_delta(data)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = data.get("error") or {}
            message = str(error.get("message") or error)
            raise StreamErrorEvent(status_of_error(error.get("type")), message, body=data)
        return []

    def _delta(self, index: int, delta: Mapping[str, Any]) -> list[InferenceDelta]:
        block = self.blocks[index]
        kind = delta["type"]
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            return self.emit(text=delta["text"])
        if kind == "thinking_delta":
            separator = "\n\n" if self.reasoning and not block.get("thinking") else ""
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            return self.emit(reasoning=separator + delta["thinking"] if delta["thinking"] else "")
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        elif kind == "input_json_delta":
            self.json[index] = self.json.get(index, "") + delta["partial_json"]
        return []

    def _stop(self, index: int) -> None:
        """A block is whole; a tool call's (client or server) input is its JSON pieces."""
        block = self.blocks[index]
        if "input" in block and self.json.get(index, "").strip():
            block["input"] = json.loads(self.json[index])
        self.whole.add(index)

    def _message_delta(self, data: Mapping[str, Any]) -> None:
        self.message.update(data.get("delta") or {})
        usage = {k: v for k, v in (data.get("usage") or {}).items() if v is not None}
        self.message["usage"] = {**(self.message.get("usage") or {}), **usage}

    def body(self) -> Mapping[str, Any]:
        return self.message | {"content": [self.blocks[i] for i in sorted(self.blocks)]}

    def partial_body(self) -> Mapping[str, Any]:
        """Text and thinking as far as they came; tool calls (client or server) only once
        whole."""
        blocks = [
            self.blocks[i]
            for i in sorted(self.blocks)
            if "input" not in self.blocks[i] or i in self.whole
        ]
        return self.message | {"content": blocks, "stop_reason": None}


def _add_cache_breakpoints(body: dict[str, Any], cache: CacheSetting) -> None:
    """Marks, in a built payload, where the cache should end: the last tool definition, the
    system prompt (sent as a text block to carry the mark) and the last block of the
    conversation before the run's trace, in that order (the order of the prompt), while the
    API's limit of four ``cache_control`` blocks allows (marks already in the payload, from
    ``ModelSettings(extra=...)``, count). The conversation mark pays on the next step of the
    run and on the next turn, whose prompts start with that prefix."""
    if cache is None:
        return
    spare = MAX_CACHE_BREAKPOINTS - _marked(body)
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = [{"type": "text", "text": system}]
    places = [
        _last_place(body, "tools"),
        _last_place(body, "system"),
        _conversation_end(body.get("messages") or []),
    ]
    for blocks, index in (p for p in places if p is not None):
        if spare > 0 and "cache_control" not in blocks[index]:
            blocks[index] = blocks[index] | {"cache_control": dict(_CACHE_CONTROL[cache])}
            spare -= 1


def _last_place(body: dict[str, Any], key: str) -> tuple[list[Any], int] | None:
    """Where the last block of ``body[key]`` is, in a copy of the list: tools or system
    blocks given in ``ModelSettings(extra=...)`` are the caller's, and stay unmarked."""
    blocks = body.get(key)
    if not isinstance(blocks, list) or not blocks or not isinstance(blocks[-1], dict):
        return None
    body[key] = list(blocks)
    return body[key], len(blocks) - 1


def _conversation_end(turns: list[dict[str, Any]]) -> tuple[list[Any], int] | None:
    """Where the last block of the conversation before the run's trace is. The messages carry
    no mark of where the trace begins, so this is the last block of the last user turn that
    holds no tool result: the new user message. The trace that follows it is the model's tool
    calls and their results (user turns of ``tool_result`` blocks, where the instruction that
    asks for a final answer joins the last results)."""
    for turn in reversed(turns):
        content = turn.get("content")
        if turn.get("role") != "user" or not isinstance(content, list) or not content:
            continue
        if all(isinstance(b, dict) and b.get("type") != "tool_result" for b in content):
            return content, len(content) - 1
    return None


def _marked(body: Mapping[str, Any]) -> int:
    """How many blocks of the payload carry a ``cache_control`` already."""
    system = body.get("system")
    blocks = [
        *(body.get("tools") or []),
        *(system if isinstance(system, list) else []),
        *(b for turn in body.get("messages") or [] for b in _content(turn)),
    ]
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def _content(turn: Mapping[str, Any]) -> list[Any]:
    content = turn.get("content")
    return content if isinstance(content, list) else []


def _wire_tool(schema: ToolSchema) -> dict[str, Any]:
    wire = {
        "name": schema.name,
        "description": schema.description,
        "input_schema": strict_tool_parameters(schema),
    }
    return wire | {"strict": True} if schema.strict else wire


def _structured(request: InferenceRequest, body: Mapping[str, Any]) -> dict[str, Any]:
    """A named tool to call (``{"type": "tool"}``, keeping ``disable_parallel_tool_use``), and
    the response format as structured outputs take it: ``output_config.format`` (kept beside
    whatever else ``extra`` puts in ``output_config``)."""
    wire: dict[str, Any] = {}
    name = forced_tool(request)
    if name is not None:
        wire["tool_choice"] = dict(body.get("tool_choice") or {}) | {"type": "tool", "name": name}
    response_format = request.settings.response_format
    if response_format is not None:
        output = output_schema(response_format)
        config = body.get("output_config")
        wire["output_config"] = (dict(config) if isinstance(config, Mapping) else {}) | {
            "format": {"type": "json_schema", "schema": output.schema}
        }
    return wire


def _settings(settings: ModelSettings, tools: bool) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "stop_sequences": list(settings.stop_sequences) or None,
    }
    if tools and (settings.tool_choice or settings.parallel_tool_calls is False):
        choice: dict[str, Any] = {"type": _TOOL_CHOICE.get(settings.tool_choice or "auto", "tool")}
        if settings.parallel_tool_calls is False and choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
        wire["tool_choice"] = choice
    return {k: v for k, v in wire.items() if v is not None} | settings.extra


_SAMPLING = ("temperature", "top_p", "top_k")
_CLAUDE = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?=-|$)")


def _generation(model: str) -> tuple[str, tuple[int, int]] | None:
    """A Claude model's family and version (``claude-opus-4-7-20260416``: opus, 4.7)."""
    found = _CLAUDE.search(model.rsplit("/", 1)[-1])
    if found is None:
        return None
    return found[1], (int(found[2]), int(found[3] or 0))


def _check_sampling(body: Mapping[str, Any]) -> None:
    """Refuses, before anything is sent, sampling settings the model would answer 400 to:
    Claude Opus 4.7 and later take none of ``temperature``, ``top_p`` and ``top_k``; Opus 4.1
    and later, Sonnet and Haiku 4.5 and later take ``temperature`` or ``top_p``, not both."""
    model = str(body["model"])
    generation = _generation(model)
    sent = [name for name in _SAMPLING if body.get(name) is not None]
    if generation is None or not sent:
        return
    family, version = generation
    if family == "opus" and version >= (4, 7):
        raise ConfigurationError(
            f"{model} does not accept {' or '.join(sent)}: Anthropic removed the sampling "
            "settings from Claude Opus 4.7 and later. Leave ModelSettings(temperature=..., "
            "top_p=...) and their extra= keys unset for this model."
        )
    newer = version >= (4, 1) if family == "opus" else version >= (4, 5)
    if newer and {"temperature", "top_p"} <= set(sent):
        raise ConfigurationError(
            f"{model} accepts temperature or top_p, not both: set only one of them in "
            "ModelSettings (or extra=)."
        )


def _usage(wire: Mapping[str, Any]) -> Usage:
    """Anthropic counts cache writes and reads apart from ``input_tokens``; agentledger's
    input counts them all. ``cache_creation`` splits the writes by lifetime, and
    ``output_tokens_details`` names the thinking part of the output."""
    written = wire.get("cache_creation_input_tokens") or 0
    read = wire.get("cache_read_input_tokens") or 0
    hour = _details(wire, "cache_creation").get("ephemeral_1h_input_tokens") or 0
    thinking = _details(wire, "output_tokens_details").get("thinking_tokens") or 0
    return Usage(
        input_tokens=(wire.get("input_tokens") or 0) + written + read,
        output_tokens=wire.get("output_tokens") or 0,
        cache_read_tokens=read,
        cache_write_tokens=written,
        cache_write_1h_tokens=min(hour, written),
        reasoning_tokens=thinking,
    )


def _summed(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Two usage objects added up, counts nested in details objects too; what is not a
    count (``service_tier``) is the later one's."""
    summed = dict(before) | dict(after)
    for key, value in after.items():
        earlier = before.get(key)
        if isinstance(value, Mapping) and isinstance(earlier, Mapping):
            summed[key] = _summed(earlier, value)
        elif isinstance(value, int) and isinstance(earlier, int) and not isinstance(value, bool):
            summed[key] = earlier + value
    return summed


def _details(wire: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    details = wire.get(key)
    return details if isinstance(details, Mapping) else {}

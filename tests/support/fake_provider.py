"""A model provider on loopback: a real HTTP server that answers from a script, in the wire
formats of OpenAI's Chat Completions and Responses APIs and Anthropic's Messages API, and
records every request.

The response bodies follow the shapes of the providers' published API references, so the
clients are tested through real sockets against what the real services send.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, a JSON body (or raw text) and headers, after a delay."""

    body: Mapping[str, Any] | str | Streamed
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Streamed:
    """One scripted streamed answer: server-sent events (text, sent as they are), one every
    ``interval`` seconds, in a chunked body. ``cut_after`` closes the connection after that
    many events, without ending the body, as a dropped connection does."""

    events: tuple[str, ...]
    interval: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class FakeProvider:
    """``url`` is the base URL to give a client (``/v1`` is in the OpenAI paths already)."""

    def __init__(self, responder: Callable[[Received], Reply] | None = None) -> None:
        self.responder = responder
        """What answers a request once the script is used up (by default, a 500 saying so)."""
        self.requests: list[Received] = []
        self.disconnects: list[float] = []
        """When (``time.monotonic()``) a client closed a stream before its end."""
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def push(self, *replies: Reply) -> FakeProvider:
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(received)
        return Reply({"error": {"message": "the fake provider's script is exhausted"}}, 500)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a stream before reading its very end resets the connection:
        no error of the server's, and no traceback in the output of the test that runs then."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(provider: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once on a kept-alive socket

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            received = Received("POST", self.path, dict(self.headers.items()), body)
            reply = provider._next(received)
            time.sleep(reply.delay)
            if isinstance(reply.body, Streamed):
                self._stream(reply.status, reply.body)
                return
            payload = (
                reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            ).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a read timeout test)

        def _stream(self, status: int, streamed: Streamed) -> None:
            self.send_response(status)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for number, event in enumerate(streamed.events):
                    if number == streamed.cut_after:
                        self.close_connection = True
                        return
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    time.sleep(streamed.interval)
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                provider.disconnects.append(time.monotonic())
                self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


# -- OpenAI Chat Completions ------------------------------------------------------------------


def openai_tool_call(name: str, arguments: str | Mapping[str, Any], call_id: str = "") -> dict:
    """A tool call as the API sends it: arguments are JSON *text*."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": call_id or f"call_{next(_ids):06d}",
        "type": "function",
        "function": {"name": name, "arguments": text},
    }


def openai_completion(
    content: str | None = None,
    tool_calls: Iterable[Mapping[str, Any]] = (),
    *,
    model: str = "gpt-4o-mini-2024-07-18",
    finish_reason: str | None = None,
    prompt_tokens: int = 20,
    completion_tokens: int = 10,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A ``chat.completion`` object, shaped as in OpenAI's API reference."""
    calls = list(tool_calls)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{next(_ids):06d}",
        "object": "chat.completion",
        "created": 1741569952,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_44709d6fcb",
    }


def openai_error(message: str, *, kind: str = "invalid_request_error", code: str = "") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code or None}}


# -- OpenAI Responses -------------------------------------------------------------------------


def responses_text(text: str) -> dict[str, Any]:
    """A ``message`` output item with one ``output_text`` part."""
    return {
        "type": "message",
        "id": f"msg_{next(_ids):06d}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_function_call(
    name: str, arguments: str | Mapping[str, Any], call_id: str = ""
) -> dict[str, Any]:
    """A ``function_call`` output item: arguments are JSON *text*."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "function_call",
        "id": f"fc_{next(_ids):06d}",
        "call_id": call_id or f"call_{next(_ids):06d}",
        "name": name,
        "arguments": text,
        "status": "completed",
    }


def responses_reasoning(*summary: str, encrypted: str = "gAAAAABo-enc") -> dict[str, Any]:
    """A ``reasoning`` output item with its summary parts and encrypted content."""
    return {
        "type": "reasoning",
        "id": f"rs_{next(_ids):06d}",
        "summary": [{"type": "summary_text", "text": t} for t in summary],
        "encrypted_content": encrypted,
    }


def responses_response(
    *output: Mapping[str, Any],
    model: str = "gpt-5-mini-2025-08-07",
    incomplete: str | None = None,
    input_tokens: int = 20,
    output_tokens: int = 10,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A ``response`` object, shaped as in OpenAI's Responses API reference; ``incomplete``
    names why an incomplete one stopped (``max_output_tokens``, ``content_filter``)."""
    return {
        "id": f"resp_{next(_ids):06d}",
        "object": "response",
        "created_at": 1741476542,
        "status": "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None,
        "model": model,
        "output": [dict(item) for item in output],
        "parallel_tool_calls": True,
        "store": False,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        },
    }


# -- Anthropic Messages -----------------------------------------------------------------------


def anthropic_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def anthropic_tool_use(name: str, arguments: Mapping[str, Any], call_id: str = "") -> dict:
    return {
        "type": "tool_use",
        "id": call_id or f"toolu_{next(_ids):06d}",
        "name": name,
        "input": dict(arguments),
    }


def anthropic_thinking(thinking: str, signature: str = "EqQBCgIYAhIM1gbcDa9GJwZA") -> dict:
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def anthropic_message(
    *content: Mapping[str, Any],
    model: str = "claude-sonnet-4-5-20250929",
    stop_reason: str | None = None,
    input_tokens: int = 20,
    output_tokens: int = 10,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
) -> dict[str, Any]:
    """A ``message`` object, shaped as in Anthropic's Messages API reference."""
    uses_tools = any(block["type"] == "tool_use" for block in content)
    return {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason or ("tool_use" if uses_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens,
            "cache_read_input_tokens": cache_read_input_tokens,
        },
    }


def anthropic_error(message: str, *, kind: str = "invalid_request_error") -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- streams: the same answers, as each API streams them ---------------------------------------


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(data: Mapping[str, Any] | str, event: str = "") -> str:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {text}\n\n"


def openai_chunks(
    completion: Mapping[str, Any], *, size: int = 4, interleave: bool = False
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects a streamed ``completion`` arrives in: reasoning,
    then text, in pieces of ``size`` characters; each tool call's id and name, then its
    arguments in pieces (all calls' first, then the pieces by turns when ``interleave``); the
    finish reason; the usage alone in the last chunk (``include_usage``)."""
    head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for name in ("reasoning_content", "reasoning"):
        chunks += [chunk({name: p}) for p in _pieces(message.get(name) or "", size)]
    chunks += [chunk({"content": p}) for p in _pieces(message.get("content") or "", size)]
    chunks += [chunk({"refusal": p}) for p in _pieces(message.get("refusal") or "", size)]
    calls = message.get("tool_calls") or []
    starts = [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        for i, c in enumerate(calls)
    ]
    arguments = [
        [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in _pieces(c["function"]["arguments"], size)
        ]
        for i, c in enumerate(calls)
    ]
    if interleave:
        chunks += starts
        for turn in itertools.zip_longest(*arguments):
            chunks += [c for c in turn if c is not None]
    else:
        for start, pieces in zip(starts, arguments, strict=True):
            chunks += [start, *pieces]
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def openai_stream(completion: Mapping[str, Any], **options: Any) -> list[str]:
    """``completion`` as the server-sent events of a stream, ``[DONE]`` last."""
    return [sse(c) for c in openai_chunks(completion, **options)] + [sse("[DONE]")]


def anthropic_events(message: Mapping[str, Any], *, size: int = 4) -> list[dict[str, Any]]:
    """The events a streamed ``message`` arrives in, as the Messages API sends them."""
    usage = dict(message["usage"])
    opening = dict(message) | {"content": [], "stop_reason": None, "stop_sequence": None}
    opening["usage"] = usage | {"output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": opening}]
    events.append({"type": "ping"})
    for index, block in enumerate(message["content"]):
        events += _anthropic_block(index, block, size)
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _anthropic_block(index: int, block: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    kind = block["type"]
    empty = {
        "text": {"type": "text", "text": ""},
        "thinking": {"type": "thinking", "thinking": ""},
        "tool_use": {**block, "input": {}},
    }.get(kind, dict(block))
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], size)]
    elif kind == "thinking":
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], size)
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        text = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(text, size)]
    return [
        {"type": "content_block_start", "index": index, "content_block": empty},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def anthropic_stream(message: Mapping[str, Any], **options: Any) -> list[str]:
    """``message`` as the server-sent events of a stream, each named by its type."""
    return [sse(e, e["type"]) for e in anthropic_events(message, **options)]


def responses_events(response: Mapping[str, Any], *, size: int = 4) -> list[dict[str, Any]]:
    """The events a streamed ``response`` arrives in, as the Responses API sends them: the
    response created, each output item added, its text, summary or arguments in pieces of
    ``size`` characters, the item done; then the whole response, completed or incomplete."""
    opening = dict(response) | {"status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(response["output"]):
        events += _responses_item(index, item, size)
    kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": kind, "response": dict(response)})
    return [e | {"sequence_number": n} for n, e in enumerate(events)]


def _responses_item(index: int, item: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    kind, at = item["type"], {"item_id": item["id"], "output_index": index}
    empty = dict(item) | {
        "message": {"content": [], "status": "in_progress"},
        "reasoning": {"summary": [], "encrypted_content": None},
        "function_call": {"arguments": "", "status": "in_progress"},
    }.get(kind, {})
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": index, "item": empty}
    ]
    if kind == "message":
        for part_index, part in enumerate(item["content"]):
            events += [
                {
                    "type": "response.output_text.delta",
                    **at,
                    "content_index": part_index,
                    "delta": p,
                }
                for p in _pieces(part["text"], size)
            ]
            events.append(
                {
                    "type": "response.output_text.done",
                    **at,
                    "content_index": part_index,
                    "text": part["text"],
                }
            )
    elif kind == "reasoning":
        for part_index, part in enumerate(item["summary"]):
            events += [
                {
                    "type": "response.reasoning_summary_text.delta",
                    **at,
                    "summary_index": part_index,
                    "delta": p,
                }
                for p in _pieces(part["text"], size)
            ]
    elif kind == "function_call":
        events += [
            {"type": "response.function_call_arguments.delta", **at, "delta": p}
            for p in _pieces(item["arguments"], size)
        ]
        events.append(
            {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"]}
        )
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def responses_stream(response: Mapping[str, Any], **options: Any) -> list[str]:
    """``response`` as the server-sent events of a stream, each named by its type."""
    return [sse(e, e["type"]) for e in responses_events(response, **options)]

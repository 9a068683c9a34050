"""A model provider on loopback: a real HTTP server that answers from a script, in the wire
formats of OpenAI's Chat Completions and Anthropic's Messages APIs, and records every request.

The response bodies follow the shapes of the providers' published API references, so the
clients are tested through real sockets against what the real services send.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a status, a JSON body (or raw text) and headers, after a delay."""

    body: Mapping[str, Any] | str
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


class FakeProvider:
    """``url`` is the base URL to give a client (``/v1`` is in the OpenAI paths already)."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
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
        return Reply({"error": {"message": "the fake provider's script is exhausted"}}, 500)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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

"""What a provider's failure says and whether it is tried again: the server's ``x-should-retry``,
error bodies sent with a 200, and the details of the error object (type, code, param, request
id) carried on the error. httpx's MockTransport is the network, for ``complete`` and
``acomplete`` alike."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from agentledger import (
    Message,
    Messages,
    ProviderServerError,
)
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceRequest,
    InferenceResponse,
    OpenAIChat,
    RetryPolicy,
)
from support.fake_provider import (
    anthropic_error,
    anthropic_message,
    anthropic_text,
    openai_completion,
    openai_error,
)

Answer = httpx.Response | dict[str, Any]
Complete = Callable[[HttpProvider, InferenceRequest], InferenceResponse]
REQUEST = InferenceRequest(messages=Messages.of(Message.user("Hi")))


class Server:
    """Answers each request with the next scripted answer (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers: deque[Answer] = deque(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.popleft() if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, dict):
            return httpx.Response(200, json=answer)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def status(code: int, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.Response(code, content=json.dumps(body).encode(), headers=headers)


def ok(api: str) -> dict[str, Any]:
    if api == "openai":
        return openai_completion("Hello")
    return anthropic_message(anthropic_text("Hello"))


def error_body(api: str, message: str, kind: str) -> dict[str, Any]:
    return (
        openai_error(message, kind=kind) if api == "openai" else anthropic_error(message, kind=kind)
    )


def provider(api: str, server: Server, sleeps: list[float]) -> HttpProvider:
    async def async_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    retry = RetryPolicy(max_retries=2, sleep=sleeps.append, async_sleep=async_sleep, jitter=False)
    cls = OpenAIChat if api == "openai" else AnthropicMessages
    model = "gpt-4o-mini" if api == "openai" else "claude-sonnet-4-5"
    return cls(
        model,
        base_url="http://llm.test",
        api_key="sk-test-key-1234",
        retry=retry,
        transport=httpx.MockTransport(server),
    )


@pytest.fixture(params=["openai", "anthropic"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["complete", "acomplete"])
def complete(request: pytest.FixtureRequest) -> Complete:
    if request.param == "complete":
        return lambda llm, inference: llm.complete(inference)

    def run(llm: HttpProvider, inference: InferenceRequest) -> InferenceResponse:
        answer: Awaitable[InferenceResponse] = llm.acomplete(inference)
        return asyncio.run(answer)  # type: ignore[arg-type]

    return run


# -- x-should-retry ----------------------------------------------------------------------------


def test_x_should_retry_false_on_a_500_is_not_retried(api: str, complete: Complete) -> None:
    server = Server(
        status(500, error_body(api, "boom", "api_error"), **{"x-should-retry": "false"})
    )
    sleeps: list[float] = []
    with pytest.raises(ProviderServerError, match="boom") as caught:
        complete(provider(api, server, sleeps), REQUEST)
    assert len(server.requests) == 1
    assert sleeps == []
    assert caught.value.retryable is False


def test_x_should_retry_true_on_a_400_is_retried(api: str, complete: Complete) -> None:
    server = Server(
        status(
            400, error_body(api, "try again", "invalid_request_error"), **{"x-should-retry": "true"}
        ),
        ok(api),
    )
    sleeps: list[float] = []
    response = complete(provider(api, server, sleeps), REQUEST)
    assert response.content == "Hello"
    assert len(server.requests) == 2
    assert len(sleeps) == 1
    assert response.metadata["retries"] == [{"attempt": 1, "status": 400, "delay_s": 0.5}]

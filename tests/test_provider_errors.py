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

from agentledger import Message, Messages, ProviderError
from agentledger.errors import (
    ConfigurationError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
)
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
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


# -- a 200 that carries an error -------------------------------------------------------------------

ERROR_200 = {
    "openai-server-error": (
        {"error": {"message": "The server had an error", "type": "server_error"}},
        ProviderServerError,
    ),
    "openai-invalid-request": (
        {
            "error": {
                "message": "Bad messages",
                "type": "invalid_request_error",
                "param": "messages",
            }
        },
        ProviderRequestError,
    ),
    "anthropic-api-error": (
        {"type": "error", "error": {"type": "api_error", "message": "The server had an error"}},
        ProviderServerError,
    ),
    "anthropic-invalid-request": (
        {"type": "error", "error": {"type": "invalid_request_error", "message": "Bad messages"}},
        ProviderRequestError,
    ),
}


@pytest.mark.parametrize("case", list(ERROR_200))
def test_a_200_carrying_an_error_body_raises_the_error_it_means(
    case: str, complete: Complete
) -> None:
    body, kind = ERROR_200[case]
    api = case.split("-")[0]
    server = Server(status(200, body, **{"x-request-id": "req_200err"}))
    sleeps: list[float] = []
    with pytest.raises(kind) as caught:
        complete(provider(api, server, sleeps), REQUEST)
    error = caught.value
    assert type(error) is kind
    message = body["error"]["message"]
    assert message in str(error)
    assert "cannot read" not in str(error)
    assert "request id: req_200err" in str(error)
    assert error.request_id == "req_200err"
    assert error.retryable is (kind is ProviderServerError)
    assert len(server.requests) == (3 if kind is ProviderServerError else 1)


def test_a_200_error_body_then_an_answer_is_retried_to_success(api: str) -> None:
    server = Server(status(200, error_body(api, "The server had an error", "api_error")), ok(api))
    sleeps: list[float] = []
    response = provider(api, server, sleeps).complete(REQUEST)
    assert response.content == "Hello"
    assert len(server.requests) == 2


# -- the error object's details ----------------------------------------------------------------


def test_a_provider_error_carries_type_code_param_and_request_id(complete: Complete) -> None:
    body = {
        "error": {
            "message": "This model's maximum context length is 128000 tokens.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    server = Server(status(400, body, **{"x-request-id": "req_abc123"}))
    with pytest.raises(ProviderRequestError) as caught:
        complete(provider("openai", server, []), REQUEST)
    error = caught.value
    assert (error.type, error.code, error.param, error.request_id) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
        "req_abc123",
    )
    assert (
        "type: invalid_request_error, code: context_length_exceeded, param: messages, "
        "request id: req_abc123" in str(error)
    )


def test_anthropic_errors_carry_the_request_id_header_and_type(complete: Complete) -> None:
    server = Server(
        status(
            529, anthropic_error("Overloaded", kind="overloaded_error"), **{"request-id": "req_011"}
        )
    )
    with pytest.raises(ProviderServerError) as caught:
        complete(provider("anthropic", server, []), REQUEST)
    error = caught.value
    assert (error.type, error.code, error.param, error.request_id) == (
        "overloaded_error",
        None,
        None,
        "req_011",
    )
    assert "type: overloaded_error, request id: req_011" in str(error)
    assert error.attempts == 3


def test_a_provider_error_without_details_has_none(complete: Complete) -> None:
    server = Server(httpx.Response(502, text="Bad gateway"))
    with pytest.raises(ProviderError) as caught:
        complete(provider("openai", server, []), REQUEST)
    error = caught.value
    assert (error.type, error.code, error.param, error.request_id) == (None, None, None, None)
    assert "request id" not in str(error)


@pytest.mark.parametrize("where", ["code", "type"])
def test_a_429_for_an_exhausted_quota_says_so_and_is_not_retried(
    where: str, complete: Complete
) -> None:
    error = {"message": "You exceeded your current quota.", "type": "requests", "code": None}
    error[where] = "insufficient_quota"
    server = Server(status(429, {"error": error}, **{"retry-after": "1"}))
    sleeps: list[float] = []
    with pytest.raises(ProviderRateLimitError) as caught:
        complete(provider("openai", server, sleeps), REQUEST)
    assert len(server.requests) == 1
    assert sleeps == []
    assert "out of quota" in str(caught.value)
    assert "rate limiting" not in str(caught.value)
    assert caught.value.retryable is False


def test_a_plain_429_is_still_rate_limiting_and_retried(complete: Complete) -> None:
    body = {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    }
    server = Server(status(429, body), ok("openai"))
    response = complete(provider("openai", server, []), REQUEST)
    assert response.content == "Hello"
    assert len(server.requests) == 2


# -- sampling settings the model does not accept ---------------------------------------------------


def anthropic_at(model: str, server: Server) -> AnthropicMessages:
    return AnthropicMessages(
        model,
        base_url="http://llm.test",
        api_key="sk-test-key-1234",
        transport=httpx.MockTransport(server),
    )


def sampled(**settings: Any) -> InferenceRequest:
    return REQUEST.model_copy(update={"settings": ModelSettings(**settings)})


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-opus-4-7-20260416", "claude-opus-5"])
@pytest.mark.parametrize(
    "settings",
    [{"temperature": 0.2}, {"top_p": 0.9}, {"extra": {"top_k": 40}}],
    ids=["temperature", "top_p", "top_k"],
)
def test_a_sampling_setting_a_model_does_not_take_is_refused_before_anything_is_sent(
    model: str, settings: dict[str, Any]
) -> None:
    server = Server(ok("anthropic"))
    with pytest.raises(ConfigurationError, match=f"{model} does not accept"):
        anthropic_at(model, server).complete(sampled(**settings))
    assert server.requests == []


@pytest.mark.parametrize(
    "model",
    ["claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-opus-4-1", "claude-opus-4-6"],
)
def test_temperature_and_top_p_together_are_refused_where_the_model_takes_only_one(
    model: str,
) -> None:
    server = Server(ok("anthropic"))
    with pytest.raises(ConfigurationError, match="temperature or top_p, not both"):
        anthropic_at(model, server).complete(sampled(temperature=0.2, top_p=0.9))
    assert server.requests == []
    anthropic_at(model, server).complete(sampled(temperature=0.2))
    assert json.loads(server.requests[0].content)["temperature"] == 0.2
    assert "top_p" not in json.loads(server.requests[0].content)


@pytest.mark.parametrize("model", ["claude-opus-4-7", "claude-sonnet-4-5"])
def test_a_model_is_sent_no_sampling_setting_when_none_is_set(model: str) -> None:
    server = Server(ok("anthropic"))
    assert anthropic_at(model, server).complete(REQUEST).content == "Hello"
    body = json.loads(server.requests[0].content)
    assert not {"temperature", "top_p", "top_k"} & set(body)


@pytest.mark.parametrize("model", ["claude-3-7-sonnet-20250219", "claude-sonnet-4-20250514"])
def test_older_models_still_take_temperature_and_top_p_together(model: str) -> None:
    server = Server(ok("anthropic"))
    anthropic_at(model, server).complete(sampled(temperature=0.2, top_p=0.9))
    body = json.loads(server.requests[0].content)
    assert (body["temperature"], body["top_p"]) == (0.2, 0.9)

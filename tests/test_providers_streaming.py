"""The HTTP providers streaming, synchronously (``stream``) and on an event loop (``astream``,
``acomplete``): deltas as the answer comes, then the whole response, equal to the unstreamed
one; retries before the first delta; a cut after it raises ``ProviderStreamCutError`` with
the answer so far; closing a stream early closes its HTTP response. With httpx's
MockTransport as the network seam, and through real sockets on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import httpx
import pytest

from agentledger import Message, Messages, ProviderError, Role, ToolCall, ToolSchema
from agentledger.errors import (
    ConfigurationError,
    ProviderAuthenticationError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderStreamCutError,
)
from agentledger.llm import (
    AnthropicMessages,
    AsyncLLM,
    HttpProvider,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    OpenAIChat,
    OpenAIResponses,
    Price,
    PriceTable,
    RetryPolicy,
    StreamingLLM,
    StreamItem,
)
from support.fake_provider import (
    FakeProvider,
    Reply,
    Streamed,
    anthropic_error,
    anthropic_events,
    anthropic_message,
    anthropic_stream,
    anthropic_text,
    anthropic_thinking,
    anthropic_tool_use,
    openai_chunks,
    openai_completion,
    openai_error,
    openai_stream,
    openai_tool_call,
    responses_function_call,
    responses_reasoning,
    responses_response,
    responses_stream,
    responses_text,
    sse,
)

KEY = "sk-stream-Z8yX3wV6uT1sR4qP"
OPENAI_MODEL = "gpt-4o-mini-2024-07-18"
ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
RESPONSES_MODEL = "gpt-5-mini-2025-08-07"
PRICES = PriceTable(
    version="test",
    as_of=date(2030, 1, 1),
    models={
        OPENAI_MODEL: Price(input=2.0, output=10.0, cache_read=0.5, cache_write=2.5),
        ANTHROPIC_MODEL: Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
        RESPONSES_MODEL: Price(input=0.25, output=2.0, cache_read=0.025),
    },
)
WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


# -- the two APIs, and the answers each streams -----------------------------------------------


@dataclass(frozen=True)
class Api:
    cls: type[HttpProvider]
    name: str
    url: str
    stream: Callable[..., list[str]]
    """The server-sent events of a whole answer body."""
    text: Callable[[str], dict[str, Any]]
    """A whole answer body that says ``text``."""
    error: Callable[[str], dict[str, Any]]


OPENAI = Api(
    OpenAIChat,
    "OpenAI",
    "http://llm.test/v1",
    openai_stream,
    lambda text: openai_completion(text),
    lambda message: openai_error(message),
)
ANTHROPIC = Api(
    AnthropicMessages,
    "Anthropic",
    "http://llm.test",
    anthropic_stream,
    lambda text: anthropic_message(anthropic_text(text)),
    lambda message: anthropic_error(message),
)
RESPONSES = Api(
    OpenAIResponses,
    "OpenAI",
    "http://llm.test/v1",
    responses_stream,
    lambda text: responses_response(responses_text(text)),
    lambda message: openai_error(message),
)
APIS = [
    pytest.param(OPENAI, id="openai"),
    pytest.param(RESPONSES, id="openai-responses"),
    pytest.param(ANTHROPIC, id="anthropic"),
]

ANSWER = "Paris has 22C and sunshine; London has 17C and a light drizzle."


def openai_reasoning() -> dict[str, Any]:
    body = openai_completion(ANSWER, reasoning_tokens=12, cached_tokens=8, prompt_tokens=40)
    body["choices"][0]["message"]["reasoning_content"] = "Both cities were asked about."
    return body


ANSWERS = {
    "openai-text": (OPENAI, lambda: openai_completion(ANSWER, prompt_tokens=31)),
    "openai-tool-calls": (
        OPENAI,
        lambda: openai_completion(
            "Let me look.",
            [
                openai_tool_call("get_weather", {"city": "Paris"}, "call_a"),
                openai_tool_call("get_weather", {"city": "London"}, "call_b"),
                openai_tool_call("get_weather", {"city": "Saint-Étienne-du-Rouvray"}, "call_c"),
            ],
        ),
    ),
    "openai-reasoning-and-cache": (OPENAI, openai_reasoning),
    "openai-refusal": (
        OPENAI,
        lambda: openai_completion(None) | {"choices": [_refusal("I can't help with that.")]},
    ),
    "responses-text": (RESPONSES, lambda: responses_response(responses_text(ANSWER))),
    "responses-tool-calls": (
        RESPONSES,
        lambda: responses_response(
            responses_text("Let me look."),
            responses_function_call("get_weather", {"city": "Paris"}, "call_a"),
            responses_function_call("get_weather", {"city": "Saint-Étienne-du-Rouvray"}, "call_b"),
        ),
    ),
    "responses-reasoning-and-cache": (
        RESPONSES,
        lambda: responses_response(
            responses_reasoning("Both cities were asked about.", "Paris first, then London."),
            responses_function_call("get_weather", {"city": "Paris"}, "call_c"),
            responses_reasoning("", encrypted="gAAAA-second"),
            responses_text(ANSWER),
            input_tokens=2000,
            cached_tokens=1500,
            output_tokens=300,
            reasoning_tokens=256,
        ),
    ),
    "responses-incomplete": (
        RESPONSES,
        lambda: responses_response(
            responses_reasoning("Long thoughts."),
            responses_text("Paris has 22C and"),
            incomplete="max_output_tokens",
        ),
    ),
    "anthropic-text": (
        ANTHROPIC,
        lambda: anthropic_message(anthropic_text(ANSWER), output_tokens=17),
    ),
    "anthropic-tool-calls": (
        ANTHROPIC,
        lambda: anthropic_message(
            anthropic_text("Let me look."),
            anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_a"),
            anthropic_tool_use("get_weather", {"city": "London", "days": [1, 2]}, "toolu_b"),
        ),
    ),
    "anthropic-thinking-and-cache": (
        ANTHROPIC,
        lambda: anthropic_message(
            anthropic_thinking("Both cities were asked about.", "sig-one"),
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            anthropic_thinking("Paris first, then London.", "sig-two"),
            anthropic_text(ANSWER),
            anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_c"),
            cache_creation_input_tokens=100,
            cache_read_input_tokens=2000,
            output_tokens=80,
        ),
    ),
}


def _refusal(text: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "refusal": text}
    return {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}


# -- the network seam --------------------------------------------------------------------------


class Events(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A streamed body: the events, then the end of the body, or a broken connection when
    ``cut``. Remembers whether the client closed it."""

    def __init__(self, events: list[str], *, cut: bool = False) -> None:
        self.events = events
        self.cut = cut
        self.sent = 0
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        for event in self.events:
            self.sent += 1
            yield event.encode()
        if self.cut:
            raise httpx.RemoteProtocolError("peer closed connection without sending the body")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk
            await asyncio.sleep(0.001)  # a network that takes its time: a cancel lands here

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


Answer = dict[str, Any] | list[str] | Events | httpx.Response | type[httpx.TransportError]


class Server:
    """Answers each request with the next answer (a JSON body, events, a response or a
    transport error to raise), the last one repeating; records the requests."""

    def __init__(self, *answers: Answer) -> None:
        self.answers: deque[Answer] = deque(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.popleft() if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, type):
            raise answer(f"scripted {answer.__name__}", request=request)
        if isinstance(answer, httpx.Response):  # a fresh copy: a response is read only once
            return httpx.Response(
                answer.status_code, headers=answer.headers, content=answer.content
            )
        if isinstance(answer, list):
            answer = Events(answer)
        if isinstance(answer, Events):
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=answer)
        return httpx.Response(200, json=answer)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def first_text(api: Api) -> int:
    """The index of the first event that carries text, in a stream of ``api.text(...)``."""
    return 1 if api is OPENAI else 3


def status(code: int, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.Response(code, json=body, headers=headers)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def connect(sleeps: list[float]) -> Iterator[Callable[..., Any]]:
    """``connect(api, server, **options)``: a provider of ``api`` talking to ``server``."""
    made: list[HttpProvider] = []

    async def async_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    def factory(api: Api, server: Server, **options: Any) -> Any:
        options.setdefault("retry", RetryPolicy(sleep=sleeps.append, async_sleep=async_sleep))
        provider = api.cls(
            "m",
            base_url=api.url,
            api_key=KEY,
            prices=PRICES,
            transport=httpx.MockTransport(server),
            **options,
        )
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        asyncio.run(provider.aclose())


def ask(tools: tuple[ToolSchema, ...] = (WEATHER,)) -> InferenceRequest:
    return InferenceRequest(messages=Messages.of(Message.user("Weather?")), tools=tools)


MODES = ["sync", "async"]


def complete(provider: HttpProvider, request: InferenceRequest, mode: str) -> InferenceResponse:
    if mode == "sync":
        return provider.complete(request)
    return asyncio.run(provider.acomplete(request))


def drain(
    provider: HttpProvider, request: InferenceRequest, mode: str
) -> tuple[list[StreamItem], Exception | None]:
    """What a stream yielded, and the error it raised (or ``None``)."""
    items: list[StreamItem] = []
    if mode == "sync":
        try:
            items.extend(provider.stream(request))
        except Exception as exc:
            return items, exc
        return items, None

    async def consume() -> Exception | None:
        try:
            async for item in provider.astream(request):
                items.append(item)
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(consume())
    return items, error


def streamed(
    provider: HttpProvider, request: InferenceRequest, mode: str
) -> tuple[list[InferenceDelta], InferenceResponse]:
    items, error = drain(provider, request, mode)
    assert error is None, error
    *deltas, final = items
    assert all(isinstance(d, InferenceDelta) for d in deltas)
    assert isinstance(final, InferenceResponse)
    return deltas, final  # type: ignore[return-value]


# -- streamed equals unstreamed -----------------------------------------------------------------


def test_both_providers_implement_the_streaming_and_async_protocols(
    connect: Callable[..., Any],
) -> None:
    for api in (OPENAI, RESPONSES, ANTHROPIC):
        provider = connect(api, Server(api.text("hi")))
        assert isinstance(provider, StreamingLLM)
        assert isinstance(provider, AsyncLLM)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", list(ANSWERS), ids=list(ANSWERS))
def test_a_streamed_answer_equals_the_same_answer_unstreamed(
    connect: Callable[..., Any], answer: str, mode: str
) -> None:
    api, make = ANSWERS[answer]
    body = make()
    options = {"interleave": True} if api is OPENAI else {}
    server = Server(body, api.stream(body, **options))
    provider = connect(api, server)

    whole = complete(provider, ask(), mode)
    deltas, final = streamed(provider, ask(), mode)

    assert final == whole
    assert whole.cost_usd is not None
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == whole.content
    assert "".join(d.reasoning for d in deltas) == (whole.reasoning or "")
    assert all(d.text or d.reasoning for d in deltas)


def test_interleaved_tool_call_pieces_are_assembled_by_their_index(
    connect: Callable[..., Any],
) -> None:
    body = ANSWERS["openai-tool-calls"][1]()
    chunks = openai_chunks(body, size=3, interleave=True)
    server = Server([sse(c) for c in chunks] + [sse("[DONE]")])

    _, final = streamed(connect(OPENAI, server), ask(), "sync")

    assert final.tool_calls == (
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="get_weather", arguments={"city": "London"}),
        ToolCall(id="call_c", name="get_weather", arguments={"city": "Saint-Étienne-du-Rouvray"}),
    )


@pytest.mark.parametrize(
    ("api", "extra"),
    [
        pytest.param(
            OPENAI, {"stream": True, "stream_options": {"include_usage": True}}, id="openai"
        ),
        pytest.param(ANTHROPIC, {"stream": True}, id="anthropic"),
        pytest.param(RESPONSES, {"stream": True}, id="openai-responses"),
    ],
)
def test_a_stream_asks_for_the_same_request_as_complete_and_for_a_stream(
    connect: Callable[..., Any], api: Api, extra: dict[str, Any]
) -> None:
    body = api.text("ok")
    server = Server(body, api.stream(body))
    provider = connect(api, server)

    provider.complete(ask())
    streamed(provider, ask(), "sync")

    unstreamed_body, streamed_body = server.bodies()
    assert streamed_body == unstreamed_body | extra


# -- failures before the first delta: retried as complete retries them ---------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_failures_before_the_first_delta_are_retried_as_complete_retries_them(
    connect: Callable[..., Any], sleeps: list[float], api: Api, mode: str
) -> None:
    body = api.text(ANSWER)
    events = api.stream(body)
    server = Server(
        status(503, api.error("overloaded"), **{"retry-after": "2"}),
        httpx.ConnectError,
        Events([], cut=True),
        Events(events[:1], cut=True),  # a cut before any text
        events[:1],  # a stream that ended before any text
        events,
    )
    policy = RetryPolicy(
        max_retries=5,
        initial_delay=0.5,
        jitter=False,
        sleep=sleeps.append,
        async_sleep=_record(sleeps),
    )

    deltas, final = streamed(connect(api, server, retry=policy), ask(), mode)

    assert "".join(d.text for d in deltas) == ANSWER
    assert len(server.requests) == 6
    assert sleeps == [2.0, 1.0, 2.0, 4.0, 8.0]
    assert final.metadata["retries"] == [
        {"attempt": 1, "status": 503, "delay_s": 2.0},
        {"attempt": 2, "status": None, "delay_s": 1.0},
        {"attempt": 3, "status": None, "delay_s": 2.0},
        {"attempt": 4, "status": None, "delay_s": 4.0},
        {"attempt": 5, "status": None, "delay_s": 8.0},
    ]


def _record(sleeps: list[float]) -> Callable[[float], Any]:
    async def async_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return async_sleep


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("code", "kind", "attempts"),
    [
        (400, ProviderRequestError, 1),
        (401, ProviderAuthenticationError, 1),
        (429, ProviderRateLimitError, 3),
        (500, ProviderServerError, 3),
    ],
)
def test_a_stream_refused_with_a_status_raises_what_complete_raises(
    connect: Callable[..., Any],
    api: Api,
    mode: str,
    code: int,
    kind: type[ProviderError],
    attempts: int,
) -> None:
    server = Server(status(code, api.error(f"the server's own words {KEY}")))
    provider = connect(
        api, server, retry=RetryPolicy(max_retries=2, sleep=lambda _: None, async_sleep=_record([]))
    )

    items, error = drain(provider, ask(), mode)
    with pytest.raises(kind) as unstreamed:
        provider.complete(ask())

    assert items == []
    assert type(error) is kind
    assert str(error) == str(unstreamed.value)
    assert KEY not in str(error)
    assert "the server's own words" in str(error)
    assert error.attempts == attempts  # type: ignore[union-attr]


# -- failures after the first delta: not retried -------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ended", ["connection-broken", "body-ended"])
@pytest.mark.parametrize("api", APIS)
def test_a_stream_cut_after_text_raises_stream_cut_with_the_text_so_far(
    connect: Callable[..., Any], sleeps: list[float], api: Api, ended: str, mode: str
) -> None:
    body = api.text(ANSWER)
    events = api.stream(body, size=5)
    cut = first_text(api) + 3
    server = Server(Events(events[:cut], cut=ended == "connection-broken"), events)

    items, error = drain(connect(api, server), ask(), mode)

    assert isinstance(error, ProviderStreamCutError)
    assert [i.text for i in items] == ["Paris", " has ", "22C a"]
    partial = error.partial
    assert isinstance(partial, InferenceResponse)
    assert partial.content == "".join(i.text for i in items)  # type: ignore[union-attr]
    assert partial.content == "Paris has 22C a"
    assert partial.finish_reason is None
    assert partial.tool_calls == ()
    assert error.retryable is False
    assert error.provider == api.name
    assert len(server.requests) == 1
    assert sleeps == []
    assert "after part of the answer had been streamed" in str(error)


@pytest.mark.parametrize("mode", MODES)
def test_an_anthropic_cut_keeps_the_thinking_so_far_and_only_the_whole_tool_calls(
    connect: Callable[..., Any], mode: str
) -> None:
    body = anthropic_message(
        anthropic_thinking("Paris first.", "sig"),
        anthropic_text("Looking."),
        anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_whole"),
        anthropic_tool_use("get_weather", {"city": "London"}, "toolu_half"),
    )
    events = anthropic_events(body)
    half = max(i for i, e in enumerate(events) if e.get("index") == 3 and "delta" in e)
    server = Server(Events([sse(e, e["type"]) for e in events[:half]], cut=True))

    _, error = drain(connect(ANTHROPIC, server), ask(), mode)

    assert isinstance(error, ProviderStreamCutError)
    partial = error.partial
    assert isinstance(partial, InferenceResponse)
    assert (partial.reasoning, partial.content) == ("Paris first.", "Looking.")
    assert partial.tool_calls == (
        ToolCall(id="toolu_whole", name="get_weather", arguments={"city": "Paris"}),
    )
    assert partial.usage.input_tokens == 20


def test_a_thinking_block_cut_before_its_signature_is_kept_as_reasoning_but_never_sent_back(
    connect: Callable[..., Any],
) -> None:
    body = anthropic_message(anthropic_thinking("Paris first, then London.", "sig"))
    events = anthropic_events(body)
    signature = next(i for i, e in enumerate(events) if "signature" in e.get("delta", {}))
    server = Server(Events([sse(e, e["type"]) for e in events[:signature]], cut=True), body)
    provider = connect(ANTHROPIC, server)

    _, error = drain(provider, ask(), "sync")
    partial = error.partial  # type: ignore[union-attr]
    provider.complete(
        InferenceRequest(
            messages=Messages.of(
                Message.user("Weather?"),
                Message(role=Role.ASSISTANT, content="Par", metadata=partial.metadata),
                Message.user("go on"),
            )
        )
    )

    assert partial.reasoning == "Paris first, then London."
    sent = server.bodies()[1]["messages"][1]
    assert sent == {"role": "assistant", "content": [{"type": "text", "text": "Par"}]}


@pytest.mark.parametrize("mode", MODES)
def test_an_openai_cut_keeps_no_tool_call_before_the_choice_finished(
    connect: Callable[..., Any], mode: str
) -> None:
    body = ANSWERS["openai-tool-calls"][1]()
    chunks = openai_chunks(body)
    server = Server(Events([sse(c) for c in chunks[:-3]], cut=True))

    _, error = drain(connect(OPENAI, server), ask(), mode)

    assert isinstance(error, ProviderStreamCutError)
    assert error.partial.content == "Let me look."  # type: ignore[attr-defined]
    assert error.partial.tool_calls == ()  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("api", "error_event", "kind"),
    [
        pytest.param(
            ANTHROPIC,
            sse(anthropic_error("Overloaded", kind="overloaded_error"), "error"),
            ProviderServerError,
            id="anthropic-overloaded",
        ),
        pytest.param(
            ANTHROPIC,
            sse(anthropic_error("Too many", kind="rate_limit_error"), "error"),
            ProviderRateLimitError,
            id="anthropic-rate-limit",
        ),
        pytest.param(
            OPENAI,
            sse({"error": {"message": "The server had an error", "type": "server_error"}}),
            ProviderServerError,
            id="openai-server-error",
        ),
        pytest.param(
            RESPONSES,
            sse(
                {
                    "type": "response.failed",
                    "response": {
                        "status": "failed",
                        "error": {"code": "server_error", "message": "The model failed"},
                    },
                },
                "response.failed",
            ),
            ProviderServerError,
            id="responses-failed",
        ),
        pytest.param(
            RESPONSES,
            sse(
                {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down"},
                "error",
            ),
            ProviderRateLimitError,
            id="responses-error-event",
        ),
    ],
)
def test_an_error_event_after_text_raises_the_matching_error_without_a_retry(
    connect: Callable[..., Any], api: Api, error_event: str, kind: type[ProviderError], mode: str
) -> None:
    events = api.stream(api.text(ANSWER))
    server = Server([*events[: first_text(api) + 1], error_event], events)

    items, error = drain(connect(api, server), ask(), mode)

    assert [i.text for i in items] == ["Pari"]
    assert type(error) is kind
    assert "error event in the stream" in str(error)
    assert "after part of the answer had been streamed" in str(error)
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_error_event_before_any_text_is_retried_when_its_kind_is(
    connect: Callable[..., Any], sleeps: list[float], mode: str
) -> None:
    events = anthropic_stream(anthropic_message(anthropic_text(ANSWER)))
    overloaded = sse(anthropic_error("Overloaded", kind="overloaded_error"), "error")
    server = Server([*events[:2], overloaded], events)

    _, final = streamed(connect(ANTHROPIC, server), ask(), mode)

    assert final.content == ANSWER
    assert len(server.requests) == 2
    assert len(sleeps) == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_error_event_that_retrying_cannot_fix_is_raised_at_once(
    connect: Callable[..., Any], mode: str
) -> None:
    refused = sse(anthropic_error("prompt is too long", kind="invalid_request_error"), "error")
    server = Server([refused])

    items, error = drain(connect(ANTHROPIC, server), ask(), mode)

    assert items == []
    assert isinstance(error, ProviderRequestError)
    assert "prompt is too long" in str(error)
    assert len(server.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_an_event_that_cannot_be_read_is_a_provider_response_error(
    connect: Callable[..., Any], api: Api
) -> None:
    server = Server([sse("{not json", "content_block_delta")])

    _, error = drain(connect(api, server), ask(), "sync")

    assert isinstance(error, ProviderResponseError)
    assert "streamed an event this client cannot read" in str(error)


# -- closing early -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_closing_a_stream_early_closes_its_http_response(
    connect: Callable[..., Any], api: Api
) -> None:
    body = Events(api.stream(api.text(ANSWER * 20), size=2))
    provider = connect(api, Server(body))

    stream = provider.stream(ask())
    first = next(iter(stream))
    stream.close()  # type: ignore[attr-defined]

    assert isinstance(first, InferenceDelta)
    assert body.closed
    assert body.sent < len(body.events)


@pytest.mark.parametrize("api", APIS)
def test_aclose_and_cancelling_the_task_close_the_http_response(
    connect: Callable[..., Any], api: Api
) -> None:
    closed_by_aclose = Events(api.stream(api.text(ANSWER * 20), size=2))
    closed_by_cancel = Events(api.stream(api.text(ANSWER * 20), size=2))
    provider = connect(api, Server(closed_by_aclose, closed_by_cancel))

    async def scenario() -> None:
        stream = provider.astream(ask())
        await anext(stream)
        await stream.aclose()
        assert closed_by_aclose.closed

        started = asyncio.Event()

        async def consume() -> None:
            async for _ in provider.astream(ask()):
                started.set()  # the task waits on the stream when it is cancelled

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert closed_by_cancel.closed

    asyncio.run(scenario())


def test_an_asynchronous_transport_alone_cannot_serve_a_synchronous_call() -> None:
    class AsyncOnly(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json=openai_completion("async"))

    provider = OpenAIChat("m", base_url=OPENAI.url, transport=AsyncOnly())

    assert asyncio.run(provider.acomplete(ask())).content == "async"
    with pytest.raises(ConfigurationError, match="asynchronous transport only"):
        provider.complete(ask())
    asyncio.run(provider.aclose())


# -- through real sockets, on loopback -----------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def loopback(api: Api, fake: FakeProvider, **options: Any) -> HttpProvider:
    url = fake.url if api is ANTHROPIC else fake.openai_url
    policy = RetryPolicy(jitter=False, sleep=lambda _: None, async_sleep=_record([]))
    options.setdefault("retry", policy)
    return api.cls("m", base_url=url, prices=PRICES, **options)


LOOPBACK = [
    pytest.param(OPENAI, "openai-tool-calls", id="openai"),
    pytest.param(ANTHROPIC, "anthropic-thinking-and-cache", id="anthropic"),
    pytest.param(RESPONSES, "responses-reasoning-and-cache", id="openai-responses"),
]


@pytest.mark.parametrize(("api", "answer"), LOOPBACK)
def test_on_loopback_a_streamed_answer_equals_the_unstreamed_one(
    fake: FakeProvider, api: Api, answer: str
) -> None:
    body = ANSWERS[answer][1]()
    fake.push(Reply(body), Reply(Streamed(tuple(api.stream(body)))))

    with loopback(api, fake) as provider:
        whole = provider.complete(ask())
        deltas, final = streamed(provider, ask(), "sync")

    assert final == whole
    assert "".join(d.text for d in deltas) == whole.content
    assert fake.requests[1].body["stream"] is True


@pytest.mark.parametrize(("api", "answer"), LOOPBACK)
def test_on_loopback_astream_and_acomplete_give_the_same_answer(
    fake: FakeProvider, api: Api, answer: str
) -> None:
    body = ANSWERS[answer][1]()
    fake.push(Reply(body), Reply(Streamed(tuple(api.stream(body)))))

    async def scenario() -> tuple[InferenceResponse, list[StreamItem]]:
        async with loopback(api, fake) as provider:
            whole = await provider.acomplete(ask())
            return whole, [item async for item in provider.astream(ask())]

    whole, items = asyncio.run(scenario())

    assert items[-1] == whole
    assert "".join(i.text for i in items[:-1]) == whole.content  # type: ignore[union-attr]


@pytest.mark.parametrize("api", APIS)
def test_on_loopback_a_dropped_connection_is_retried_before_text_and_cut_after(
    fake: FakeProvider, api: Api
) -> None:
    events = tuple(api.stream(api.text(ANSWER)))
    first = first_text(api) + 1
    fake.push(
        Reply(Streamed(events, cut_after=0)),
        Reply(Streamed(events)),
        Reply(Streamed(events, cut_after=first)),
    )

    with loopback(api, fake) as provider:
        _, final = streamed(provider, ask(), "sync")
        items, error = drain(provider, ask(), "sync")

    assert final.content == ANSWER
    assert final.metadata["retries"] == [{"attempt": 1, "status": None, "delay_s": 0.5}]
    assert isinstance(error, ProviderStreamCutError)
    assert error.partial.content == "Pari"  # type: ignore[attr-defined]
    assert [i.text for i in items] == ["Pari"]
    assert len(fake.requests) == 3


@pytest.mark.parametrize("way", ["close", "aclose", "cancel"])
@pytest.mark.parametrize("api", APIS)
def test_on_loopback_stopping_a_stream_drops_the_connection_promptly(
    fake: FakeProvider, api: Api, way: str
) -> None:
    events = tuple(api.stream(api.text(ANSWER * 20), size=2))
    fake.push(Reply(Streamed(events, interval=0.02)), Reply(api.text("still works")))
    provider = loopback(api, fake)

    if way == "close":
        stream = provider.stream(ask())
        next(iter(stream))
        stream.close()  # type: ignore[attr-defined]
        stopped = time.monotonic()
        assert provider.complete(ask()).content == "still works"
        provider.close()
    else:
        stopped = asyncio.run(_stop_async(provider, way))

    deadline = time.monotonic() + 5
    while not fake.disconnects and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.disconnects, "the server went on streaming to a client that stopped"
    assert fake.disconnects[0] - stopped < 1.0


async def _stop_async(provider: HttpProvider, way: str) -> float:
    async with provider:
        if way == "aclose":
            stream = provider.astream(ask())
            await anext(stream)
            await stream.aclose()  # type: ignore[attr-defined]
        else:
            started = asyncio.Event()

            async def consume() -> None:
                async for _ in provider.astream(ask()):
                    started.set()

            task = asyncio.create_task(consume())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        stopped = time.monotonic()
        assert (await provider.acomplete(ask())).content == "still works"
        return stopped

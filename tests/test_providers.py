"""The HTTP providers, one mapping at a time, with httpx's MockTransport as the network seam:
requests in each API's wire format, responses back into provider-neutral values, retries and
their delays, errors that say what to do, configuration from the environment, keys kept out of
everything, and prices."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import logging
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentledger import Message, Messages, ProviderError, Role, ToolCall, ToolSchema, Usage
from agentledger.errors import (
    ConfigurationError,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderTimeoutError,
)
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    OpenAIChat,
    OpenAIResponses,
    Price,
    PriceTable,
    RetryPolicy,
    ScriptedLLM,
)
from support.fake_provider import (
    anthropic_error,
    anthropic_message,
    anthropic_text,
    anthropic_thinking,
    anthropic_tool_use,
    openai_completion,
    openai_error,
    openai_tool_call,
    responses_response,
    responses_text,
)
from support.tool_schemas import ADD, WEATHER

KEY = "sk-unit-Q7rT2vX9wK4mN8pL3sD6"
"""A distinctive API key: it must never show up anywhere but in the request headers."""


# -- the network seam ------------------------------------------------------------------------

Answer = dict[str, Any] | httpx.Response | type[httpx.TransportError]


class Server:
    """The handler of an ``httpx.MockTransport``: answers each request with the next scripted
    answer (a JSON body for a 200, a response, or a transport error class to raise), the last
    one repeating for ever, and records every request."""

    def __init__(self, *answers: Answer) -> None:
        assert answers, "a server needs at least one answer"
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
        return httpx.Response(200, json=answer)

    @property
    def body(self) -> dict[str, Any]:
        """The JSON body of the one request sent."""
        assert len(self.requests) == 1, f"expected one request, got {len(self.requests)}"
        return json.loads(self.requests[0].content)


def status(code: int, body: dict[str, Any] | str = "", **headers: str) -> httpx.Response:
    if isinstance(body, str):
        return httpx.Response(code, text=body or f"HTTP {code}", headers=headers)
    return httpx.Response(code, json=body, headers=headers)


@dataclass(frozen=True)
class Api:
    """What the tests need to know of one provider."""

    cls: type[HttpProvider]
    name: str
    model: str
    local_url: str
    path: str
    key_variable: str
    url_variable: str
    default_url: str
    answer: Callable[[str], dict[str, Any]]
    error: Callable[[str], dict[str, Any]]


OPENAI = Api(
    cls=OpenAIChat,
    name="OpenAI",
    model="gpt-4o-mini",
    local_url="http://llm.test/v1",
    path="/v1/chat/completions",
    key_variable="OPENAI_API_KEY",
    url_variable="OPENAI_BASE_URL",
    default_url="https://api.openai.com/v1",
    answer=lambda text: openai_completion(text),
    error=lambda message: openai_error(message),
)
ANTHROPIC = Api(
    cls=AnthropicMessages,
    name="Anthropic",
    model="claude-sonnet-4-5",
    local_url="http://llm.test",
    path="/v1/messages",
    key_variable="ANTHROPIC_API_KEY",
    url_variable="ANTHROPIC_BASE_URL",
    default_url="https://api.anthropic.com",
    answer=lambda text: anthropic_message(anthropic_text(text)),
    error=lambda message: anthropic_error(message),
)
RESPONSES = Api(
    cls=OpenAIResponses,
    name="OpenAI",
    model="gpt-5-mini",
    local_url="http://llm.test/v1",
    path="/v1/responses",
    key_variable="OPENAI_API_KEY",
    url_variable="OPENAI_BASE_URL",
    default_url="https://api.openai.com/v1",
    answer=lambda text: responses_response(responses_text(text)),
    error=lambda message: openai_error(message),
)
APIS = [
    pytest.param(OPENAI, id="openai"),
    pytest.param(RESPONSES, id="openai-responses"),
    pytest.param(ANTHROPIC, id="anthropic"),
]


@pytest.fixture
def sleeps() -> list[float]:
    """The delays a provider's RetryPolicy asked for: nothing really sleeps."""
    return []


Connect = Callable[..., Any]
Complete = Callable[[HttpProvider, InferenceRequest], InferenceResponse]


@pytest.fixture(params=["complete", "acomplete"])
def complete(request: pytest.FixtureRequest) -> Complete:
    """``complete(provider, request)``: the provider's answer, by ``complete`` or, on an event
    loop, by ``acomplete``: the two share every retry and error."""
    if request.param == "complete":
        return lambda provider, inference: provider.complete(inference)
    return lambda provider, inference: asyncio.run(provider.acomplete(inference))


def _async(sleep: Callable[[float], None]) -> Callable[[float], Awaitable[None]]:
    async def async_sleep(seconds: float) -> None:
        sleep(seconds)

    return async_sleep


@pytest.fixture
def connect(sleeps: list[float]) -> Iterator[Connect]:
    """``connect(api, server, **options)``: a provider of ``api`` at its local URL with ``KEY``,
    talking to ``server``, recording its sleeps in ``sleeps``; closed after the test."""
    made: list[HttpProvider] = []

    def factory(api: Api, server: Server, **options: Any) -> Any:
        options.setdefault("base_url", api.local_url)
        options.setdefault("api_key", KEY)
        policy = options.get("retry") or RetryPolicy(sleep=sleeps.append)
        options["retry"] = dataclasses.replace(policy, async_sleep=_async(policy.sleep))
        provider = api.cls(
            options.pop("model", api.model), transport=httpx.MockTransport(server), **options
        )
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def ask(
    *messages: Message,
    tools: tuple[ToolSchema, ...] = (),
    model: str | None = None,
    **settings: Any,
) -> InferenceRequest:
    return InferenceRequest(
        messages=Messages.of(*messages) if messages else Messages.of(Message.user("Hi")),
        tools=tools,
        model=model,
        settings=ModelSettings(**settings),
    )


def call(call_id: str, name: str = "get_weather", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# -- OpenAI: requests --------------------------------------------------------------------------


def with_parsed_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The wire messages with each tool call's JSON-text arguments parsed (after checking they
    are text, as the API wants them)."""
    parsed = []
    for message in messages:
        if "tool_calls" in message:
            calls = []
            for wire in message["tool_calls"]:
                arguments = wire["function"]["arguments"]
                assert isinstance(arguments, str)
                calls.append(
                    {**wire, "function": {**wire["function"], "arguments": json.loads(arguments)}}
                )
            message = {**message, "tool_calls": calls}
        parsed.append(message)
    return parsed


def test_openai_sends_the_system_prompt_and_every_message_in_order(connect: Connect) -> None:
    server = Server(openai_completion("Done."))
    llm = connect(OPENAI, server)

    llm.complete(
        ask(
            Message.system("You are terse."),
            Message.user("Weather in Paris and London?"),
            Message.assistant(
                "Checking both.", tool_calls=[call("c1", city="Paris"), call("c2", city="London")]
            ),
            Message.tool("22C", tool_call_id="c1", name="get_weather"),
            Message.tool("18C", tool_call_id="c2", name="get_weather"),
            Message.assistant("Paris is warmer."),
            Message.user("Thanks."),
        )
    )

    assert with_parsed_arguments(server.body["messages"]) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and London?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "London"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "22C"},
        {"role": "tool", "tool_call_id": "c2", "content": "18C"},
        {"role": "assistant", "content": "Paris is warmer."},
        {"role": "user", "content": "Thanks."},
    ]


def test_openai_sends_null_content_for_an_assistant_message_that_only_calls_tools(
    connect: Connect,
) -> None:
    server = Server(openai_completion("Done."))
    connect(OPENAI, server).complete(
        ask(
            Message.user("Weather?"),
            Message.assistant(tool_calls=[call("c1", city="Oslo")]),
            Message.tool("3C", tool_call_id="c1"),
        )
    )

    assistant = server.body["messages"][1]
    assert assistant["content"] is None
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1"]


def test_openai_sends_back_arguments_that_were_not_json_as_an_empty_object(
    connect: Connect,
) -> None:
    server = Server(openai_completion("Done."))
    broken = ToolCall(id="c1", name="get_weather", raw_arguments='{"city": "Par')

    connect(OPENAI, server).complete(
        ask(
            Message.user("Weather?"),
            Message.assistant(tool_calls=[broken]),
            Message.tool("Error: not a JSON object", tool_call_id="c1"),
        )
    )

    assert server.body["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_openai_sends_a_user_messages_name(connect: Connect) -> None:
    server = Server(openai_completion("Hi Ada."))
    named = Message(role=Role.USER, content="Hi", name="ada")

    connect(OPENAI, server).complete(ask(named))

    assert server.body["messages"] == [{"role": "user", "content": "Hi", "name": "ada"}]


def test_openai_offers_tools_as_functions_with_their_json_schema_as_parameters(
    connect: Connect,
) -> None:
    server = Server(openai_completion("Done."))

    connect(OPENAI, server).complete(ask(tools=(WEATHER, ADD)))

    assert server.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add two integers.",
                "parameters": ADD.parameters,
            },
        },
    ]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"temperature": 0.2}, {"temperature": 0.2}),
        ({"temperature": 0.0}, {"temperature": 0.0}),
        ({"top_p": 0.9}, {"top_p": 0.9}),
        ({"stop_sequences": ("END", "STOP")}, {"stop": ["END", "STOP"]}),
        ({"tool_choice": "auto"}, {"tool_choice": "auto"}),
        ({"tool_choice": "required"}, {"tool_choice": "required"}),
        ({"tool_choice": "none"}, {"tool_choice": "none"}),
        ({"parallel_tool_calls": False}, {"parallel_tool_calls": False}),
        ({"parallel_tool_calls": True}, {"parallel_tool_calls": True}),
        (
            {"extra": {"seed": 7, "response_format": {"type": "json_object"}}},
            {"seed": 7, "response_format": {"type": "json_object"}},
        ),
    ],
)
def test_openai_maps_each_model_setting_and_leaves_the_unset_ones_out(
    connect: Connect, settings: dict[str, Any], expected: dict[str, Any]
) -> None:
    server = Server(openai_completion("Done."))

    connect(OPENAI, server).complete(ask(tools=(WEATHER,), **settings))

    body = server.body
    assert {k: body[k] for k in body if k not in ("model", "messages", "tools")} == expected


def test_openai_leaves_tool_choice_out_when_no_tools_are_offered(connect: Connect) -> None:
    server = Server(openai_completion("Done."))

    connect(OPENAI, server).complete(ask(tool_choice="required", parallel_tool_calls=False))

    assert set(server.body) == {"model", "messages"}


@pytest.mark.parametrize(
    ("base_url", "parameter", "expected"),
    [
        pytest.param(None, None, "max_completion_tokens", id="at-openai"),
        pytest.param("http://localhost:8000/v1", None, "max_tokens", id="elsewhere"),
        pytest.param(None, "max_tokens", "max_tokens", id="at-openai-overridden"),
        pytest.param(
            "http://localhost:8000/v1",
            "max_completion_tokens",
            "max_completion_tokens",
            id="elsewhere-overridden",
        ),
    ],
)
def test_openai_names_the_output_limit_as_the_server_expects_it(
    connect: Connect, base_url: str | None, parameter: str | None, expected: str
) -> None:
    server = Server(openai_completion("Done."))
    llm = connect(
        OPENAI, server, base_url=base_url or OPENAI.default_url, max_tokens_parameter=parameter
    )

    llm.complete(ask(max_output_tokens=256))

    body = server.body
    assert body[expected] == 256
    assert ({"max_tokens", "max_completion_tokens"} - {expected}).isdisjoint(body)


def test_openai_authenticates_with_a_bearer_token_and_names_agentledger(
    connect: Connect,
) -> None:
    server = Server(openai_completion("Done."))

    connect(OPENAI, server, headers={"OpenAI-Organization": "org-test"}).complete(ask())

    (request,) = server.requests
    assert request.method == "POST"
    assert request.url == "http://llm.test/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["user-agent"].startswith("agentledger/")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["openai-organization"] == "org-test"
    assert "x-api-key" not in request.headers


# -- Anthropic: requests -----------------------------------------------------------------------


def test_anthropic_sends_the_system_prompt_apart_from_the_messages(connect: Connect) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask(Message.system("You are terse."), Message.user("Hi")))

    body = server.body
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]


def test_anthropic_joins_several_system_messages_into_one_system_prompt(
    connect: Connect,
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(
        ask(
            Message.system("You are terse."),
            Message.system("Answer in French."),
            Message.user("Hi"),
        )
    )

    assert [block["text"] for block in server.body["system"]] == [
        "You are terse.\n\nAnswer in French."
    ]
    assert [turn["role"] for turn in server.body["messages"]] == ["user"]


def test_anthropic_sends_no_system_prompt_when_there_is_none(connect: Connect) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask(Message.user("Hi")))

    assert "system" not in server.body


def test_anthropic_sends_tool_calls_and_results_as_blocks_in_alternating_turns(
    connect: Connect,
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server, cache=None).complete(
        ask(
            Message.user("Weather in Paris and London?"),
            Message.assistant(
                "Checking both.", tool_calls=[call("t1", city="Paris"), call("t2", city="London")]
            ),
            Message.tool("22C", tool_call_id="t1", name="get_weather"),
            Message.tool("18C", tool_call_id="t2", name="get_weather"),
            Message.user("And in Rome?"),
            Message.assistant("Rome is 25C."),
        )
    )

    assert server.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and London?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "get_weather",
                    "input": {"city": "London"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "22C"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "18C"},
                {"type": "text", "text": "And in Rome?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Rome is 25C."}]},
    ]


def test_anthropic_sends_thinking_blocks_back_unchanged_before_the_tool_calls(
    connect: Connect,
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))
    thinking = anthropic_thinking("The user wants Paris.", signature="sig-Zk1x0Q==")
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    assistant = Message(
        role=Role.ASSISTANT,
        tool_calls=(call("t1", city="Paris"),),
        reasoning="The user wants Paris.",
        metadata={"thinking_blocks": [thinking, redacted]},
    )

    connect(ANTHROPIC, server).complete(
        ask(Message.user("Weather?"), assistant, Message.tool("22C", tool_call_id="t1"))
    )

    assert server.body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "The user wants Paris.", "signature": "sig-Zk1x0Q=="},
        redacted,
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
    ]


def test_anthropic_offers_tools_with_their_json_schema_as_input_schema(connect: Connect) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server, cache=None).complete(ask(tools=(WEATHER, ADD)))

    assert server.body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.parameters,
        },
        {"name": "add", "description": "Add two integers.", "input_schema": ADD.parameters},
    ]


@pytest.mark.parametrize(
    ("options", "settings", "expected"),
    [
        pytest.param({}, {}, 4096, id="default"),
        pytest.param({}, {"max_output_tokens": 512}, 512, id="from-the-settings"),
        pytest.param({"max_tokens": 1024}, {}, 1024, id="from-the-provider"),
        pytest.param({"max_tokens": 1024}, {"max_output_tokens": 64}, 64, id="settings-win"),
    ],
)
def test_anthropic_always_sends_max_tokens(
    connect: Connect, options: dict[str, Any], settings: dict[str, Any], expected: int
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server, **options).complete(ask(**settings))

    assert server.body["max_tokens"] == expected


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, None),
        ({"tool_choice": "auto"}, {"type": "auto"}),
        ({"tool_choice": "required"}, {"type": "any"}),
        ({"tool_choice": "none"}, {"type": "none"}),
        ({"parallel_tool_calls": True}, None),
        ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
        (
            {"tool_choice": "required", "parallel_tool_calls": False},
            {"type": "any", "disable_parallel_tool_use": True},
        ),
        ({"tool_choice": "none", "parallel_tool_calls": False}, {"type": "none"}),
    ],
)
def test_anthropic_maps_tool_choice_and_parallel_tool_calls(
    connect: Connect, settings: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask(tools=(WEATHER,), **settings))

    assert server.body.get("tool_choice") == expected


def test_anthropic_leaves_tool_choice_out_when_no_tools_are_offered(connect: Connect) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask(tool_choice="required", parallel_tool_calls=False))

    assert set(server.body) == {"model", "max_tokens", "messages"}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"temperature": 0.3}, {"temperature": 0.3}),
        ({"top_p": 0.5}, {"top_p": 0.5}),
        ({"stop_sequences": ("END",)}, {"stop_sequences": ["END"]}),
        (
            {"extra": {"thinking": {"type": "enabled", "budget_tokens": 2048}}},
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        ),
        ({"extra": {"metadata": {"user_id": "u-1"}}}, {"metadata": {"user_id": "u-1"}}),
    ],
)
def test_anthropic_maps_sampling_settings_and_passes_extra_through(
    connect: Connect, settings: dict[str, Any], expected: dict[str, Any]
) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask(**settings))

    body = server.body
    assert {k: body[k] for k in body if k not in ("model", "max_tokens", "messages")} == expected


def test_anthropic_authenticates_with_x_api_key_and_the_api_version(connect: Connect) -> None:
    server = Server(anthropic_message(anthropic_text("Done.")))

    connect(ANTHROPIC, server).complete(ask())

    (request,) = server.requests
    assert request.method == "POST"
    assert request.url == "http://llm.test/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["user-agent"].startswith("agentledger/")
    assert "authorization" not in request.headers


@pytest.mark.parametrize("api", APIS)
def test_a_requests_model_overrides_the_providers(api: Api, connect: Connect) -> None:
    server = Server(api.answer("Done."), api.answer("Done."))
    llm = connect(api, server, model="provider-model")

    llm.complete(ask(model="request-model"))
    llm.complete(ask())

    assert [json.loads(r.content)["model"] for r in server.requests] == [
        "request-model",
        "provider-model",
    ]


# -- OpenAI: responses -------------------------------------------------------------------------


def test_openai_reads_text_finish_reason_model_and_response_id(connect: Connect) -> None:
    body = openai_completion("Hello there.", model="gpt-4o-mini-2024-07-18")

    response = connect(OPENAI, Server(body)).complete(ask())

    assert response.content == "Hello there."
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.reasoning is None
    assert response.metadata == {"response_id": body["id"]}


def test_openai_reads_parallel_tool_calls_in_order_with_text_beside_them(
    connect: Connect,
) -> None:
    body = openai_completion(
        "Let me look.",
        [
            openai_tool_call("get_weather", {"city": "Paris"}, "call_a"),
            openai_tool_call("add", {"a": 2, "b": 3}, "call_b"),
            openai_tool_call("get_weather", {"city": "Rome"}, "call_c"),
        ],
    )

    response = connect(OPENAI, Server(body)).complete(ask(tools=(WEATHER, ADD)))

    assert response.content == "Let me look."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == (
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="add", arguments={"a": 2, "b": 3}),
        ToolCall(id="call_c", name="get_weather", arguments={"city": "Rome"}),
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"city": "Par', id="truncated"),
        pytest.param("city=Paris", id="not-json"),
        pytest.param("[1, 2]", id="array"),
        pytest.param('"Paris"', id="string"),
        pytest.param("42", id="number"),
        pytest.param("null", id="null"),
    ],
)
def test_openai_keeps_arguments_that_are_not_a_json_object_as_raw_text(
    connect: Connect, text: str
) -> None:
    body = openai_completion(None, [openai_tool_call("get_weather", text, "call_x")])

    (tool_call,) = connect(OPENAI, Server(body)).complete(ask()).tool_calls

    assert tool_call.arguments == {}
    assert tool_call.raw_arguments == text


@pytest.mark.parametrize("text", ["", "   "])
def test_openai_reads_empty_arguments_as_an_empty_object(connect: Connect, text: str) -> None:
    body = openai_completion(None, [openai_tool_call("get_weather", text, "call_x")])

    (tool_call,) = connect(OPENAI, Server(body)).complete(ask()).tool_calls

    assert tool_call.arguments == {}
    assert tool_call.raw_arguments is None


def test_openai_accepts_arguments_sent_as_an_object_by_some_servers(connect: Connect) -> None:
    wire = openai_tool_call("get_weather", "", "call_x")
    wire["function"]["arguments"] = {"city": "Paris"}

    (tool_call,) = (
        connect(OPENAI, Server(openai_completion(None, [wire]))).complete(ask()).tool_calls
    )

    assert tool_call.arguments == {"city": "Paris"}
    assert tool_call.raw_arguments is None


def test_openai_gives_a_tool_call_without_an_id_one_of_its_own(connect: Connect) -> None:
    calls = [openai_tool_call("get_weather", {"city": c}) for c in ("Paris", "Rome")]
    for wire in calls:
        del wire["id"]

    response = connect(OPENAI, Server(openai_completion(None, calls))).complete(ask())

    ids = [c.id for c in response.tool_calls]
    assert all(i.startswith("call_") for i in ids)
    assert len(set(ids)) == 2


def test_openai_reads_usage_with_cached_and_reasoning_tokens(connect: Connect) -> None:
    body = openai_completion(
        "Hi", prompt_tokens=1200, completion_tokens=300, cached_tokens=1024, reasoning_tokens=128
    )

    response = connect(OPENAI, Server(body)).complete(ask())

    assert response.usage == Usage(
        input_tokens=1200, output_tokens=300, cache_read_tokens=1024, reasoning_tokens=128
    )


def test_openai_reads_a_response_without_usage_details_as_plain_counts(connect: Connect) -> None:
    body = openai_completion("Hi")
    body["usage"] = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}

    response = connect(OPENAI, Server(body)).complete(ask())

    assert response.usage == Usage(input_tokens=12, output_tokens=3)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_openai_reads_the_reasoning_compatible_servers_send(connect: Connect, field: str) -> None:
    body = openai_completion("42.")
    body["choices"][0]["message"][field] = "Six times seven."

    response = connect(OPENAI, Server(body)).complete(ask())

    assert response.reasoning == "Six times seven."
    assert response.content == "42."


def test_openai_reads_a_refusal_as_the_content_with_finish_reason_refusal(
    connect: Connect,
) -> None:
    body = openai_completion(None)
    body["choices"][0]["message"]["refusal"] = "I can't help with that."

    response = connect(OPENAI, Server(body)).complete(ask())

    assert response.content == "I can't help with that."
    assert response.finish_reason == "refusal"


@pytest.mark.parametrize("finish_reason", ["length", "content_filter", "stop"])
def test_openai_passes_the_finish_reason_on(connect: Connect, finish_reason: str) -> None:
    body = openai_completion("Hi", finish_reason=finish_reason)

    assert connect(OPENAI, Server(body)).complete(ask()).finish_reason == finish_reason


@pytest.mark.parametrize("api", APIS)
def test_a_response_without_a_model_is_named_after_the_requested_model(
    api: Api, connect: Connect
) -> None:
    body = api.answer("Hi")
    del body["model"]
    llm = connect(api, Server(body))

    assert llm.complete(ask()).model == api.model
    assert llm.complete(ask(model="asked-for")).model == "asked-for"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"object": "chat.completion"}, id="no-choices"),
        pytest.param({"choices": []}, id="empty-choices"),
        pytest.param({"choices": [{"index": 0}]}, id="no-message"),
        pytest.param({"choices": [None]}, id="null-choice"),
        pytest.param(
            {"choices": [{"message": {"tool_calls": [{"id": "c", "function": {}}]}}]},
            id="tool-call-without-name",
        ),
        pytest.param(
            {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}},
            id="negative-usage",
        ),
    ],
)
def test_openai_turns_a_body_it_cannot_read_into_a_provider_response_error(
    connect: Connect, body: dict[str, Any]
) -> None:
    server = Server(body)

    with pytest.raises(ProviderResponseError) as raised:
        connect(OPENAI, server).complete(ask())

    assert "OpenAI answered with a response this client cannot read" in str(raised.value)
    assert "OpenAI-compatible API" in str(raised.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(status(200, "<html>Welcome to nginx!</html>"), id="html"),
        pytest.param(status(200, "[1, 2, 3]"), id="json-array"),
        pytest.param(httpx.Response(200, content=b""), id="empty"),
    ],
)
def test_a_200_body_that_is_not_a_json_object_is_a_provider_response_error(
    api: Api, connect: Connect, answer: httpx.Response
) -> None:
    server = Server(answer)

    with pytest.raises(ProviderResponseError) as raised:
        connect(api, server).complete(ask())

    error = raised.value
    assert f"{api.name} answered HTTP 200 with a body that is not a JSON object" in str(error)
    assert error.status_code == 200
    assert error.retryable is False
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("api", "body"),
    [
        pytest.param(OPENAI, {"choices": [{"message": "Hello"}]}, id="openai-message-is-text"),
        pytest.param(
            OPENAI,
            {"choices": [{"message": {"content": "x", "tool_calls": [{"function": "f"}]}}]},
            id="openai-function-is-text",
        ),
        pytest.param(
            OPENAI,
            {"choices": [{"message": {"content": "x"}}], "usage": [20, 10]},
            id="openai-usage-is-a-list",
        ),
        pytest.param(
            ANTHROPIC,
            {"content": [{"type": "text", "text": "x"}], "usage": "20 in, 10 out"},
            id="anthropic-usage-is-text",
        ),
    ],
)
def test_a_200_body_of_the_wrong_shape_is_a_provider_response_error_not_a_crash(
    api: Api, connect: Connect, body: dict[str, Any]
) -> None:
    with pytest.raises(ProviderResponseError, match="cannot read"):
        connect(api, Server(body)).complete(ask())


# -- Anthropic: responses ----------------------------------------------------------------------


def test_anthropic_reads_text_stop_reason_model_and_response_id(connect: Connect) -> None:
    body = anthropic_message(
        anthropic_text("Hello "), anthropic_text("there."), model="claude-sonnet-4-5-20250929"
    )

    response = connect(ANTHROPIC, Server(body)).complete(ask())

    assert response.content == "Hello there."
    assert response.tool_calls == ()
    assert response.finish_reason == "end_turn"
    assert response.model == "claude-sonnet-4-5-20250929"
    assert response.reasoning is None
    assert response.metadata == {"response_id": body["id"]}


def test_anthropic_reads_text_and_tool_use_blocks_in_order(connect: Connect) -> None:
    body = anthropic_message(
        anthropic_text("Let me look."),
        anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_a"),
        anthropic_tool_use("add", {"a": 2, "b": 3}, "toolu_b"),
        anthropic_tool_use("get_weather", {}, "toolu_c"),
    )

    response = connect(ANTHROPIC, Server(body)).complete(ask(tools=(WEATHER, ADD)))

    assert response.content == "Let me look."
    assert response.finish_reason == "tool_use"
    assert response.tool_calls == (
        ToolCall(id="toolu_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_b", name="add", arguments={"a": 2, "b": 3}),
        ToolCall(id="toolu_c", name="get_weather", arguments={}),
    )
    assert all(c.raw_arguments is None for c in response.tool_calls)


def test_anthropic_counts_cache_writes_and_reads_into_the_input_tokens(
    connect: Connect,
) -> None:
    body = anthropic_message(
        anthropic_text("Hi"),
        input_tokens=50,
        output_tokens=400,
        cache_creation_input_tokens=2000,
        cache_read_input_tokens=1000,
    )

    response = connect(ANTHROPIC, Server(body)).complete(ask())

    assert response.usage == Usage(
        input_tokens=3050, output_tokens=400, cache_read_tokens=1000, cache_write_tokens=2000
    )


def test_anthropic_reads_thinking_as_reasoning_and_keeps_the_blocks_whole(
    connect: Connect,
) -> None:
    first = anthropic_thinking("Paris is in France.", signature="sig-one")
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    second = anthropic_thinking("Call the tool.", signature="sig-two")
    body = anthropic_message(
        first, redacted, second, anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_a")
    )

    response = connect(ANTHROPIC, Server(body)).complete(ask())

    assert response.reasoning == "Paris is in France.\n\nCall the tool."
    assert response.metadata["thinking_blocks"] == [first, redacted, second]
    assert response.content == ""


@pytest.mark.parametrize("stop_reason", ["max_tokens", "stop_sequence", "refusal"])
def test_anthropic_passes_the_stop_reason_on(connect: Connect, stop_reason: str) -> None:
    body = anthropic_message(anthropic_text("Hi"), stop_reason=stop_reason)

    assert connect(ANTHROPIC, Server(body)).complete(ask()).finish_reason == stop_reason


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"type": "message"}, id="no-content"),
        pytest.param({"content": None}, id="null-content"),
        pytest.param({"content": [{"text": "x"}]}, id="block-without-type"),
        pytest.param({"content": [{"type": "text"}]}, id="text-block-without-text"),
        pytest.param({"content": ["plain text"]}, id="string-block"),
        pytest.param({"content": [{"type": "tool_use", "name": "f"}]}, id="tool-use-without-id"),
    ],
)
def test_anthropic_turns_a_body_it_cannot_read_into_a_provider_response_error(
    connect: Connect, body: dict[str, Any]
) -> None:
    server = Server(body)

    with pytest.raises(ProviderResponseError) as raised:
        connect(ANTHROPIC, server).complete(ask())

    assert "Anthropic answered with a response this client cannot read" in str(raised.value)
    assert len(server.requests) == 1


# -- retries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param({"retry-after": "7"}, 7.0, id="retry-after-seconds"),
        pytest.param({"retry-after": "0.25"}, 0.25, id="retry-after-fraction"),
        pytest.param({"retry-after-ms": "1500"}, 1.5, id="retry-after-ms"),
        pytest.param({"retry-after-ms": "250", "retry-after": "9"}, 0.25, id="ms-wins"),
    ],
)
def test_a_429_waits_as_long_as_the_server_asks_then_succeeds(
    complete: Complete,
    api: Api,
    connect: Connect,
    sleeps: list[float],
    headers: dict[str, str],
    expected: float,
) -> None:
    server = Server(status(429, api.error("Rate limit reached"), **headers), api.answer("Done."))

    response = complete(connect(api, server), ask())

    assert response.content == "Done."
    assert sleeps == [expected]
    assert len(server.requests) == 2
    assert response.metadata["retries"] == [{"attempt": 1, "status": 429, "delay_s": expected}]


@pytest.mark.parametrize("api", APIS)
def test_a_retry_after_http_date_waits_until_that_time(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    header = email.utils.format_datetime(now + timedelta(seconds=30), usegmt=True)
    server = Server(
        status(429, api.error("slow down"), **{"retry-after": header}), api.answer("ok")
    )
    policy = RetryPolicy(sleep=sleeps.append, clock=lambda: now)

    complete(connect(api, server, retry=policy), ask())

    (slept,) = sleeps
    assert slept == 30.0


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param({"retry-after": "soon"}, 0.5, id="unreadable-retry-after"),
        pytest.param({"retry-after-ms": "soon", "retry-after": "3"}, 3.0, id="unreadable-ms"),
    ],
)
def test_an_unreadable_retry_after_falls_back_to_what_can_be_read(
    complete: Complete,
    api: Api,
    connect: Connect,
    sleeps: list[float],
    headers: dict[str, str],
    expected: float,
) -> None:
    policy = RetryPolicy(initial_delay=0.5, jitter=False, sleep=sleeps.append)
    server = Server(status(429, api.error("slow down"), **headers), api.answer("ok"))

    complete(connect(api, server, retry=policy), ask())

    assert sleeps == [expected]


@pytest.mark.parametrize("api", APIS)
def test_a_retry_after_date_in_the_past_retries_at_once(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    header = "Wed, 21 Oct 2015 07:28:00 GMT"
    server = Server(status(503, api.error("busy"), **{"retry-after": header}), api.answer("ok"))

    complete(connect(api, server), ask())

    assert sleeps == [0.0]


@pytest.mark.parametrize("api", APIS)
def test_retries_back_off_exponentially_up_to_the_maximum_delay(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    policy = RetryPolicy(
        max_retries=5,
        initial_delay=0.5,
        multiplier=2.0,
        max_delay=3.0,
        jitter=False,
        sleep=sleeps.append,
    )
    server = Server(*[status(500, api.error("oops"))] * 5, api.answer("Done."))

    response = complete(connect(api, server, retry=policy), ask())

    assert sleeps == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert len(server.requests) == 6
    assert response.metadata["retries"] == [
        {"attempt": n, "status": 500, "delay_s": delay}
        for n, delay in enumerate([0.5, 1.0, 2.0, 3.0, 3.0], start=1)
    ]


def test_jitter_draws_each_delay_from_the_upper_half_of_the_backoff() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=5.0)

    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        delays = [policy.backoff(retry) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


@pytest.mark.parametrize(
    "options",
    [{"max_retries": -1}, {"initial_delay": -0.1}, {"max_delay": -1.0}],
)
def test_a_retry_policy_with_negative_values_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="must be >= 0"):
        RetryPolicy(**options)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_a_provider_that_keeps_failing_is_asked_max_retries_plus_one_times(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float], max_retries: int
) -> None:
    server = Server(status(503, api.error("overloaded")))
    policy = RetryPolicy(max_retries=max_retries, sleep=sleeps.append)

    with pytest.raises(ProviderServerError) as raised:
        complete(connect(api, server, retry=policy), ask())

    assert len(server.requests) == max_retries + 1
    assert len(sleeps) == max_retries
    assert raised.value.attempts == max_retries + 1
    assert raised.value.status_code == 503
    assert raised.value.retryable is True


@pytest.mark.parametrize("api", APIS)
def test_a_retry_after_longer_than_max_retry_after_raises_at_once(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    server = Server(
        status(429, api.error("Rate limit reached"), **{"retry-after": "120"}), api.answer("ok")
    )
    policy = RetryPolicy(max_retry_after=60.0, sleep=sleeps.append)

    with pytest.raises(ProviderRateLimitError) as raised:
        complete(connect(api, server, retry=policy), ask())

    assert len(server.requests) == 1
    assert sleeps == []
    assert raised.value.attempts == 1
    assert raised.value.status_code == 429
    assert raised.value.retryable is True


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("code", [408, 500, 502, 503, 504, 529])
def test_server_errors_are_retried(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float], code: int
) -> None:
    server = Server(status(code, api.error("try again")), api.answer("Done."))

    response = complete(connect(api, server), ask())

    assert response.content == "Done."
    assert len(server.requests) == 2
    assert len(sleeps) == 1
    assert response.metadata["retries"][0]["status"] == code


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("code", "kind", "what", "advice"),
    [
        (400, ProviderRequestError, "refused the request", "retrying the same request"),
        (401, ProviderAuthenticationError, "refused the API key", "{key_variable}"),
        (403, ProviderAuthenticationError, "refused the key's permissions", "{key_variable}"),
        (
            404,
            ProviderRequestError,
            "has no such endpoint or model at {url}",
            "Check the model name ('{model}') and the base URL",
        ),
        (422, ProviderRequestError, "refused the request", "retrying the same request"),
    ],
)
def test_client_errors_are_raised_after_one_request_saying_what_to_do(
    complete: Complete,
    api: Api,
    connect: Connect,
    sleeps: list[float],
    code: int,
    kind: type[ProviderError],
    what: str,
    advice: str,
) -> None:
    server = Server(status(code, api.error("the server's own words")), api.answer("never"))

    with pytest.raises(kind) as raised:
        complete(connect(api, server), ask())

    error = raised.value
    message = str(error)
    names = {"url": api.local_url, "model": api.model, "key_variable": api.key_variable}
    assert message.startswith(f"{api.name} {what.format(**names)} (HTTP {code}: the server's own")
    assert advice.format(**names) in message
    assert (error.provider, error.status_code, error.attempts, error.retryable) == (
        api.name,
        code,
        1,
        False,
    )
    assert len(server.requests) == 1
    assert sleeps == []


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("code", "kind", "what", "advice"),
    [
        (429, ProviderRateLimitError, "is rate limiting the requests", "RetryPolicy(max_retries"),
        (500, ProviderServerError, "failed on its side", "resume it later"),
        (529, ProviderServerError, "failed on its side", "resume it later"),
    ],
)
def test_retryable_errors_say_what_happened_once_the_retries_are_spent(
    complete: Complete,
    api: Api,
    connect: Connect,
    sleeps: list[float],
    code: int,
    kind: type[ProviderError],
    what: str,
    advice: str,
) -> None:
    server = Server(status(code, api.error("Overloaded")))
    policy = RetryPolicy(max_retries=2, sleep=sleeps.append)

    with pytest.raises(kind) as raised:
        complete(connect(api, server, retry=policy), ask())

    error = raised.value
    assert str(error).startswith(
        f"{api.name} {what} (HTTP {code}: Overloaded; type: invalid_request_error) after 3 "
        "attempts."
    )
    assert advice in str(error)
    assert (error.status_code, error.attempts, error.retryable) == (code, 3, True)


@pytest.mark.parametrize("api", APIS)
def test_an_error_body_that_is_not_json_is_quoted_in_the_message(
    complete: Complete, api: Api, connect: Connect
) -> None:
    server = Server(status(400, "<html><body>Bad   Request\n from the proxy</body></html>"))

    with pytest.raises(ProviderRequestError) as raised:
        complete(connect(api, server), ask())

    assert "HTTP 400: <html><body>Bad Request from the proxy</body></html>" in str(raised.value)


@pytest.mark.parametrize("api", APIS)
def test_connect_errors_are_retried_then_raised_as_provider_connection_errors(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    server = Server(httpx.ConnectError)
    policy = RetryPolicy(max_retries=2, sleep=sleeps.append)

    with pytest.raises(ProviderConnectionError) as raised:
        complete(connect(api, server, retry=policy), ask())

    error = raised.value
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert (error.status_code, error.attempts, error.retryable) == (None, 3, True)
    assert f"could not reach {api.name} at {api.local_url}" in str(error)
    assert "ConnectError: scripted ConnectError" in str(error)
    assert "Check the base URL and the network" in str(error)


@pytest.mark.parametrize("api", APIS)
def test_read_timeouts_are_retried_then_raised_as_provider_timeout_errors(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    server = Server(httpx.ReadTimeout)
    policy = RetryPolicy(max_retries=1, sleep=sleeps.append)

    with pytest.raises(ProviderTimeoutError) as raised:
        complete(connect(api, server, retry=policy, timeout=12.5), ask())

    error = raised.value
    assert len(server.requests) == 2
    assert (error.status_code, error.attempts, error.retryable) == (None, 2, True)
    assert f"{api.name} timed out while waiting for the answer" in str(error)
    assert "read timeout 12.5s" in str(error)
    assert "Pass a longer timeout=" in str(error)


@pytest.mark.parametrize(
    ("exception", "phase"),
    [
        (httpx.ConnectTimeout, "connecting"),
        (httpx.WriteTimeout, "sending"),
        (httpx.PoolTimeout, "waiting for a free connection"),
    ],
)
def test_a_timeout_says_in_which_phase_it_happened(
    complete: Complete, connect: Connect, exception: type[httpx.TimeoutException], phase: str
) -> None:
    policy = RetryPolicy(max_retries=0)

    with pytest.raises(ProviderTimeoutError, match=f"timed out while {phase}"):
        complete(connect(OPENAI, Server(exception), retry=policy), ask())


@pytest.mark.parametrize("api", APIS)
def test_a_call_that_finally_succeeds_lists_every_retry_in_its_metadata(
    complete: Complete, api: Api, connect: Connect, sleeps: list[float]
) -> None:
    policy = RetryPolicy(initial_delay=0.5, jitter=False, sleep=sleeps.append)
    server = Server(
        status(429, api.error("slow down"), **{"retry-after": "2"}),
        httpx.ConnectError,
        httpx.ReadTimeout,
        status(502, "Bad Gateway"),
        api.answer("Done."),
    )

    response = complete(connect(api, server, retry=policy), ask())

    assert response.metadata["retries"] == [
        {"attempt": 1, "status": 429, "delay_s": 2.0},
        {"attempt": 2, "status": None, "delay_s": 1.0},
        {"attempt": 3, "status": None, "delay_s": 2.0},
        {"attempt": 4, "status": 502, "delay_s": 4.0},
    ]
    assert sleeps == [2.0, 1.0, 2.0, 4.0]


@pytest.mark.parametrize("api", APIS)
def test_a_call_that_succeeds_at_once_has_no_retries_in_its_metadata(
    complete: Complete, api: Api, connect: Connect
) -> None:
    assert "retries" not in complete(connect(api, Server(api.answer("Hi"))), ask()).metadata


@pytest.mark.parametrize("api", APIS)
def test_each_retry_is_logged_as_a_warning_saying_what_failed_and_when_it_retries(
    complete: Complete, api: Api, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentledger.llm")
    server = Server(status(503, api.error("overloaded"), **{"retry-after": "3"}), api.answer("ok"))

    complete(connect(api, server), ask())

    (record,) = [r for r in caplog.records if r.name == "agentledger.llm"]
    assert record.levelno == logging.WARNING
    assert "failed on its side (HTTP 503: overloaded; type: " in record.getMessage()
    assert "Retry 1 of 4 in 3.00s." in record.getMessage()


_REFUSED = """
import sys
from agentledger import InferenceRequest, Message, Messages
from agentledger.errors import ProviderConnectionError
from agentledger.llm import OpenAIChat, RetryPolicy

llm = OpenAIChat("m", base_url=sys.argv[1], retry=RetryPolicy(sleep=lambda seconds: None))
try:
    llm.complete(InferenceRequest(messages=Messages.of(Message.user("Hi"))))
except ProviderConnectionError as exc:
    print(exc)
    print(exc.attempts)
"""


def test_a_refused_connection_is_said_once_with_its_attempts_and_not_on_each_retry() -> None:
    """In a program that configured no logging (as the command line), the retries print
    nothing; the error says what happened once, and how many attempts were made."""
    with socket.socket() as probe:  # a loopback port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", _REFUSED, f"http://127.0.0.1:{port}/v1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stderr == ""
    message, attempts = done.stdout.splitlines()
    assert message.startswith(f"could not reach OpenAI at http://127.0.0.1:{port}/v1 (")
    assert ") after 5 attempts. Check the base URL" in message
    assert attempts == "5"


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_key_and_base_url_come_from_the_environment(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(api.key_variable, KEY)
    monkeypatch.setenv(api.url_variable, "http://proxy.test/llm/")
    server = Server(api.answer("Hi"))

    with api.cls(api.model, transport=httpx.MockTransport(server)) as llm:
        llm.complete(ask())

    assert llm.base_url == "http://proxy.test/llm"
    (request,) = server.requests
    assert request.url == f"http://proxy.test/llm{api.cls.endpoint}"
    if api is not ANTHROPIC:
        assert request.headers["authorization"] == f"Bearer {KEY}"
    else:
        assert request.headers["x-api-key"] == KEY


@pytest.mark.parametrize("api", APIS)
def test_explicit_arguments_win_over_the_environment(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(api.key_variable, "sk-from-the-environment")
    monkeypatch.setenv(api.url_variable, "http://environment.test")
    server = Server(api.answer("Hi"))

    with api.cls(
        api.model, api_key=KEY, base_url=api.local_url, transport=httpx.MockTransport(server)
    ) as llm:
        llm.complete(ask())

    (request,) = server.requests
    assert request.url == f"http://llm.test{api.path}"
    assert KEY in (request.headers.get("authorization", "") + request.headers.get("x-api-key", ""))


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("key", [None, ""])
def test_no_key_at_the_providers_own_url_is_a_configuration_error_naming_the_variable(
    api: Api, key: str | None
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        api.cls(api.model, api_key=key)

    assert f"no API key for {api.name}: set {api.key_variable} or pass api_key=" in str(
        raised.value
    )
    assert "base_url=" in str(raised.value)


@pytest.mark.parametrize("api", APIS)
def test_a_local_server_needs_no_key_and_gets_no_credentials(api: Api) -> None:
    server = Server(api.answer("Hi"))

    with api.cls(
        api.model, base_url="http://localhost:11434/v1", transport=httpx.MockTransport(server)
    ) as llm:
        assert llm.complete(ask()).content == "Hi"

    (request,) = server.requests
    assert "authorization" not in request.headers
    assert "x-api-key" not in request.headers


@pytest.mark.parametrize("api", APIS)
def test_repr_names_the_model_and_url_but_never_the_key(api: Api, connect: Connect) -> None:
    llm = connect(api, Server(api.answer("Hi")))

    assert repr(llm) == f"{api.cls.__name__}(model={api.model!r}, base_url={api.local_url!r})"
    assert KEY not in repr(llm)
    assert KEY not in str(llm)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "key",
    [
        pytest.param(KEY, id="sk-style"),
        pytest.param("local-token-8f2Xq0Lm3Zr7", id="any-style"),
    ],
)
@pytest.mark.parametrize("code", [401, 400, 500])
def test_an_error_body_that_echoes_the_key_back_is_redacted(
    api: Api, connect: Connect, key: str, code: int
) -> None:
    body = api.error(f"Incorrect API key provided: {key}. Your key {key} is invalid.")
    server = Server(status(code, body))

    with pytest.raises(ProviderError) as raised:
        connect(api, server, api_key=key, retry=RetryPolicy(max_retries=0)).complete(ask())

    error = raised.value
    assert key not in str(error)
    assert all(key not in str(arg) for arg in error.args)
    assert "Incorrect API key provided: [redacted]" in str(error)


@pytest.mark.parametrize("api", APIS)
def test_a_200_body_that_echoes_the_key_back_is_redacted_in_the_error(
    api: Api, connect: Connect
) -> None:
    server = Server(status(200, f"proxy error: bad key {KEY}"))

    with pytest.raises(ProviderResponseError) as raised:
        connect(api, server).complete(ask())

    assert KEY not in str(raised.value)
    assert "[redacted]" in str(raised.value)


@pytest.mark.parametrize("api", APIS)
def test_a_retried_call_never_logs_the_key(
    api: Api, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = Server(status(500, api.error(f"bad key {KEY}")), api.answer("ok"))

    response = connect(api, server).complete(ask())

    assert caplog.records, "the retry was logged"
    assert KEY not in caplog.text
    assert KEY not in response.model_dump_json()


# -- prices ------------------------------------------------------------------------------------


def test_a_price_charges_uncached_input_cache_reads_cache_writes_and_output_separately() -> None:
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = Usage(
        input_tokens=1_000, cache_read_tokens=200, cache_write_tokens=100, output_tokens=500
    )

    # 700 uncached * $3 + 200 read * $0.30 + 100 written * $3.75 + 500 out * $15, per million
    assert price.cost(usage) == pytest.approx((2_100 + 60 + 375 + 7_500) / 1_000_000)


def test_a_price_without_cache_prices_charges_cached_tokens_as_input() -> None:
    price = Price(input=2.0, output=8.0)
    usage = Usage(
        input_tokens=1_000, cache_read_tokens=300, cache_write_tokens=100, output_tokens=10
    )

    assert price.cost(usage) == pytest.approx((1_000 * 2.0 + 10 * 8.0) / 1_000_000)


def test_reasoning_tokens_are_priced_as_the_output_they_are_part_of() -> None:
    price = Price(input=1.0, output=4.0)

    with_reasoning = Usage(input_tokens=10, output_tokens=100, reasoning_tokens=90)

    assert price.cost(with_reasoning) == pytest.approx((10 * 1.0 + 100 * 4.0) / 1_000_000)


def test_no_usage_costs_nothing() -> None:
    assert Price(input=3.0, output=15.0).cost(Usage()) == 0.0


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Price(input=-1.0, output=1.0)


def test_the_shipped_price_table_has_a_version_and_a_date() -> None:
    table = PriceTable.default()

    assert table.version
    assert isinstance(table.as_of, date)
    assert table.currency == "USD"
    assert table is PriceTable.default()


@pytest.mark.parametrize(
    ("model", "listed"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o", "gpt-4o"),
        ("openai/gpt-4o", "gpt-4o"),
        ("openai/gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ],
)
def test_the_shipped_table_finds_a_model_through_prefixes_and_snapshot_suffixes(
    model: str, listed: str
) -> None:
    table = PriceTable.default()

    assert table.price_for(model) is not None
    assert table.price_for(model) == table.models[listed]


@pytest.mark.parametrize("model", ["llama-3.1-8b-instruct", "gpt-4o-mini-turbo", "", None])
def test_a_model_without_a_price_costs_none_never_zero(model: str | None) -> None:
    table = PriceTable.default()

    assert table.price_for(model) is None
    assert table.cost(model, Usage(input_tokens=10, output_tokens=10)) is None


def test_a_snapshot_with_a_price_of_its_own_is_priced_exactly() -> None:
    table = PriceTable.default().with_prices({"gpt-4o-2024-05-13": Price(input=5.0, output=15.0)})

    assert table.price_for("gpt-4o-2024-05-13") == Price(input=5.0, output=15.0)
    assert table.price_for("gpt-4o-2024-08-06") == table.models["gpt-4o"]


def test_with_prices_overrides_and_adds_models_without_changing_the_original() -> None:
    shipped = PriceTable.default()
    original = shipped.models["gpt-4o-mini"]

    custom = shipped.with_prices(
        {
            "gpt-4o-mini": {"input": 1.0, "output": 2.0},
            "my-local-model": Price(input=0.0, output=0.0),
        }
    )

    assert custom.price_for("gpt-4o-mini-2024-07-18") == Price(input=1.0, output=2.0)
    assert custom.cost("my-local-model", Usage(input_tokens=10**6)) == 0.0
    assert custom.version == f"{shipped.version}+custom"
    assert custom.as_of == shipped.as_of
    assert shipped.models["gpt-4o-mini"] == original
    assert shipped.price_for("my-local-model") is None
    assert shipped.with_prices({}, version="2026.01").version == "2026.01"


def test_a_price_table_loads_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "version": "acme-2026.02",
                "as_of": "2026-02-01",
                "models": {"acme-large": {"input": 4.0, "output": 12.0, "cache_read": 0.4}},
            }
        )
    )

    table = PriceTable.load(path)

    assert table.version == "acme-2026.02"
    assert table.as_of == date(2026, 2, 1)
    assert table.price_for("acme-large-20260101") == Price(input=4.0, output=12.0, cache_read=0.4)
    assert PriceTable.load(str(path)) == table


def test_the_shipped_prices_json_loads_as_a_table() -> None:
    import agentledger._values

    shipped = Path(agentledger._values.__file__).with_name("prices.json")

    assert PriceTable.load(shipped) == PriceTable.default()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(None, "cannot read the price table", id="missing"),
        pytest.param("{not json", "is not a price table", id="not-json"),
        pytest.param('{"as_of": "2026-01-01"}', "is not a price table", id="no-version"),
        pytest.param(
            '{"version": "x", "as_of": "yesterday"}', "is not a price table", id="bad-date"
        ),
        pytest.param(
            '{"version": "x", "as_of": "2026-01-01", "models": {"m": {"input": -1, "output": 1}}}',
            "is not a price table",
            id="negative-price",
        ),
    ],
)
def test_a_bad_price_file_is_a_clear_configuration_error(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "prices.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(ConfigurationError) as raised:
        PriceTable.load(path)

    assert problem in str(raised.value)
    assert str(path) in str(raised.value)


def test_an_openai_response_is_priced_from_the_table(connect: Connect) -> None:
    body = openai_completion(
        "Hi",
        model="gpt-4o-mini-2024-07-18",
        prompt_tokens=1_000,
        cached_tokens=400,
        completion_tokens=200,
    )
    table = PriceTable(
        version="test",
        as_of=date(2026, 1, 1),
        models={"gpt-4o-mini": Price(input=0.15, output=0.6, cache_read=0.075)},
    )

    response = connect(OPENAI, Server(body), prices=table).complete(ask())

    # 600 uncached * $0.15 + 400 cached * $0.075 + 200 out * $0.60, per million
    assert response.cost_usd == pytest.approx((90 + 30 + 120) / 1_000_000)


def test_an_anthropic_response_is_priced_from_the_shipped_table(connect: Connect) -> None:
    body = anthropic_message(
        anthropic_text("Hi"),
        model="claude-sonnet-4-5-20250929",
        input_tokens=100,
        cache_creation_input_tokens=200,
        cache_read_input_tokens=1_000,
        output_tokens=50,
    )
    price = PriceTable.default().models["claude-sonnet-4-5"]

    response = connect(ANTHROPIC, Server(body)).complete(ask())

    expected = (
        100 * price.input
        + 1_000 * (price.cache_read or 0)
        + 200 * (price.cache_write or 0)
        + 50 * price.output
    ) / 1_000_000
    assert response.cost_usd == pytest.approx(expected)


@pytest.mark.parametrize("api", APIS)
def test_a_response_from_a_model_without_a_price_has_no_cost(api: Api, connect: Connect) -> None:
    body = api.answer("Hi")
    body["model"] = "my-local-model"

    response = connect(api, Server(body)).complete(ask())

    assert response.cost_usd is None
    assert response.usage.total_tokens > 0


def test_a_scripted_model_with_a_price_table_prices_its_responses_as_providers_do() -> None:
    prices = PriceTable.default().with_prices({"rehearsal": Price(input=1.0, output=2.0)})
    scripted = ScriptedLLM(
        [
            InferenceResponse(content="a", usage=Usage(input_tokens=1000, output_tokens=500)),
            InferenceResponse(content="b", cost_usd=0.5),
            InferenceResponse(content="c", model="unknown-model", usage=Usage(input_tokens=9)),
        ],
        model="rehearsal",
        prices=prices,
    )

    costs = [scripted.complete(InferenceRequest()).cost_usd for _ in range(3)]

    assert costs == [pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6), 0.5, None]

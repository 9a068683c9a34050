"""Structured output, a tool_choice that names one tool, strict tools and a per-request
timeout, on each HTTP provider: the request bodies they send (httpx's MockTransport), the
answers read back into ``parsed``, and the timeout against a loopback server that is slow."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from agentledger import Message, Messages, ToolSchema
from agentledger._core import Summarizer, tool, tool_schema
from agentledger.errors import ConfigurationError, ProviderTimeoutError
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    OpenAIChat,
    OpenAIResponses,
    RetryPolicy,
)
from support.fake_provider import (
    FakeProvider,
    Reply,
    Streamed,
    anthropic_message,
    anthropic_stream,
    anthropic_text,
    openai_completion,
    openai_stream,
    responses_response,
    responses_stream,
    responses_text,
)

KEY = "sk-unit-Q7rT2vX9wK4mN8pL3sD6"

WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
        "required": ["city"],
    },
)
ADD = ToolSchema(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
)


class City(BaseModel):
    name: str
    population: int


class Forecast(BaseModel):
    city: City
    days: list[str]
    note: str | None = None


FORECAST_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"$ref": "#/$defs/City"},
        "days": {"type": "array", "items": {"type": "string"}, "title": "Days"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Note"},
    },
    "required": ["city", "days", "note"],
    "additionalProperties": False,
    "title": "Forecast",
    "$defs": {
        "City": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name"},
                "population": {"type": "integer", "title": "Population"},
            },
            "required": ["name", "population"],
            "additionalProperties": False,
            "title": "City",
        }
    },
}
"""``Forecast``'s schema in strict form: closed objects, every property required, the
optional ``note`` nullable and without its ``default: null``."""

ANSWER = '{"city": {"name": "Paris", "population": 2100000}, "days": ["sun", "rain"]}'


@dataclass(frozen=True)
class Api:
    cls: type[HttpProvider]
    model: str
    answer: Callable[[str], dict[str, Any]]
    stream: Callable[[dict[str, Any]], list[str]]


OPENAI = Api(OpenAIChat, "gpt-4o-mini", lambda t: openai_completion(t), openai_stream)
RESPONSES = Api(
    OpenAIResponses, "gpt-5-mini", lambda t: responses_response(responses_text(t)), responses_stream
)
ANTHROPIC = Api(
    AnthropicMessages,
    "claude-sonnet-4-5",
    lambda t: anthropic_message(anthropic_text(t)),
    anthropic_stream,
)
APIS = [
    pytest.param(OPENAI, id="openai"),
    pytest.param(RESPONSES, id="openai-responses"),
    pytest.param(ANTHROPIC, id="anthropic"),
]


class Server:
    """An ``httpx.MockTransport`` handler answering every request with one body, recording
    the request bodies."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=self.answer)


def connect(api: Api, server: Server) -> HttpProvider:
    return api.cls(
        api.model,
        base_url="http://llm.test/v1",
        api_key=KEY,
        transport=httpx.MockTransport(server),
    )


def ask(*, tools: tuple[ToolSchema, ...] = (), **settings: Any) -> InferenceRequest:
    return InferenceRequest(
        messages=Messages.of(Message.user("Weather in Paris?")),
        tools=tools,
        settings=ModelSettings(**settings),
    )


def sent(api: Api, request: InferenceRequest, answer: str = "Done.") -> dict[str, Any]:
    server = Server(api.answer(answer))
    with connect(api, server) as provider:
        provider.complete(request)
    [body] = server.bodies
    return body


# -- tool_choice naming one tool ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "expected"),
    [
        pytest.param(
            OPENAI, {"type": "function", "function": {"name": "get_weather"}}, id="openai"
        ),
        pytest.param(RESPONSES, {"type": "function", "name": "get_weather"}, id="responses"),
        pytest.param(ANTHROPIC, {"type": "tool", "name": "get_weather"}, id="anthropic"),
    ],
)
def test_a_tool_choice_naming_a_tool_forces_that_tool_in_each_api(
    api: Api, expected: dict[str, Any]
) -> None:
    body = sent(api, ask(tools=(ADD, WEATHER), tool_choice="get_weather"))

    assert body["tool_choice"] == expected


def test_anthropic_keeps_parallel_tool_use_off_with_a_named_tool() -> None:
    body = sent(
        ANTHROPIC, ask(tools=(WEATHER,), tool_choice="get_weather", parallel_tool_calls=False)
    )

    assert body["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
        "disable_parallel_tool_use": True,
    }


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("tools", [(ADD,), ()], ids=["other-tools", "no-tools"])
def test_a_tool_choice_naming_a_tool_not_offered_is_refused_before_sending(
    api: Api, tools: tuple[ToolSchema, ...]
) -> None:
    server = Server(api.answer("Done."))

    with (
        connect(api, server) as provider,
        pytest.raises(ConfigurationError, match="'get_wether' names a tool this request") as raised,
    ):
        provider.complete(ask(tools=tools, tool_choice="get_wether"))

    assert server.bodies == []
    assert "'add'" in str(raised.value) if tools else "no tools" in str(raised.value)


@pytest.mark.parametrize("api", APIS)
def test_the_tool_choice_modes_are_still_modes_not_tool_names(api: Api) -> None:
    body = sent(api, ask(tools=(WEATHER,), tool_choice="required"))

    assert body["tool_choice"] in ("required", {"type": "any"})


# -- strict tools ------------------------------------------------------------------------------

STRICT_WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
    "required": ["city", "units"],
    "additionalProperties": False,
}


def test_openai_sends_a_strict_tool_as_strict_with_its_schema_made_strict() -> None:
    strict = WEATHER.model_copy(update={"strict": True})

    tools = sent(OPENAI, ask(tools=(strict, ADD)))["tools"]

    assert tools[0]["function"]["strict"] is True
    assert tools[0]["function"]["parameters"] == STRICT_WEATHER_PARAMETERS
    assert "strict" not in tools[1]["function"]
    assert tools[1]["function"]["parameters"] == ADD.parameters


def test_responses_sends_strict_only_for_a_strict_tool() -> None:
    strict = WEATHER.model_copy(update={"strict": True})

    tools = sent(RESPONSES, ask(tools=(strict, ADD)))["tools"]

    assert (tools[0]["strict"], tools[0]["parameters"]) == (True, STRICT_WEATHER_PARAMETERS)
    assert (tools[1]["strict"], tools[1]["parameters"]) == (False, ADD.parameters)


def test_anthropic_sends_a_strict_tool_as_strict() -> None:
    strict = WEATHER.model_copy(update={"strict": True})

    tools = sent(ANTHROPIC, ask(tools=(strict, ADD)))["tools"]

    assert (tools[0]["strict"], tools[0]["input_schema"]) == (True, STRICT_WEATHER_PARAMETERS)
    assert "strict" not in tools[1]


def test_the_tool_decorator_makes_a_strict_tool() -> None:
    @tool(strict=True)
    def get_weather(city: str, units: str = "metric") -> str:
        """Current weather for a city."""
        return f"{city}: sunny"

    schema = tool_schema(get_weather)
    function = sent(OPENAI, ask(tools=(schema,)))["tools"][0]["function"]

    assert schema.strict is True
    assert function["strict"] is True
    assert function["parameters"]["required"] == ["city", "units"]
    assert function["parameters"]["additionalProperties"] is False
    assert tool_schema(tool(get_weather.function)).strict is False


# -- response_format ---------------------------------------------------------------------------


def test_openai_sends_a_model_class_as_a_strict_json_schema_response_format() -> None:
    body = sent(OPENAI, ask(response_format=Forecast), ANSWER)

    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Forecast", "schema": FORECAST_SCHEMA, "strict": True},
    }


def test_responses_sends_the_response_format_as_text_format() -> None:
    body = sent(RESPONSES, ask(response_format=Forecast), ANSWER)

    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Forecast",
            "schema": FORECAST_SCHEMA,
            "strict": True,
        }
    }


def test_responses_keeps_other_text_settings_beside_the_format() -> None:
    body = sent(
        RESPONSES, ask(response_format=Forecast, extra={"text": {"verbosity": "low"}}), ANSWER
    )

    assert body["text"]["verbosity"] == "low"
    assert body["text"]["format"]["name"] == "Forecast"


def test_anthropic_sends_the_response_format_as_output_config_format() -> None:
    body = sent(
        ANTHROPIC,
        ask(response_format=Forecast, extra={"output_config": {"effort": "low"}}),
        ANSWER,
    )

    assert body["output_config"] == {
        "effort": "low",
        "format": {"type": "json_schema", "schema": FORECAST_SCHEMA},
    }


@pytest.mark.parametrize("api", APIS)
def test_a_model_class_answer_is_parsed_into_an_instance(api: Api) -> None:
    server = Server(api.answer(ANSWER))

    with connect(api, server) as provider:
        response = provider.complete(ask(response_format=Forecast))

    assert response.parsed == Forecast(
        city=City(name="Paris", population=2100000), days=["sun", "rain"]
    )
    assert response.content == ANSWER


@pytest.mark.parametrize("api", APIS)
def test_a_json_schema_answer_is_parsed_into_a_dict(api: Api) -> None:
    schema = {
        "title": "city info",
        "type": "object",
        "properties": {"name": {"type": "string"}},
    }
    server = Server(api.answer('{"name": "Paris"}'))

    with connect(api, server) as provider:
        response = provider.complete(ask(response_format=schema))

    assert response.parsed == {"name": "Paris"}
    body = server.bodies[0]
    wire = (
        body.get("response_format", {}).get("json_schema")
        or body.get("text", {}).get("format")
        or body["output_config"]["format"]
    )
    assert wire["schema"] == {
        "title": "city info",
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    }
    assert wire.get("name", "city_info") == "city_info"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "answer",
    ["I cannot help with that.", '{"city": "Paris"}', '["sun"]', ""],
    ids=["prose", "wrong-shape", "not-an-object", "empty"],
)
def test_an_answer_that_does_not_parse_leaves_parsed_none_and_keeps_the_text(
    api: Api, answer: str
) -> None:
    server = Server(api.answer(answer))

    with connect(api, server) as provider:
        by_model = provider.complete(ask(response_format=Forecast))
        by_schema = provider.complete(ask(response_format={"type": "object"}))

    assert (by_model.parsed, by_model.content) == (None, answer)
    assert by_schema.parsed == ({"city": "Paris"} if answer == '{"city": "Paris"}' else None)


@pytest.mark.parametrize("api", APIS)
def test_a_request_without_a_response_format_has_nothing_parsed(api: Api) -> None:
    server = Server(api.answer(ANSWER))

    with connect(api, server) as provider:
        response = provider.complete(ask())

    assert response.parsed is None
    assert {"response_format", "text", "output_config"}.isdisjoint(server.bodies[0])


@pytest.mark.parametrize("api", APIS)
def test_a_streamed_answer_is_parsed_as_a_whole_one_is(
    api: Api, fake_provider: FakeProvider
) -> None:
    fake_provider.push(Reply(Streamed(tuple(api.stream(api.answer(ANSWER))))))
    url = fake_provider.openai_url if api is not ANTHROPIC else fake_provider.url

    with api.cls(api.model, base_url=url, api_key=KEY) as provider:
        *_, final = provider.stream(ask(response_format=Forecast))

    assert isinstance(final, InferenceResponse)
    assert isinstance(final.parsed, Forecast)
    assert final.parsed.city.name == "Paris"


# -- a per-request timeout ---------------------------------------------------------------------


@pytest.fixture
def slow_provider(fake_provider: FakeProvider) -> Iterator[Callable[[Api], HttpProvider]]:
    """``slow(api)``: a provider of ``api`` with a long default timeout, talking to a loopback
    server that answers after 1.5 seconds, without retries."""
    made: list[HttpProvider] = []

    def slow(api: Api) -> HttpProvider:
        fake_provider.push(Reply(api.answer("Late."), delay=1.5))
        url = fake_provider.openai_url if api is not ANTHROPIC else fake_provider.url
        provider = api.cls(
            api.model, base_url=url, api_key=KEY, timeout=30.0, retry=RetryPolicy(max_retries=0)
        )
        made.append(provider)
        return provider

    yield slow
    for provider in made:
        provider.close()


CALLS: dict[str, Callable[[HttpProvider, InferenceRequest], object]] = {
    "complete": lambda p, r: p.complete(r),
    "acomplete": lambda p, r: asyncio.run(p.acomplete(r)),
    "stream": lambda p, r: list(p.stream(r)),
    "astream": lambda p, r: asyncio.run(_drain(p, r)),
}


async def _drain(provider: HttpProvider, request: InferenceRequest) -> list[object]:
    return [item async for item in provider.astream(request)]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("how", list(CALLS))
def test_a_request_timeout_overrides_the_clients_longer_one(
    api: Api, how: str, slow_provider: Callable[[Api], HttpProvider]
) -> None:
    provider = slow_provider(api)

    with pytest.raises(ProviderTimeoutError) as raised:
        CALLS[how](provider, ask(timeout=0.3))

    assert "read timeout 0.3s" in str(raised.value)
    assert "ModelSettings(timeout=...)" in str(raised.value)


def test_a_request_without_a_timeout_waits_as_long_as_the_client_allows(
    slow_provider: Callable[[Api], HttpProvider],
) -> None:
    response = slow_provider(OPENAI).complete(ask())

    assert response.content == "Late."


@pytest.mark.parametrize("seconds", [0, -1.0])
def test_a_timeout_that_is_not_positive_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        ModelSettings(timeout=seconds)


# -- what the agent's settings do not reach ----------------------------------------------------


def test_a_summary_asks_for_prose_whatever_the_agents_format_and_tool_choice() -> None:
    server = Server(OPENAI.answer("They talked about the weather."))
    settings = ModelSettings(response_format=Forecast, tool_choice="get_weather")

    with connect(OPENAI, server) as provider:
        summary = Summarizer(provider, settings=settings).summarize(
            Messages.of(Message.user("Weather in Paris?")), max_tokens=200
        )

    assert summary.content == "They talked about the weather."
    assert {"response_format", "tool_choice", "tools"}.isdisjoint(server.bodies[0])

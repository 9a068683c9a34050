"""``OpenAIResponses``, what is its own: the Responses API's request (input items, flat
function tools, ``store: false``, encrypted reasoning asked for and sent back in place) and its
response (output items, usage details, incomplete answers), with httpx's MockTransport as the
network seam. What it shares with the other providers (retries, errors, keys, streaming) is
tested with them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentledger import Message, Messages, OpenAIResponses, ToolCall, ToolSchema, Usage
from agentledger.errors import ConfigurationError, ProviderStreamCutError
from agentledger.llm import InferenceRequest, ModelSettings, RetryPolicy
from support.fake_provider import (
    responses_events,
    responses_function_call,
    responses_reasoning,
    responses_response,
    responses_text,
    sse,
)

WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


class Server:
    """Answers every request with ``answer`` (a JSON body, or server-sent events); records the
    request bodies."""

    def __init__(self, answer: dict[str, Any] | list[str]) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        assert request.url.path == "/v1/responses"
        if isinstance(self.answer, list):
            content = "".join(self.answer).encode()
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=content
            )
        return httpx.Response(200, json=self.answer)


@pytest.fixture
def made() -> Iterator[list[OpenAIResponses]]:
    providers: list[OpenAIResponses] = []
    yield providers
    for provider in providers:
        provider.close()


def connect(made: list[OpenAIResponses], server: Server) -> OpenAIResponses:
    provider = OpenAIResponses(
        "gpt-5-mini",
        base_url="http://llm.test/v1",
        api_key="sk-responses-K2jH8gF5dS3a",
        retry=RetryPolicy(max_retries=0),
        transport=httpx.MockTransport(server),
    )
    made.append(provider)
    return provider


def ask(*messages: Message, **settings: Any) -> InferenceRequest:
    return InferenceRequest(
        messages=Messages.of(*messages) if messages else Messages.of(Message.user("Hi")),
        tools=(WEATHER,),
        settings=ModelSettings(**settings),
    )


# -- the request -------------------------------------------------------------------------------


def test_messages_become_input_items_with_calls_and_results_paired_by_call_id(
    made: list[OpenAIResponses],
) -> None:
    server = Server(responses_response(responses_text("Done.")))
    calls = [
        ToolCall(id="call_p", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_l", name="get_weather", arguments={"city": "Löndon"}),
    ]

    connect(made, server).complete(
        ask(
            Message.system("You answer questions about the weather."),
            Message.user("Paris and London?"),
            Message.assistant("Let me check.", tool_calls=calls),
            Message.tool("22C", tool_call_id="call_p", name="get_weather"),
            Message.tool("17C", tool_call_id="call_l", name="get_weather"),
            Message.assistant("Paris is warmer."),
            Message.system("Be brief."),
            Message.user("Thanks"),
        )
    )

    (body,) = server.bodies
    assert body["instructions"] == "You answer questions about the weather."
    assert body["input"] == [
        {"role": "user", "content": "Paris and London?"},
        {"role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": "call_p",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "function_call",
            "call_id": "call_l",
            "name": "get_weather",
            "arguments": '{"city": "Löndon"}',
        },
        {"type": "function_call_output", "call_id": "call_p", "output": "22C"},
        {"type": "function_call_output", "call_id": "call_l", "output": "17C"},
        {"role": "assistant", "content": "Paris is warmer."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["model"] == "gpt-5-mini"


def test_tools_are_flat_functions_and_settings_use_the_apis_names(
    made: list[OpenAIResponses],
) -> None:
    server = Server(responses_response(responses_text("Done.")))

    connect(made, server).complete(
        ask(
            temperature=0.2,
            max_output_tokens=500,
            tool_choice="required",
            parallel_tool_calls=False,
            extra={"reasoning": {"effort": "low", "summary": "auto"}},
        )
    )

    (body,) = server.bodies
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": WEATHER.parameters,
            "strict": False,
        }
    ]
    assert "instructions" not in body
    assert {
        k: body[k] for k in body if k not in ("model", "input", "tools", "store", "include")
    } == {
        "temperature": 0.2,
        "max_output_tokens": 500,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "summary": "auto"},
    }


def test_stop_sequences_are_refused_before_anything_is_sent(made: list[OpenAIResponses]) -> None:
    server = Server(responses_response(responses_text("Done.")))

    with pytest.raises(ConfigurationError, match="Responses API has no stop sequences"):
        connect(made, server).complete(ask(stop_sequences=("END",)))

    assert server.bodies == []


def test_reasoning_items_go_back_whole_before_the_calls_they_led_to(
    made: list[OpenAIResponses],
) -> None:
    first = responses_reasoning("Paris first.", encrypted="gAAAA-one")
    second = responses_reasoning("Then London.", encrypted="gAAAA-two")
    answer = responses_response(
        first,
        responses_function_call("get_weather", {"city": "Paris"}, "call_p"),
        second,
        responses_function_call("get_weather", {"city": "London"}, "call_l"),
    )
    provider = connect(made, Server(answer))
    response = provider.complete(ask(Message.user("Paris and London?")))
    step = Message.assistant(response.content, tool_calls=response.tool_calls).model_copy(
        update={"metadata": response.metadata}
    )
    later = Server(responses_response(responses_text("Both mild.")))
    provider = connect(made, later)

    provider.complete(
        ask(
            Message.user("Paris and London?"),
            step,
            Message.tool("22C", tool_call_id="call_p"),
            Message.tool("17C", tool_call_id="call_l"),
        )
    )

    kinds = [(i.get("type"), i.get("id") or i.get("call_id")) for i in later.bodies[0]["input"]]
    assert kinds == [
        (None, None),
        ("reasoning", first["id"]),
        ("reasoning", second["id"]),
        ("function_call", "call_p"),
        ("function_call", "call_l"),
        ("function_call_output", "call_p"),
        ("function_call_output", "call_l"),
    ]
    assert later.bodies[0]["input"][1:3] == [first, second]


def test_a_reasoning_item_without_encrypted_content_is_not_sent_back(
    made: list[OpenAIResponses],
) -> None:
    kept = responses_reasoning("Whole.", encrypted="gAAAA-whole")
    cut = responses_reasoning("Cut") | {"encrypted_content": None}
    step = Message.assistant("Hm.").model_copy(
        update={"metadata": {"reasoning_items": [cut, kept]}}
    )
    server = Server(responses_response(responses_text("Done.")))

    connect(made, server).complete(ask(Message.user("Hi"), step, Message.user("And?")))

    assert server.bodies[0]["input"][1:3] == [kept, {"role": "assistant", "content": "Hm."}]


# -- the response ------------------------------------------------------------------------------


def test_text_tool_calls_reasoning_usage_and_model_are_read_from_the_output(
    made: list[OpenAIResponses],
) -> None:
    reasoning = responses_reasoning("The user wants Paris.", "Call the tool.")
    answer = responses_response(
        reasoning,
        responses_text("Let me "),
        responses_text("check."),
        responses_function_call("get_weather", {"city": "Paris"}, "call_p"),
        input_tokens=1200,
        cached_tokens=1000,
        output_tokens=300,
        reasoning_tokens=256,
    )

    response = connect(made, Server(answer)).complete(ask())

    assert response.content == "Let me check."
    assert response.tool_calls == (
        ToolCall(id="call_p", name="get_weather", arguments={"city": "Paris"}),
    )
    assert response.reasoning == "The user wants Paris.\n\nCall the tool."
    assert response.usage == Usage(
        input_tokens=1200, output_tokens=300, cache_read_tokens=1000, reasoning_tokens=256
    )
    assert response.finish_reason == "tool_calls"
    assert response.model == "gpt-5-mini-2025-08-07"
    assert response.metadata == {"response_id": answer["id"], "reasoning_items": [reasoning]}
    assert response.cost_usd is not None


def test_arguments_that_are_not_a_json_object_are_kept_as_raw_text(
    made: list[OpenAIResponses],
) -> None:
    answer = responses_response(responses_function_call("get_weather", '{"city": "Par', "call_x"))

    (call,) = connect(made, Server(answer)).complete(ask()).tool_calls

    assert call == ToolCall(
        id="call_x", name="get_weather", arguments={}, raw_arguments='{"city": "Par'
    )


@pytest.mark.parametrize(
    ("reason", "finish_reason"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter")],
)
def test_an_incomplete_response_finishes_as_chat_completions_says(
    made: list[OpenAIResponses], reason: str, finish_reason: str
) -> None:
    answer = responses_response(responses_text("Paris has"), incomplete=reason)

    response = connect(made, Server(answer)).complete(ask())

    assert response.content == "Paris has"
    assert response.finish_reason == finish_reason


def test_a_plain_answer_finishes_with_stop(made: list[OpenAIResponses]) -> None:
    response = connect(made, Server(responses_response(responses_text("Hi")))).complete(ask())

    assert (response.content, response.finish_reason) == ("Hi", "stop")


# -- a stream cut short --------------------------------------------------------------------------


def test_a_cut_stream_keeps_text_and_reasoning_so_far_but_no_unfinished_call(
    made: list[OpenAIResponses],
) -> None:
    answer = responses_response(
        responses_reasoning("Paris first."),
        responses_text("Let me look."),
        responses_function_call("get_weather", {"city": "Paris"}, "call_p"),
    )
    events = responses_events(answer)
    arguments = next(
        n for n, e in enumerate(events) if e["type"] == "response.function_call_arguments.delta"
    )
    provider = connect(made, Server([sse(e, e["type"]) for e in events[: arguments + 1]]))

    with pytest.raises(ProviderStreamCutError) as raised:
        list(provider.stream(ask()))

    partial = raised.value.partial
    assert partial is not None
    assert (partial.content, partial.reasoning) == ("Let me look.", "Paris first.")
    assert partial.tool_calls == ()
    assert partial.finish_reason is None

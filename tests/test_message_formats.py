"""Messages in the shapes the provider SDKs hold them: ``Messages.from_openai``/``to_openai``
(Chat Completions messages, Responses input items) and ``from_anthropic``/``to_anthropic``.
What ``to_*`` gives is checked against the SDKs' own param types (strictly, as the providers'
bodies are); a history in an SDK's shape comes back from a round trip as it was given, with its
ids, calls, results, errors and reasoning; what a message cannot hold is refused, naming the
item."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic import types as anthropic_types
from openai.types import responses as responses_types
from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_message_tool_call import Function

from agentledger import AgentBuilder, Message, Messages, Role, ToolCall, UsageError, tool
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.sdk_types import check, type_named

CHAT_PARAMS = "openai.types.chat.completion_create_params.CompletionCreateParamsNonStreaming"
RESPONSES_PARAMS = "openai.types.responses.response_create_params.ResponseCreateParamsNonStreaming"
ANTHROPIC_PARAMS = "anthropic.types.message_create_params.MessageCreateParamsNonStreaming"

WEATHER = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris", "days": [1, 2]})


def conversation() -> Messages:
    """A turn with a tool call, a failed and a good result, and a final answer."""
    return Messages.of(
        Message.system("Be brief."),
        Message.user("Weather in Paris?"),
        Message.assistant("Let me look.", tool_calls=[WEATHER]),
        Message(
            role=Role.TOOL,
            content="timeout",
            tool_call_id="call_1",
            name="get_weather",
            metadata={"is_error": True},
        ),
        Message.assistant(tool_calls=[WEATHER.model_copy(update={"id": "call_2"})]),
        Message.tool("22C, sunny", tool_call_id="call_2", name="get_weather"),
        Message.assistant("Sunny, 22C."),
    )


def facts(messages: Messages) -> list[tuple[Any, ...]]:
    """What a round trip keeps of each message, whatever the format."""
    return [
        (m.role, m.content, m.tool_calls, m.tool_call_id, m.name, bool(m.metadata.get("is_error")))
        for m in messages
    ]


# -- what to_* gives is what the SDKs take ------------------------------------------------------


def test_to_openai_chat_is_the_sdk_s_messages_and_reads_back_to_the_same_calls_and_results():
    messages = conversation().to_openai(api="chat")

    check({"model": "gpt-4o", "messages": messages}, type_named(CHAT_PARAMS))
    again = Messages.from_openai(messages)
    assert again.to_openai(api="chat") == messages
    # Chat Completions has no error flag on a tool result: everything else is kept
    assert [f[:5] for f in facts(again)] == [f[:5] for f in facts(conversation())]


def test_to_openai_responses_is_the_sdk_s_input_and_reads_back_to_the_same_messages():
    items = conversation().to_openai(api="responses")

    check({"model": "gpt-4o", "input": items}, type_named(RESPONSES_PARAMS))
    assert items[0] == {"role": "system", "content": "Be brief."}
    again = Messages.from_openai(items)
    assert again.to_openai(api="responses") == items
    assert [f[:5] for f in facts(again)] == [f[:5] for f in facts(conversation())]


def test_to_anthropic_is_what_messages_create_takes_with_the_system_prompt_apart():
    request = conversation().to_anthropic()

    check(
        {"model": "claude-sonnet-4-5", "max_tokens": 100, **request}, type_named(ANTHROPIC_PARAMS)
    )
    assert request["system"] == "Be brief."
    roles = [t["role"] for t in request["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    failed = request["messages"][2]["content"][0]
    assert failed == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": "timeout",
        "is_error": True,
    }
    again = Messages.from_anthropic(**request)
    assert facts(again) == facts(conversation())
    assert again.to_anthropic() == request


def test_a_conversation_without_system_messages_has_no_system_for_anthropic():
    assert Messages.of(Message.user("Hi")).to_anthropic() == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    }


# -- histories in an SDK's shape come back as they were given -----------------------------------

CHAT_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_9", "content": "22C"},
    {"role": "assistant", "content": "Sunny, 22C."},
]

RESPONSES_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Need the weather tool."}],
        "encrypted_content": "gAAAA...",
    },
    {
        "type": "function_call",
        "call_id": "call_9",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "id": "fc_1",
    },
    {"type": "function_call_output", "call_id": "call_9", "output": "22C"},
    {"type": "reasoning", "id": "rs_2", "summary": []},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Sunny, 22C.", "annotations": []}],
    },
]

ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Need the tool.", "signature": "sig-1"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "P"}},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "L"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "down", "is_error": True},
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Paris 22C; London unknown."}]},
]


def test_a_chat_completions_history_round_trips_as_given():
    messages = Messages.from_openai(CHAT_HISTORY)

    assert messages.to_openai(api="chat") == CHAT_HISTORY
    assert messages[1].name == "alice"
    assert messages[2].tool_calls == (
        ToolCall(id="call_9", name="get_weather", arguments={"city": "Paris"}),
    )
    assert messages[3].name == "get_weather"  # named after the call it answers


def test_a_responses_history_round_trips_with_its_item_ids_and_reasoning():
    messages = Messages.from_openai(RESPONSES_HISTORY)

    assert messages.to_openai(api="responses") == RESPONSES_HISTORY
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].reasoning == "Need the weather tool."
    assert messages[2].tool_calls[0].id == "call_9"
    assert messages[4].content == "Sunny, 22C."


def test_an_anthropic_history_round_trips_with_its_thinking_in_order_and_its_errors():
    messages = Messages.from_anthropic(ANTHROPIC_HISTORY, system="Be brief.")

    assert messages.to_anthropic() == {"system": "Be brief.", "messages": ANTHROPIC_HISTORY}
    assert messages[0].role is Role.SYSTEM
    assert messages[2].reasoning == "Need the tool."
    assert [m.metadata.get("is_error", False) for m in messages[3:5]] == [False, True]
    assert [m.name for m in messages[3:5]] == ["get_weather", "get_weather"]


def test_the_sdks_own_objects_are_read_as_their_dicts_are():
    chat = ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageToolCall(
                id="call_9",
                type="function",
                function=Function(name="get_weather", arguments='{"city": "Paris"}'),
            )
        ],
    )
    output = [
        responses_types.ResponseReasoningItem(
            id="rs_1", type="reasoning", summary=[], encrypted_content="gAAAA..."
        ),
        responses_types.ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[
                responses_types.ResponseOutputText(type="output_text", text="Hi.", annotations=[])
            ],
        ),
    ]
    blocks = [
        anthropic_types.ThinkingBlock(type="thinking", thinking="Hm.", signature="sig"),
        anthropic_types.TextBlock(type="text", text="Hi."),
    ]

    assert facts(Messages.from_openai([chat])) == facts(Messages.from_openai([CHAT_HISTORY[2]]))
    responses = Messages.from_openai(output)
    assert responses.to_openai(api="responses") == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA..."},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
        },
    ]
    anthropic = Messages.from_anthropic([{"role": "assistant", "content": blocks}])
    assert anthropic.to_anthropic()["messages"][0]["content"] == [
        {"type": "thinking", "thinking": "Hm.", "signature": "sig"},
        {"type": "text", "text": "Hi."},
    ]


def test_the_api_is_told_by_the_items_or_named():
    plain = [{"role": "user", "content": "Hi"}]

    assert facts(Messages.from_openai(plain)) == facts(Messages.from_openai(plain, api="chat"))
    assert facts(Messages.from_openai(plain)) == facts(Messages.from_openai(plain, api="responses"))
    tool_result = [{"type": "function_call_output", "call_id": "c1", "output": "22C"}]
    assert Messages.from_openai(tool_result)[0].tool_call_id == "c1"
    with pytest.raises(
        UsageError, match=r"Chat Completions message 0 has no role: .*api='responses'"
    ):
        Messages.from_openai(tool_result, api="chat")
    with pytest.raises(UsageError, match=r"api='completions' is not an OpenAI API: pass api="):
        Messages.from_openai(plain, api="completions")  # type: ignore[arg-type]


# -- what a message cannot hold is refused, naming the item -------------------------------------

IMAGE_PART = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}

REFUSED: list[tuple[str, Any, str]] = [
    (
        "chat",
        [{"role": "user", "content": "Hi"}, {"role": "user", "content": [IMAGE_PART]}],
        r"Chat Completions message 1 \(role 'user'\), content part 0 is of type 'image_url'",
    ),
    (
        "chat",
        [{"role": "function", "name": "f", "content": "1"}],
        r"message 0 has the role 'function'.*'tool' message",
    ),
    (
        "chat",
        [{"role": "assistant", "content": "x", "audio": {"id": "a1"}}],
        r"message 0 \(role 'assistant'\) has 'audio', which a Message has no place for",
    ),
    (
        "chat",
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "custom", "id": "c", "custom": {"name": "f", "input": "x"}}
                ],
            }
        ],
        r"tool call 0 is a call of type 'custom'",
    ),
    (
        "chat",
        [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}],
        r"tool call 0 has no 'id'",
    ),
    (
        "chat",
        [{"role": "tool", "content": "22C"}],
        r"message 0 \(role 'tool'\) has no 'tool_call_id'",
    ),
    ("chat", ["Hi"], r"Chat Completions message 0 is a str: pass each as a dict"),
    (
        "responses",
        [{"type": "web_search_call", "id": "ws_1", "status": "completed"}],
        r"Responses input item 0 is of type 'web_search_call'",
    ),
    (
        "responses",
        [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
        r"item 0 \(role 'user'\), content part 0 is of type 'input_image'",
    ),
    (
        "responses",
        [
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": "See",
                        "annotations": [{"type": "url_citation"}],
                    }
                ],
            }
        ],
        r"content part 0 has 'annotations'",
    ),
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "image", "source": {}}]}],
        r"Anthropic message 0 \(role 'user'\), block 0 is a block of type 'image'",
    ),
    (
        "anthropic",
        [{"role": "system", "content": "Be brief."}],
        r"message 0 \(role 'system'\) is neither a user nor an assistant turn.*system=\.\.\.",
    ),
    (
        "anthropic",
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "image", "source": {}}],
                    }
                ],
            }
        ],
        r"block 0, content part 0 is of type 'image'",
    ),
    (
        "anthropic",
        [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}],
        r"message 0 \(role 'assistant'\), block 0 has no 'id'",
    ),
]


@pytest.mark.parametrize(("api", "given", "message"), REFUSED)
def test_a_shape_a_message_cannot_hold_is_refused_naming_the_item(
    api: str, given: Any, message: str
) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        if api == "anthropic":
            Messages.from_anthropic(given)
        else:
            Messages.from_openai(given, api=api)  # type: ignore[arg-type]
    assert str(raised.value).endswith("(none of the messages was read).")


def test_an_anthropic_system_prompt_of_blocks_is_read_and_an_image_in_it_refused():
    blocks = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]

    assert facts(Messages.from_anthropic([], system=blocks)) == [
        (Role.SYSTEM, "Be brief.", (), None, None, False)
    ]
    with pytest.raises(UsageError, match=r"system prompt given to Anthropic, block 0"):
        Messages.from_anthropic([], system=[{"type": "image", "source": {}}])


# -- a ledger's conversation, loaded in an SDK's shape ------------------------------------------


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"22C in {city}"


def test_a_recorded_conversation_loads_back_in_each_sdk_s_shape(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})]
            ),
            InferenceResponse(content="Sunny, 22C."),
        ]
    )
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_tools([get_weather])
            .with_separated_tool_trace(False)
            .with_ledger(ledger)
            .build()
        )
        result = agent.run("Weather in Paris?")
        context = ledger.model_context(result.conversation_id)

    chat = context.to_openai()
    check({"model": "gpt-4o", "messages": chat}, type_named(CHAT_PARAMS))
    assert json.loads(chat[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    check(
        {"model": "gpt-4o", "input": context.to_openai(api="responses")},
        type_named(RESPONSES_PARAMS),
    )
    request = context.to_anthropic()
    check(
        {"model": "claude-sonnet-4-5", "max_tokens": 100, **request}, type_named(ANTHROPIC_PARAMS)
    )
    assert facts(Messages.from_anthropic(**request)) == facts(context)

"""Anthropic prompt caching, on by default: ``cache_control`` breakpoints on the last tool, the
system prompt and the end of the conversation before the run's trace (five minutes or one
hour, none with ``cache=None``), and a second turn that reads the first turn's prefix from the
cache and costs less in the ledger (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentledger import AgentBuilder, Message, Messages, ModelSettings, ToolCall, ToolSchema
from agentledger._core import FunctionTool
from agentledger.errors import ConfigurationError
from agentledger.ledger import Ledger
from agentledger.llm import AnthropicMessages, InferenceRequest, PriceTable
from support.fake_provider import (
    FakeProvider,
    Reply,
    Streamed,
    anthropic_message,
    anthropic_stream,
    anthropic_text,
    anthropic_tool_use,
)
from support.ledger import Database

FIVE_MINUTES = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
ADD = ToolSchema(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)


class Recorder:
    """An ``httpx.MockTransport`` handler that answers "Done." and keeps the request bodies."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return httpx.Response(200, json=anthropic_message(anthropic_text("Done.")))


def sent(request: InferenceRequest, **options: Any) -> dict[str, Any]:
    """The body ``AnthropicMessages(**options)`` sends for ``request``."""
    recorder = Recorder()
    transport = httpx.MockTransport(recorder)
    with AnthropicMessages(
        "claude-sonnet-4-5", base_url="http://llm.test", transport=transport, **options
    ) as llm:
        llm.complete(request)
    return recorder.bodies[0]


def marks(body: dict[str, Any]) -> list[tuple[str, Any, dict[str, str]]]:
    """Every ``cache_control`` in a body: where it is (tools, system or the turn's index), what
    block carries it (the tool's name, the text, the block's type) and the mark."""
    found = [("tools", t["name"], t.get("cache_control")) for t in body.get("tools", ())]
    system = body.get("system")
    if isinstance(system, list):
        found += [("system", b["text"], b.get("cache_control")) for b in system]
    for index, turn in enumerate(body["messages"]):
        for block in turn["content"]:
            label = block.get("text") or block["type"]
            found.append((f"messages[{index}]", label, block.get("cache_control")))
    return [m for m in found if m[2] is not None]


def unmarked(turn: dict[str, Any]) -> dict[str, Any]:
    """A turn without its ``cache_control`` marks (they are not part of the cached prefix)."""
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in turn["content"]]
    return turn | {"content": blocks}


def conversation_with_a_trace() -> InferenceRequest:
    """An earlier turn, the new user message, then the run's trace: a tool call, its result,
    a second call and its result."""
    return InferenceRequest(
        messages=Messages.of(
            Message.system("You answer questions about the weather."),
            Message.user("Hello"),
            Message.assistant("Hello! Ask me about the weather."),
            Message.user("Weather in Paris and London?"),
            Message.assistant("", tool_calls=[ToolCall(id="t1", name="get_weather")]),
            Message.tool("22C", tool_call_id="t1", name="get_weather"),
            Message.assistant("", tool_calls=[ToolCall(id="t2", name="get_weather")]),
            Message.tool("18C", tool_call_id="t2", name="get_weather"),
        ),
        tools=(WEATHER, ADD),
    )


CONVERSATION_END = ("messages[2]", "Weather in Paris and London?")


def test_the_default_caches_five_minutes_at_the_last_tool_the_system_and_the_conversation() -> None:
    body = sent(conversation_with_a_trace())

    assert marks(body) == [
        ("tools", "add", FIVE_MINUTES),
        ("system", "You answer questions about the weather.", FIVE_MINUTES),
        (*CONVERSATION_END, FIVE_MINUTES),
    ]
    assert len(marks(body)) <= 4
    assert "cache_control" not in body["tools"][0]


def test_the_conversation_breakpoint_goes_before_the_run_s_trace() -> None:
    body = sent(conversation_with_a_trace())

    turns = body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant"] * 3 + ["user"]
    assert turns[2]["content"] == [
        {"type": "text", "text": "Weather in Paris and London?", "cache_control": FIVE_MINUTES}
    ]
    trace = [block for turn in turns[3:] for block in turn["content"]]
    assert [b["type"] for b in trace] == ["tool_use", "tool_result", "tool_use", "tool_result"]
    assert all("cache_control" not in b for b in trace)


def test_the_instruction_for_a_final_answer_joining_the_results_is_part_of_the_trace() -> None:
    request = conversation_with_a_trace()
    final = request.model_copy(
        update={"messages": request.messages.append(Message.user("Answer now."))}
    )

    body = sent(final)

    assert marks(body)[-1] == (*CONVERSATION_END, FIVE_MINUTES)
    assert body["messages"][-1]["content"][-1] == {"type": "text", "text": "Answer now."}


def test_cache_1h_sends_the_one_hour_ttl() -> None:
    body = sent(conversation_with_a_trace(), cache="1h")

    assert [m[2] for m in marks(body)] == [ONE_HOUR, ONE_HOUR, ONE_HOUR]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_cache_none_sends_no_breakpoints() -> None:
    body = sent(conversation_with_a_trace(), cache=None)

    assert marks(body) == []
    assert body["system"] == "You answer questions about the weather."
    assert "cache_control" not in json.dumps(body)


def test_a_first_request_without_tools_or_system_marks_the_user_message() -> None:
    body = sent(InferenceRequest(messages=Messages.of(Message.user("Hi"))))

    assert marks(body) == [("messages[0]", "Hi", FIVE_MINUTES)]
    assert "system" not in body


def test_breakpoints_given_in_the_settings_count_towards_the_limit_of_four() -> None:
    system = [
        {"type": "text", "text": "Part one.", "cache_control": FIVE_MINUTES},
        {"type": "text", "text": "Part two.", "cache_control": FIVE_MINUTES},
        {"type": "text", "text": "Part three.", "cache_control": FIVE_MINUTES},
    ]
    request = conversation_with_a_trace()
    request = request.model_copy(
        update={"settings": request.settings.model_copy(update={"extra": {"system": system}})}
    )

    body = sent(request)

    assert len(marks(body)) == 4
    assert marks(body)[0] == ("tools", "add", FIVE_MINUTES)


def test_tools_and_system_blocks_given_in_the_settings_are_marked_in_copies() -> None:
    system = [{"type": "text", "text": "Be brief."}]
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    request = InferenceRequest(
        messages=Messages.of(Message.user("Hi")),
        settings=ModelSettings(extra={"system": system, "tools": tools}),
    )
    recorder = Recorder()
    with AnthropicMessages(
        "claude-sonnet-4-5", base_url="http://llm.test", transport=httpx.MockTransport(recorder)
    ) as llm:
        llm.complete(request)
        llm.complete(request)

    assert system == [{"type": "text", "text": "Be brief."}]
    assert tools == [{"type": "web_search_20250305", "name": "web_search"}]
    for body in recorder.bodies:
        assert marks(body) == [
            ("tools", "web_search", FIVE_MINUTES),
            ("system", "Be brief.", FIVE_MINUTES),
            ("messages[0]", "Hi", FIVE_MINUTES),
        ]


@pytest.mark.parametrize("cache", ["5 minutes", "1H", "", 300])
def test_an_unknown_cache_setting_is_refused(cache: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"cache='5m'.*cache='1h'.*cache=None"):
        AnthropicMessages("claude-sonnet-4-5", api_key="k", cache=cache)


def test_a_streamed_request_carries_the_breakpoints(fake_provider: FakeProvider) -> None:
    reply = anthropic_message(anthropic_text("Done."))
    fake_provider.push(Reply(Streamed(tuple(anthropic_stream(reply)))))
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url) as llm:
        list(llm.stream(conversation_with_a_trace()))

    (body,) = fake_provider.bodies()
    assert body["stream"] is True
    assert [m[:2] for m in marks(body)] == [
        ("tools", "add"),
        ("system", "You answer questions about the weather."),
        CONVERSATION_END,
    ]


# -- through the ledger ---------------------------------------------------------------------------

PROMPT = 2048
"""The tokens of the first turn's prompt (tools, system prompt, the question): the prefix the
first turn writes to the cache and the second turn reads from it."""
NEW = 60
"""The tokens the second turn adds: the first answer and the new question."""
SONNET = PriceTable.default().price_for("claude-sonnet-4-5")


def answer(text: str, cached: bool, *, written: int, read: int, fresh: int) -> Reply:
    """A reply whose usage counts ``read`` tokens read from the cache and ``written`` written
    to it when caching is on, or all of them as plain input when it is off."""
    if not cached:
        fresh, written, read = fresh + written + read, 0, 0
    return Reply(
        anthropic_message(
            anthropic_text(text),
            input_tokens=fresh,
            output_tokens=50,
            cache_creation_input_tokens=written,
            cache_read_input_tokens=read,
        )
    )


def two_turns(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, cache: str | None
) -> dict[str, Any]:
    """Two turns of one conversation; the second turn's step as the ledger recorded it."""
    cached = cache is not None
    fake_provider.push(
        answer("Sunny.", cached, written=PROMPT, read=0, fresh=4),
        answer("Rain.", cached, written=NEW, read=PROMPT, fresh=4),
    )
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url, cache=cache) as llm:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_ledger(ledger)
            .with_system_prompt("You answer questions about the weather.")
            .build()
        )
        first = agent.run("Weather in Paris?")
        second = agent.run("And tomorrow?", conversation_id=first.conversation_id)
    return db.row(
        "SELECT input_tokens, cache_read_tokens, cache_write_tokens, cost_usd "
        "FROM step_executions WHERE run_id = :r",
        r=second.run_id,
    )


CACHED_COST = (4 * 3.0 + PROMPT * 0.3 + NEW * 3.75 + 50 * 15.0) / 1_000_000
"""The second turn at Sonnet 4.5's prices ($ per million: input 3, cache read 0.3, five-minute
cache write 3.75, output 15): $0.0016014."""
UNCACHED_COST = ((PROMPT + NEW + 4) * 3.0 + 50 * 15.0) / 1_000_000
"""The same turn with its whole prompt at the input price: $0.007086."""


def test_the_second_turn_reads_the_first_from_the_cache_and_costs_less(
    fake_provider: FakeProvider, ledger: Ledger, db: Database
) -> None:
    step = two_turns(fake_provider, ledger, db, "5m")
    first, second = fake_provider.bodies()
    without = two_turns(fake_provider, ledger, db, None)

    assert marks(first)[-1] == ("messages[0]", "Weather in Paris?", FIVE_MINUTES)
    assert marks(second)[-1] == ("messages[2]", "And tomorrow?", FIVE_MINUTES)
    # The first turn's prompt, up to its breakpoint, is where the second turn's begins (the
    # API looks for earlier cache entries at the block boundaries before a breakpoint).
    assert second["system"] == first["system"]
    assert unmarked(second["messages"][0]) == unmarked(first["messages"][0])
    assert all("cache_control" not in json.dumps(b) for b in fake_provider.bodies()[2:])

    assert (step["cache_read_tokens"], step["input_tokens"]) == (PROMPT, PROMPT + NEW + 4)
    assert (without["cache_read_tokens"], without["input_tokens"]) == (0, PROMPT + NEW + 4)
    assert step["cost_usd"] == pytest.approx(CACHED_COST)
    assert without["cost_usd"] == pytest.approx(UNCACHED_COST)
    assert step["cost_usd"] < without["cost_usd"]
    assert without["cost_usd"] - step["cost_usd"] == pytest.approx(0.0054846)
    assert SONNET is not None
    assert (SONNET.input, SONNET.cache_read, SONNET.cache_write) == (3.0, 0.3, 3.75)


def test_a_tool_run_keeps_the_conversation_breakpoint_on_the_user_message(
    fake_provider: FakeProvider, ledger: Ledger, weather_tool: FunctionTool
) -> None:
    fake_provider.push(
        Reply(anthropic_message(anthropic_tool_use("get_weather", {"city": "Paris"}, "t1"))),
        Reply(anthropic_message(anthropic_text("22C."))),
    )
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url) as llm:
        agent = AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([weather_tool]).build()
        agent.run("Weather in Paris?")

    first, second = fake_provider.bodies()
    for body in (first, second):
        assert marks(body) == [
            ("tools", "get_weather", FIVE_MINUTES),
            ("messages[0]", "Weather in Paris?", FIVE_MINUTES),
        ]
    assert [b["type"] for turn in second["messages"][1:] for b in turn["content"]] == [
        "tool_use",
        "tool_result",
    ]

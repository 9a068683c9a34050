"""The providers end to end, through real sockets: a server on loopback speaks each wire format
(responses shaped as in the providers' published API references) to an agent whose runs are
recorded in a real ledger, SQLite and PostgreSQL. Checked on the requests the server received,
through the public API, and with SQL on the database."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from agentledger import Agent, AgentBuilder, AgentStatus, Role, Usage
from agentledger._core import FunctionTool
from agentledger._values import StepType
from agentledger.ledger import Ledger
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    ModelSettings,
    OpenAIChat,
    OpenAIResponses,
    Price,
    PriceTable,
    RetryPolicy,
)
from support.fake_provider import (
    FakeProvider,
    Reply,
    anthropic_error,
    anthropic_message,
    anthropic_text,
    anthropic_thinking,
    anthropic_tool_use,
    openai_completion,
    openai_error,
    openai_tool_call,
    responses_function_call,
    responses_reasoning,
    responses_response,
    responses_text,
)

SYSTEM = "You answer questions about the weather."
QUESTION = "How warm are Paris and London together?"
ANSWER = "Paris has 22C and London 22C: 44C together."

PRICES = PriceTable(
    version="test",
    as_of=date(2030, 1, 1),
    models={
        "gpt-4o-mini": Price(input=2.0, output=10.0, cache_read=0.5, cache_write=2.5),
        "claude-sonnet-4-5": Price(input=2.0, output=10.0, cache_read=0.5, cache_write=2.5),
    },
)
"""Round prices, so the costs below can be worked out by hand ($ per million tokens)."""

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"title": "City", "type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
ADD_PARAMETERS = {
    "type": "object",
    "properties": {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer", "default": 0},
    },
    "required": ["a"],
    "additionalProperties": False,
}


# -- one table row per wire format -----------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]
    id: str


Event = tuple[Any, ...]
"""A message of a request, provider-neutral: ``("system", text)``, ``("user", text)``,
``("assistant", text, call_ids)`` or ``("tool", call_id, result)``."""


@dataclass(frozen=True)
class Api:
    """What a scenario needs to speak one provider's wire format."""

    cls: type[HttpProvider]
    name: str
    model: str
    path: str
    key_variable: str
    url: Callable[[FakeProvider], str]
    reply: Callable[[str | None, Sequence[Call], dict[str, int], str], dict[str, Any]]
    error: Callable[[str], dict[str, Any]]
    transcript: Callable[[dict[str, Any]], list[Event]]
    tool_parameters: Callable[[dict[str, Any]], dict[str, Any]]
    credentials: Callable[[dict[str, str]], str | None]
    step_tokens: tuple[dict[str, int], dict[str, int], dict[str, int]]
    """What the server reports for the three steps of the main scenario, in its own fields..."""
    step_usage: tuple[Usage, Usage, Usage]
    """... what that is in agentledger's convention ..."""
    step_costs: tuple[float, float, float]
    """... and what it costs at ``PRICES``, worked out by hand."""


def _openai_reply(
    content: str | None, calls: Sequence[Call], tokens: dict[str, int], model: str
) -> dict[str, Any]:
    wire = [openai_tool_call(c.name, c.arguments, c.id) for c in calls]
    return openai_completion(content, wire, model=model, **tokens)


def _openai_transcript(body: dict[str, Any]) -> list[Event]:
    events: list[Event] = []
    for message in body["messages"]:
        if message["role"] == "tool":
            events.append(("tool", message["tool_call_id"], message["content"]))
        elif message["role"] == "assistant":
            ids = tuple(c["id"] for c in message.get("tool_calls", ()))
            events.append(("assistant", message["content"] or "", ids))
        else:
            events.append((message["role"], message["content"]))
    return events


def _anthropic_reply(
    content: str | None, calls: Sequence[Call], tokens: dict[str, int], model: str
) -> dict[str, Any]:
    blocks = [anthropic_text(content)] if content else []
    blocks += [anthropic_tool_use(c.name, c.arguments, c.id) for c in calls]
    return anthropic_message(*blocks, model=model, **tokens)


def _anthropic_transcript(body: dict[str, Any]) -> list[Event]:
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(block["text"] for block in system)
    events: list[Event] = [("system", system)] if system else []
    for turn in body["messages"]:
        blocks = turn["content"]
        if turn["role"] == "assistant":
            content = "".join(b["text"] for b in blocks if b["type"] == "text")
            ids = tuple(b["id"] for b in blocks if b["type"] == "tool_use")
            events.append(("assistant", content, ids))
            continue
        for block in blocks:
            if block["type"] == "tool_result":
                events.append(("tool", block["tool_use_id"], block["content"]))
            else:
                events.append(("user", block["text"]))
    return events


def _responses_reply(
    content: str | None, calls: Sequence[Call], tokens: dict[str, int], model: str
) -> dict[str, Any]:
    items = [responses_text(content)] if content else []
    items += [responses_function_call(c.name, c.arguments, c.id) for c in calls]
    return responses_response(*items, model=model, **tokens)


def _responses_transcript(body: dict[str, Any]) -> list[Event]:
    """The input items, an assistant's reasoning, text and calls in a row as one message."""
    events: list[Event] = [("system", body["instructions"])] if "instructions" in body else []
    for item in body["input"]:
        kind = item.get("type")
        if kind == "function_call_output":
            events.append(("tool", item["call_id"], item["output"]))
        elif kind in ("reasoning", "function_call") or item.get("role") == "assistant":
            if not events or events[-1][0] != "assistant":
                events.append(("assistant", "", ()))
            _, content, ids = events[-1]
            if kind == "function_call":
                ids = (*ids, item["call_id"])
            elif kind is None:
                content += item["content"]
            events[-1] = ("assistant", content, ids)
        else:
            events.append((item["role"], item["content"]))
    return events


OPENAI = Api(
    cls=OpenAIChat,
    name="OpenAI",
    model="gpt-4o-mini",
    path="/v1/chat/completions",
    key_variable="OPENAI_API_KEY",
    url=lambda server: server.openai_url,
    reply=_openai_reply,
    error=lambda message: openai_error(message),
    transcript=_openai_transcript,
    tool_parameters=lambda body: {
        t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]
    },
    credentials=lambda headers: headers.get("Authorization"),
    step_tokens=(
        {"prompt_tokens": 1000, "completion_tokens": 50},
        {
            "prompt_tokens": 1200,
            "cached_tokens": 1000,
            "completion_tokens": 40,
            "reasoning_tokens": 16,
        },
        {"prompt_tokens": 1400, "cached_tokens": 1000, "completion_tokens": 100},
    ),
    step_usage=(
        Usage(input_tokens=1000, output_tokens=50),
        Usage(input_tokens=1200, output_tokens=40, cache_read_tokens=1000, reasoning_tokens=16),
        Usage(input_tokens=1400, output_tokens=100, cache_read_tokens=1000),
    ),
    step_costs=(
        (1000 * 2.0 + 50 * 10.0) / 1e6,  # 0.0025
        (200 * 2.0 + 1000 * 0.5 + 40 * 10.0) / 1e6,  # 0.0013
        (400 * 2.0 + 1000 * 0.5 + 100 * 10.0) / 1e6,  # 0.0023
    ),
)
RESPONSES = Api(
    cls=OpenAIResponses,
    name="OpenAI",
    model="gpt-4o-mini",
    path="/v1/responses",
    key_variable="OPENAI_API_KEY",
    url=lambda server: server.openai_url,
    reply=_responses_reply,
    error=lambda message: openai_error(message),
    transcript=_responses_transcript,
    tool_parameters=lambda body: {t["name"]: t["parameters"] for t in body["tools"]},
    credentials=lambda headers: headers.get("Authorization"),
    step_tokens=(
        {"input_tokens": 1000, "output_tokens": 50},
        {"input_tokens": 1200, "cached_tokens": 1000, "output_tokens": 40, "reasoning_tokens": 16},
        {"input_tokens": 1400, "cached_tokens": 1000, "output_tokens": 100},
    ),
    step_usage=OPENAI.step_usage,
    step_costs=OPENAI.step_costs,
)
ANTHROPIC = Api(
    cls=AnthropicMessages,
    name="Anthropic",
    model="claude-sonnet-4-5",
    path="/v1/messages",
    key_variable="ANTHROPIC_API_KEY",
    url=lambda server: server.url,
    reply=_anthropic_reply,
    error=lambda message: anthropic_error(message),
    transcript=_anthropic_transcript,
    tool_parameters=lambda body: {t["name"]: t["input_schema"] for t in body["tools"]},
    credentials=lambda headers: headers.get("x-api-key"),
    step_tokens=(
        {"input_tokens": 100, "cache_creation_input_tokens": 1000, "output_tokens": 50},
        {"input_tokens": 150, "cache_read_input_tokens": 1000, "output_tokens": 40},
        {"input_tokens": 200, "cache_read_input_tokens": 1000, "output_tokens": 100},
    ),
    step_usage=(
        Usage(input_tokens=1100, output_tokens=50, cache_write_tokens=1000),
        Usage(input_tokens=1150, output_tokens=40, cache_read_tokens=1000),
        Usage(input_tokens=1200, output_tokens=100, cache_read_tokens=1000),
    ),
    step_costs=(
        (100 * 2.0 + 1000 * 2.5 + 50 * 10.0) / 1e6,  # 0.0032
        (150 * 2.0 + 1000 * 0.5 + 40 * 10.0) / 1e6,  # 0.0012
        (200 * 2.0 + 1000 * 0.5 + 100 * 10.0) / 1e6,  # 0.0019
    ),
)
RESPONSE_MODELS = {
    OPENAI.name: "gpt-4o-mini-2024-07-18",
    ANTHROPIC.name: "claude-sonnet-4-5-20250929",
}


@pytest.fixture(
    params=[OPENAI, RESPONSES, ANTHROPIC], ids=["openai", "openai-responses", "anthropic"]
)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param


def reply(
    api: Api,
    content: str | None = None,
    calls: Sequence[Call] = (),
    *,
    step: int = 0,
    model: str | None = None,
    **options: Any,
) -> Reply:
    """A 200 reply of ``api`` with the tokens of the main scenario's step ``step``."""
    body = api.reply(content, calls, api.step_tokens[step], model or RESPONSE_MODELS[api.name])
    return Reply(body, **options)


def error(api: Api, status: int, message: str, **options: Any) -> Reply:
    return Reply(api.error(message), status=status, **options)


def paris(api: Api) -> Call:
    return Call(
        "get_weather", {"city": "Paris"}, "call_paris" if api is not ANTHROPIC else "toolu_paris"
    )


def london(api: Api) -> Call:
    return Call(
        "get_weather", {"city": "London"}, "call_london" if api is not ANTHROPIC else "toolu_london"
    )


def total(api: Api) -> Call:
    return Call("add", {"a": 22, "b": 22}, "call_total" if api is not ANTHROPIC else "toolu_total")


# -- the ledger, the database, the agent -----------------------------------------------------------


class Database:
    """SQL on the ledger's database through an engine of its own."""

    def __init__(self, url: str) -> None:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        self.engine: Engine = create_engine(url)
        self.dialect = self.engine.dialect.name

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(text(sql), params).mappings()]
        return [{k: _decoded(k, v) for k, v in row.items()} for row in rows]

    def row(self, sql: str, **params: Any) -> dict[str, Any]:
        (row,) = self.rows(sql, **params)
        return row

    def everything_as_text(self) -> str:
        """Every row of every table of the database, as text."""
        with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                tables = conn.exec_driver_sql(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).scalars()
            else:
                tables = conn.exec_driver_sql(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
                ).scalars()
            dumped = []
            for table in list(tables):
                rows = conn.exec_driver_sql(f'SELECT * FROM "{table}"').all()
                dumped.append(f"{table}: {rows!r}")
        return "\n".join(dumped)


_JSON_COLUMNS = {"tool_calls", "metadata", "arguments", "validated_arguments"}


def _decoded(column: str, value: Any) -> Any:
    """JSON columns as values on both backends (SQLite hands them out as text)."""
    if column in _JSON_COLUMNS and isinstance(value, str):
        return json.loads(value)
    return value


@pytest.fixture
def db(db_url: str, ledger: Ledger) -> Iterator[Database]:
    """SQL on the ledger's database, with this module's own queries."""
    database = Database(db_url)
    yield database
    database.engine.dispose()


@pytest.fixture(scope="module")
def loopback() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


@pytest.fixture
def fake_provider(loopback: FakeProvider) -> FakeProvider:
    """The suite's ``fake_provider``, one server for the whole module: stopping a server takes
    up to half a second (``serve_forever``'s poll interval), most of this module's run time
    if every test paid it. Each test starts with an empty script and no requests."""
    with httpx.Client(base_url=loopback.url) as client:
        while loopback.remaining:  # what the last test left unused
            client.post("/drain", json={})
    loopback.requests.clear()
    return loopback


@pytest.fixture
def sleeps() -> list[float]:
    """The delays the retry policy asked for: nothing really sleeps."""
    return []


Connect = Callable[..., HttpProvider]


@pytest.fixture
def connect(api: Api, fake_provider: FakeProvider, sleeps: list[float]) -> Iterator[Connect]:
    """A client of ``api`` for the loopback server, closed after the test."""
    made: list[HttpProvider] = []

    def factory(**options: Any) -> HttpProvider:
        options.setdefault(
            "retry",
            RetryPolicy(max_retries=3, initial_delay=0.01, jitter=False, sleep=sleeps.append),
        )
        options.setdefault("prices", PRICES)
        llm = api.cls(options.pop("model", api.model), base_url=api.url(fake_provider), **options)
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        llm.close()


def build(llm: HttpProvider, ledger: Ledger, *tools: FunctionTool) -> Agent:
    return (
        AgentBuilder()
        .with_llm(llm)
        .with_tools(tools)
        .with_system_prompt(SYSTEM)
        .with_ledger(ledger)
        .build()
    )


def received(server: FakeProvider, api: Api) -> list[dict[str, Any]]:
    """The bodies of the requests the server received, after checking where they went."""
    assert {(r.method, r.path) for r in server.requests} <= {("POST", api.path)}
    return server.bodies()


# -- a run of several steps ------------------------------------------------------------------------


def test_a_multi_step_tool_run_speaks_the_wire_format_and_is_recorded(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
    add_tool: FunctionTool,
) -> None:
    fake_provider.push(
        reply(api, "Let me check both cities.", [paris(api), london(api)], step=0),
        reply(api, None, [total(api)], step=1),
        reply(api, ANSWER, step=2),
    )
    agent = build(connect(), ledger, weather_tool, add_tool)

    result = agent.run(QUESTION)

    # what the server received
    bodies = received(fake_provider, api)
    assert len(bodies) == 3
    for body in bodies:
        assert body["model"] == api.model
        assert api.tool_parameters(body) == {
            "get_weather": WEATHER_PARAMETERS,
            "add": ADD_PARAMETERS,
        }
    p, lo, t = paris(api).id, london(api).id, total(api).id
    first = [("system", SYSTEM), ("user", QUESTION)]
    second = [
        *first,
        ("assistant", "Let me check both cities.", (p, lo)),
        ("tool", p, "22C and sunny in Paris"),
        ("tool", lo, "22C and sunny in London"),
    ]
    third = [*second, ("assistant", "", (t,)), ("tool", t, "44")]
    assert [api.transcript(b) for b in bodies] == [first, second, third]
    if api is ANTHROPIC:  # the two results share one user turn: turns alternate
        assert [turn["role"] for turn in bodies[2]["messages"]] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]

    # the public API
    assert result.status is AgentStatus.COMPLETED
    assert result.answer == ANSWER
    assert result.usage == sum(api.step_usage, Usage())
    assert result.cost_usd == pytest.approx(sum(api.step_costs))
    assert result.spend.fully_priced
    conversation = ledger.messages(result.conversation_id)
    assert [(m.role, m.content) for m in conversation] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, ANSWER),
    ]
    steps = ledger.steps(result.run_id)
    assert [s.step.step_type for s in steps] == [
        StepType.TOOL_USE,
        StepType.TOOL_USE,
        StepType.RESPONSE,
    ]
    assert tuple(s.step.usage for s in steps) == api.step_usage
    trace = ledger.trace_messages(result.run_id)
    assert [(m.role, m.content, [c.id for c in m.tool_calls], m.tool_call_id) for m in trace] == [
        (Role.ASSISTANT, "Let me check both cities.", [p, lo], None),
        (Role.TOOL, "22C and sunny in Paris", [], p),
        (Role.TOOL, "22C and sunny in London", [], lo),
        (Role.ASSISTANT, "", [t], None),
        (Role.TOOL, "44", [], t),
    ]

    # the database
    assert db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=result.conversation_id,
    ) == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": ANSWER},
    ]
    step_rows = db.rows(
        "SELECT * FROM step_executions WHERE run_id = :r ORDER BY step_index", r=result.run_id
    )
    assert [r["step_type"] for r in step_rows] == ["tool_use", "tool_use", "response"]
    assert [r["model"] for r in step_rows] == [RESPONSE_MODELS[api.name]] * 3
    expected_finish = (
        ["tool_calls", "tool_calls", "stop"]
        if api is not ANTHROPIC
        else ["tool_use", "tool_use", "end_turn"]
    )
    assert [r["finish_reason"] for r in step_rows] == expected_finish
    for row, usage, cost in zip(step_rows, api.step_usage, api.step_costs, strict=True):
        assert {name: row[name] for name in Usage.model_fields} == usage.model_dump()
        assert row["cost_usd"] == pytest.approx(cost)
    calls = db.rows(
        "SELECT s.step_index, t.tool_call_id FROM step_executions s "
        "LEFT JOIN tool_executions t ON t.step_id = s.id "
        "WHERE s.run_id = :r ORDER BY s.step_index, t.position",
        r=result.run_id,
    )
    called = [
        [c["tool_call_id"] for c in calls if c["step_index"] == i and c["tool_call_id"]]
        for i in range(3)
    ]
    assert called == [[p, lo], [t], []]
    assert [r["tool_call_count"] for r in step_rows] == [2, 1, 0]
    assert step_rows[0]["content"] == "Let me check both cities."
    assert step_rows[2]["content"] == ANSWER
    tool_rows = db.rows(
        "SELECT step_index, position, tool_call_id, tool_name, arguments, result, is_error, error "
        "FROM tool_executions WHERE run_id = :r ORDER BY step_index, position",
        r=result.run_id,
    )
    assert [{**r, "is_error": bool(r["is_error"])} for r in tool_rows] == [
        {
            "step_index": 0,
            "position": 0,
            "tool_call_id": p,
            "tool_name": "get_weather",
            "arguments": {"city": "Paris"},
            "result": "22C and sunny in Paris",
            "is_error": False,
            "error": None,
        },
        {
            "step_index": 0,
            "position": 1,
            "tool_call_id": lo,
            "tool_name": "get_weather",
            "arguments": {"city": "London"},
            "result": "22C and sunny in London",
            "is_error": False,
            "error": None,
        },
        {
            "step_index": 1,
            "position": 0,
            "tool_call_id": t,
            "tool_name": "add",
            "arguments": {"a": 22, "b": 22},
            "result": "44",
            "is_error": False,
            "error": None,
        },
    ]
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=result.run_id)
    totals = sum(api.step_usage, Usage())
    assert {name: run[name] for name in Usage.model_fields} == totals.model_dump()
    assert (run["status"], run["stop_reason"], run["step_count"], run["error"]) == (
        "completed",
        "completed",
        3,
        None,
    )
    assert run["model"] == RESPONSE_MODELS[api.name]
    assert run["cost_usd"] == pytest.approx(sum(api.step_costs))
    assert bool(run["fully_priced"]) is True
    assert db.rows("SELECT id FROM execution_buffer_rows WHERE run_id = :r", r=result.run_id) == []


def test_anthropic_thinking_blocks_travel_back_with_their_signature_and_are_recorded(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, weather_tool: FunctionTool
) -> None:
    thinking = anthropic_thinking("The user wants Paris; call the tool.", signature="sig-Zk1x0Q==")
    fake_provider.push(
        Reply(
            anthropic_message(
                thinking, anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_p")
            )
        ),
        Reply(anthropic_message(anthropic_text("22C in Paris."))),
    )
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url) as llm:
        result = build(llm, ledger, weather_tool).run("Weather in Paris?")

    second = fake_provider.bodies()[1]
    assert second["messages"][1] == {
        "role": "assistant",
        "content": [
            thinking,
            {
                "type": "tool_use",
                "id": "toolu_p",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
        ],
    }
    assert result.answer == "22C in Paris."
    step = db.row(
        "SELECT reasoning, metadata FROM step_executions WHERE run_id = :r AND step_index = 0",
        r=result.run_id,
    )
    assert step["reasoning"] == "The user wants Paris; call the tool."
    assert step["metadata"]["thinking_blocks"] == [thinking]
    assert db.rows(
        "SELECT reasoning, metadata FROM conversation_messages WHERE conversation_id = :c "
        "AND role = 'assistant'",
        c=result.conversation_id,
    ) == [{"reasoning": None, "metadata": None}]


def test_responses_reasoning_items_travel_back_in_place_and_again_when_the_run_resumes(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, weather_tool: FunctionTool
) -> None:
    reasoning = responses_reasoning("The user wants Paris; call the tool.", encrypted="gAAAA-Zk1")
    fake_provider.push(
        Reply(
            responses_response(
                reasoning, responses_function_call("get_weather", {"city": "Paris"}, "call_p")
            )
        ),
        Reply(openai_error("The server had an error"), status=500),
        Reply(responses_response(responses_text("22C in Paris."))),
    )
    never = RetryPolicy(max_retries=0)
    with OpenAIResponses("gpt-5-mini", base_url=fake_provider.openai_url, retry=never) as llm:
        failed = build(llm, ledger, weather_tool).run("Weather in Paris?")
    with OpenAIResponses("gpt-5-mini", base_url=fake_provider.openai_url) as llm:
        resumed = build(llm, ledger, weather_tool).resume(failed.run_id)

    assert (failed.status, resumed.status) == (AgentStatus.FAILED, AgentStatus.COMPLETED)
    assert resumed.answer == "22C in Paris."
    first, second, again = received(fake_provider, RESPONSES)
    assert first["instructions"] == SYSTEM
    assert (first["store"], first["include"]) == (False, ["reasoning.encrypted_content"])
    assert second["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        reasoning,
        {
            "type": "function_call",
            "call_id": "call_p",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_p", "output": "22C and sunny in Paris"},
    ]
    assert again["input"] == second["input"]  # read back from the ledger, not from memory
    step = db.row(
        "SELECT reasoning, metadata FROM step_executions WHERE run_id = :r AND step_index = 0",
        r=failed.run_id,
    )
    assert step["reasoning"] == "The user wants Paris; call the tool."
    assert step["metadata"]["reasoning_items"] == [reasoning]


# -- retries inside a run --------------------------------------------------------------------------

RETRIED = {
    "429-with-retry-after": (
        lambda api: [
            error(api, 429, "Rate limit reached for requests", headers={"retry-after": "2"})
        ],
        [{"attempt": 1, "status": 429, "delay_s": 2.0}],
    ),
    "two-500s": (
        lambda api: [error(api, 500, "The server had an error")] * 2,
        [
            {"attempt": 1, "status": 500, "delay_s": 0.01},
            {"attempt": 2, "status": 500, "delay_s": 0.02},
        ],
    ),
}


@pytest.mark.parametrize("scenario", list(RETRIED))
def test_a_retried_inference_succeeds_and_the_trace_keeps_its_retries(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    sleeps: list[float],
    weather_tool: FunctionTool,
    scenario: str,
) -> None:
    failures, retries = RETRIED[scenario]
    fake_provider.push(
        *failures(api),
        reply(api, None, [paris(api)], step=0),
        reply(api, "22C in Paris.", step=2),
    )

    result = build(connect(), ledger, weather_tool).run("Weather in Paris?")

    bodies = received(fake_provider, api)
    assert len(bodies) == len(retries) + 2
    assert all(b == bodies[0] for b in bodies[: len(retries) + 1])  # the same request, again
    assert sleeps == [r["delay_s"] for r in retries]
    assert result.status is AgentStatus.COMPLETED
    assert result.answer == "22C in Paris."
    assert len(ledger.steps(result.run_id)) == 2  # retries are not steps
    (assistant, _result) = ledger.trace_messages(result.run_id)
    assert assistant.metadata["retries"] == retries
    metadata = db.rows(
        "SELECT metadata FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    )
    assert metadata[0]["metadata"]["retries"] == retries
    assert "retries" not in (metadata[1]["metadata"] or {})


@pytest.mark.serial  # the retry must be answered within the 0.3 s read timeout
def test_a_read_timeout_is_retried_and_the_run_goes_on(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(
        reply(api, "too late", delay=0.6),
        reply(api, None, [paris(api)]),
        reply(api, "22C in Paris."),
    )

    result = build(connect(timeout=0.3), ledger, weather_tool).run("Weather in Paris?")

    assert len(fake_provider.requests) == 3
    assert result.status is AgentStatus.COMPLETED
    assert result.answer == "22C in Paris."
    step = db.row(
        "SELECT metadata FROM step_executions WHERE run_id = :r AND step_index = 0",
        r=result.run_id,
    )
    assert step["metadata"]["retries"] == [{"attempt": 1, "status": None, "delay_s": 0.01}]


def test_a_read_timeout_that_lasts_fails_the_run_saying_so(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(reply(api, "too late", delay=0.6))
    llm = connect(timeout=0.3, retry=RetryPolicy(max_retries=0))

    result = build(llm, ledger, weather_tool).run("Weather in Paris?")

    assert len(fake_provider.requests) == 1
    assert result.status is AgentStatus.FAILED
    assert result.error is not None
    assert result.error.startswith(f"ProviderTimeoutError: {api.name} timed out while waiting")
    assert "Pass a longer timeout=" in result.error
    run = db.row("SELECT status, error FROM agent_runs WHERE id = :r", r=result.run_id)
    assert run == {"status": "failed", "error": result.error}


# -- failures that end the run ---------------------------------------------------------------------


def test_a_401_fails_the_run_after_one_request_naming_the_key_variable(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    sleeps: list[float],
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(
        error(api, 401, "invalid x-api-key", headers={"x-request-id": "req_401"}),
        reply(api, "never sent"),
    )

    result = build(connect(api_key="sk-wrong-key-000000"), ledger, weather_tool).run("Weather?")

    assert len(fake_provider.requests) == 1
    assert sleeps == []
    assert result.status is AgentStatus.FAILED
    assert result.answer is None
    assert result.error == (
        f"ProviderAuthenticationError: {api.name} refused the API key (HTTP 401: invalid "
        f"x-api-key; type: invalid_request_error, request id: req_401). Set "
        f"{api.key_variable} to a valid key (or pass api_key=) and check that "
        "the key may use this model."
    )
    run = db.row("SELECT status, error, step_count FROM agent_runs WHERE id = :r", r=result.run_id)
    assert run == {"status": "failed", "error": result.error, "step_count": 1}
    assert db.rows(
        "SELECT step_type, error FROM step_executions WHERE run_id = :r", r=result.run_id
    ) == [{"step_type": "error", "error": result.error}]
    assert db.rows(
        "SELECT role FROM conversation_messages WHERE conversation_id = :c",
        c=result.conversation_id,
    ) == [{"role": "user"}]


def test_a_run_whose_provider_keeps_failing_ends_failed_and_resumes_later(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(
        error(api, 429, "Rate limit reached", headers={"retry-after": "0"}),
        reply(api, None, [paris(api)]),
        *[error(api, 500, "The server had an error while processing your request")] * 3,
    )
    agent = build(
        connect(retry=RetryPolicy(max_retries=2, sleep=lambda _: None)), ledger, weather_tool
    )

    failed = agent.run("Weather in Paris?")

    assert len(fake_provider.requests) == 5
    assert failed.status is AgentStatus.FAILED
    assert failed.error is not None
    assert failed.error.startswith(f"ProviderServerError: {api.name} failed on its side (HTTP 500")
    assert "The run is kept: resume it later." in failed.error
    run = db.row("SELECT status, error FROM agent_runs WHERE id = :r", r=failed.run_id)
    assert run == {"status": "failed", "error": failed.error}
    p = paris(api).id
    buffer = db.rows(
        "SELECT role, content, tool_call_id, metadata FROM execution_buffer_rows "
        "WHERE run_id = :r ORDER BY seq",
        r=failed.run_id,
    )
    assert [{k: r[k] for k in ("role", "content", "tool_call_id")} for r in buffer] == [
        {"role": "assistant", "content": "", "tool_call_id": None},
        {"role": "tool", "content": "22C and sunny in Paris", "tool_call_id": p},
    ]
    assert buffer[0]["metadata"]["retries"] == [{"attempt": 1, "status": 429, "delay_s": 0.0}]
    assert [m.role for m in ledger.messages(failed.conversation_id)] == [Role.USER]

    fake_provider.push(reply(api, "22C in Paris."))
    resumed = agent.resume(failed.run_id)

    assert resumed.run_id == failed.run_id
    assert resumed.status is AgentStatus.COMPLETED
    assert resumed.answer == "22C in Paris."
    bodies = received(fake_provider, api)
    assert api.transcript(bodies[-1]) == api.transcript(bodies[2])  # the failed request, again
    assert api.transcript(bodies[-1])[-2:] == [
        ("assistant", "", (p,)),
        ("tool", p, "22C and sunny in Paris"),
    ]
    assert db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=failed.conversation_id,
    ) == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "22C in Paris."},
    ]
    assert db.rows("SELECT id FROM execution_buffer_rows WHERE run_id = :r", r=failed.run_id) == []
    assert db.row("SELECT status, error FROM agent_runs WHERE id = :r", r=failed.run_id) == {
        "status": "completed",
        "error": None,
    }
    assert [s.step.step_type for s in ledger.steps(failed.run_id)] == [
        StepType.TOOL_USE,
        StepType.ERROR,  # the failed inference stays in the trace
        StepType.RESPONSE,
    ]
    assert ledger.run(failed.run_id).fully_priced is True


# -- tool calls the model got wrong ----------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"city": "Par'])
def test_invalid_tool_call_json_is_answered_with_an_error_the_model_sees(
    fake_provider: FakeProvider,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
    raw: str,
) -> None:
    fake_provider.push(
        Reply(openai_completion(None, [openai_tool_call("get_weather", raw, "call_bad")])),
        Reply(
            openai_completion(None, [openai_tool_call("get_weather", {"city": "Paris"}, "call_ok")])
        ),
        Reply(openai_completion("22C in Paris.")),
    )
    with OpenAIChat("gpt-4o-mini", base_url=fake_provider.openai_url) as llm:
        result = build(llm, ledger, weather_tool).run("Weather in Paris?")

    assert result.status is AgentStatus.COMPLETED
    assert result.answer == "22C in Paris."
    second = fake_provider.bodies()[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert second[3]["role"] == "tool"
    assert second[3]["tool_call_id"] == "call_bad"
    assert second[3]["content"].startswith(
        f"Error: the arguments for tool 'get_weather' are not a JSON object: {raw!r}."
    )
    assert "Call it again with the arguments as one JSON object." in second[3]["content"]
    tools = db.rows(
        "SELECT tool_call_id, arguments, validated_arguments, is_error, error, result "
        "FROM tool_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    )
    assert [(t["tool_call_id"], bool(t["is_error"])) for t in tools] == [
        ("call_bad", True),
        ("call_ok", False),
    ]
    assert tools[0]["validated_arguments"] is None
    assert tools[0]["result"] == second[3]["content"]
    assert tools[0]["error"] is not None and "not a JSON object" in tools[0]["error"]
    call = db.row(
        "SELECT tool_call_id, tool_name, arguments, metadata FROM tool_executions "
        "WHERE run_id = :r AND step_index = 0 AND position = 0",
        r=result.run_id,
    )
    assert (call["tool_call_id"], call["tool_name"], call["arguments"]) == (
        "call_bad",
        "get_weather",
        {},
    )
    assert call["metadata"]["raw_arguments"] == raw


# -- prices ----------------------------------------------------------------------------------------


def test_a_run_whose_model_has_no_price_has_no_cost_and_is_not_fully_priced(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(
        reply(api, None, [paris(api)], model="my-local-model"),
        reply(api, "22C in Paris.", model="my-local-model"),
    )

    result = build(connect(model="my-local-model"), ledger, weather_tool).run("Weather?")

    assert result.status is AgentStatus.COMPLETED
    assert result.cost_usd is None
    assert result.spend.fully_priced is False
    assert result.usage.total_tokens > 0
    assert ledger.run(result.run_id).fully_priced is False
    assert (
        db.rows("SELECT cost_usd FROM step_executions WHERE run_id = :r", r=result.run_id)
        == [{"cost_usd": None}] * 2
    )
    run = db.row(
        "SELECT cost_usd, fully_priced, input_tokens FROM agent_runs WHERE id = :r", r=result.run_id
    )
    assert run["cost_usd"] is None
    assert bool(run["fully_priced"]) is False
    assert run["input_tokens"] == result.usage.input_tokens


def test_a_run_with_one_unpriced_step_costs_the_priced_ones_and_says_it_is_partial(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
) -> None:
    fake_provider.push(
        reply(api, None, [paris(api)], step=0),
        reply(api, "22C in Paris.", step=2, model="my-local-model"),
    )

    result = build(connect(), ledger, weather_tool).run("Weather?")

    assert result.cost_usd == pytest.approx(api.step_costs[0])
    assert result.spend.fully_priced is False
    steps = db.rows(
        "SELECT cost_usd FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    )
    assert steps[0]["cost_usd"] == pytest.approx(api.step_costs[0])
    assert steps[1]["cost_usd"] is None
    run = db.row("SELECT cost_usd, fully_priced FROM agent_runs WHERE id = :r", r=result.run_id)
    assert run["cost_usd"] == pytest.approx(api.step_costs[0])
    assert bool(run["fully_priced"]) is False


# -- no secret is ever stored ----------------------------------------------------------------------

SECRETS = {
    OPENAI.name: "sk-proj-AgentLedgerE2E-9f3Kq7Zx2Lm8Wv4T",
    ANTHROPIC.name: "sk-ant-api03-AgentLedgerE2E-9f3Kq7Zx2Lm8",
}


def _sqlite_bytes(db_url: str) -> bytes:
    """Every byte of the SQLite database file and of its -wal, -shm and -journal files."""
    path = Path(make_url(db_url).database or "")
    files = sorted(path.parent.glob(path.name + "*"))
    assert path in files
    return b"".join(f.read_bytes() for f in files)


def test_no_api_key_reaches_the_database_the_logs_or_the_output(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    db_url: str,
    ledger: Ledger,
    db: Database,
    weather_tool: FunctionTool,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    key = SECRETS[api.name]
    echo = f"Incorrect API key provided: {key}. Your key {key} is not valid."
    fake_provider.push(
        # a run of two steps
        reply(api, "Checking.", [paris(api)]),
        reply(api, "22C in Paris."),
        # a run retried after a 429 whose body quotes the key
        error(api, 429, f"Rate limit reached for key {key}", headers={"retry-after": "0"}),
        reply(api, "Still 22C."),
        # a run refused with a 401 that echoes the key back
        error(api, 401, echo),
    )
    llm = connect(api_key=key)
    agent = build(llm, ledger, weather_tool)

    first = agent.run("Weather in Paris?")
    second = agent.run("And now?", first.conversation_id)
    third = agent.run("And now?", first.conversation_id)
    for result in (first, second, third):
        print(result.status, result.error, result.model_dump_json())
    print(repr(llm), repr(agent), repr(ledger))

    # the key was in play: the server got it on every request
    assert [api.credentials(r.headers) for r in fake_provider.requests] == [
        f"Bearer {key}" if api is not ANTHROPIC else key
    ] * 5
    assert (first.status, second.status, third.status) == (
        AgentStatus.COMPLETED,
        AgentStatus.COMPLETED,
        AgentStatus.FAILED,
    )
    assert any(r.name.startswith(("httpx", "httpcore")) for r in caplog.records)
    assert any(r.name == "agentledger.llm" for r in caplog.records)

    output = capsys.readouterr()
    logs = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for where, content in [("stdout", output.out), ("stderr", output.err), ("logs", logs)]:
        assert key not in content, where
        assert f"Bearer {key}" not in content, where

    stored = db.everything_as_text()
    assert "22C in Paris." in stored and "Still 22C." in stored
    assert key not in stored
    if db.dialect == "sqlite":
        written = _sqlite_bytes(db_url)
        ledger.close()
        db.engine.dispose()
        for content in (written, _sqlite_bytes(db_url)):
            assert b"Still 22C." in content
            assert key.encode() not in content
            assert key.encode("utf-16-le") not in content
    assert third.error is not None and "[redacted]" in third.error


# -- structured output through a run ---------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", ['{"city": "Paris", "celsius": 22}', "Sorry, I cannot say."], ids=["json", "prose"]
)
def test_a_run_with_a_response_format_sends_it_and_records_the_answer_as_text(
    api: Api,
    fake_provider: FakeProvider,
    connect: Connect,
    ledger: Ledger,
    db: Database,
    answer: str,
) -> None:
    schema: dict[str, Any] = {
        "title": "weather",
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
    }
    fake_provider.push(reply(api, answer, step=2))
    agent = (
        AgentBuilder()
        .with_llm(connect())
        .with_model_settings(ModelSettings(response_format=schema))
        .with_ledger(ledger)
        .build()
    )

    result = agent.run(QUESTION)

    [body] = received(fake_provider, api)
    assert "response_format" in body or "text" in body or "output_config" in body
    assert result.status is AgentStatus.COMPLETED
    assert result.answer == answer
    assert db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=result.conversation_id,
    ) == [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": answer}]

"""``LedgerSession``, the OpenAI Agents SDK's session kept in the ledger, driven by the SDK itself:
its ``Runner`` runs agents on a fake model (the SDK's ``Model`` interface, no network) through
several turns, a tool and a handoff. With ``separate_trace=False`` the session reads back what
the SDK's own ``SQLiteSession`` does for the same script; with the default, the conversation
holds the user and assistant messages and the runs' steps and tool executions the trace, in
SQL and in the analytics views. Then ``pop_item`` and ``clear_session``, which keep every row,
a session continued from other ledger handles, and items the session keeps or refuses."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.items import ModelResponse
from agents.memory import Session, SessionSettings
from agents.usage import Usage

from agentledger import Analytics
from agentledger._values import AgentState, AgentStatus, new_id
from agentledger.errors import (
    ConfigurationError,
    ConversationBusyError,
    UnstorableTextError,
    UsageError,
)
from agentledger.integrations.openai_agents import AGENT_NAME, ITEMS_KEY, LedgerSession
from agentledger.ledger import Ledger
from support.agents_sdk import FakeModel, add, call, say, think, weather

NO_TRACING = RunConfig(tracing_disabled=True)
TURNS = ("What is 2 + 3?", "Ask the helper for the weather in Paris.", "Thanks!")
SESSION = "user-42"


# --- the script: a lead agent with a tool, and a helper it hands off to -------------------------


def script() -> tuple[Agent[Any], FakeModel, FakeModel]:
    """The lead and its models, fresh: the turns of :data:`TURNS`."""
    helper_model = FakeModel(
        "helper",
        [
            [call("weather", {"city": "Paris"}, "call_weather")],
            [say("It is sunny in Paris.", "msg_helper")],
        ],
    )
    helper = Agent(name="helper", tools=[weather], model=helper_model)
    lead_model = FakeModel(
        "lead",
        [
            [think("add them", "rs_1"), call("add", {"a": 2, "b": 3}, "call_add")],
            [say("2 + 3 = 5.", "msg_sum")],
            [call("transfer_to_helper", {}, "call_handoff")],
            [say("You are welcome.", "msg_bye")],
        ],
    )
    lead = Agent(name="lead", tools=[add], handoffs=[helper], model=lead_model)
    return lead, lead_model, helper_model


async def drive(session: Any, hooks: Any = None) -> tuple[list[str], FakeModel]:
    """The three turns of the script on ``session``: the answers, and the lead's model."""
    lead, lead_model, _ = script()
    answers = []
    for text in TURNS:
        result = await Runner.run(lead, text, session=session, hooks=hooks, run_config=NO_TRACING)
        answers.append(result.final_output)
    return answers, lead_model


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def sdk_items(tmp_path) -> list[Any]:
    """What the SDK's own SQLiteSession holds after the script."""
    session = SQLiteSession(SESSION, tmp_path / "sdk.db")
    try:
        answers, _ = run(drive(session))
        assert answers == ["2 + 3 = 5.", "It is sunny in Paris.", "You are welcome."]
        return list(run(session.get_items()))
    finally:
        session.close()


@pytest.fixture
def second_handle(db_url: str, ledger: Ledger) -> Iterator[Ledger]:
    with Ledger.open(db_url) as opened:
        yield opened


# --- the SDK drives the session ------------------------------------------------------------------


def test_the_session_is_the_sdks_session_protocol(ledger):
    session = LedgerSession(SESSION, ledger)
    assert isinstance(session, Session)
    assert session.session_id == SESSION
    assert session.session_settings == SessionSettings()


def test_with_the_trace_inline_the_items_equal_the_sdks_own_session(ledger, db, sdk_items):
    session = LedgerSession(SESSION, ledger, separate_trace=False)
    answers, _ = run(drive(session))

    assert answers == ["2 + 3 = 5.", "It is sunny in Paris.", "You are welcome."]
    assert run(session.get_items()) == sdk_items
    types = [item.get("type", "message") for item in sdk_items]
    assert {"reasoning", "function_call", "function_call_output"} <= set(types)
    # Each call's output is stored once, in its tool execution; its item keeps the rest.
    kept = [
        entry
        for metadata in db.column("SELECT metadata FROM step_executions")
        for entry in _json(metadata)[ITEMS_KEY]
        if entry["item"]["type"] == "function_call_output"
    ]
    assert [(e["item"]["output"], e["output_in"]) for e in kept] == [(None, "tool_executions")] * 3


def test_by_default_the_model_sees_the_conversation_and_the_trace_stays_in_the_runs(ledger, db):
    session = LedgerSession(SESSION, ledger)
    _, lead_model = run(drive(session))

    items = run(session.get_items())
    said = [(item["role"], _text(item)) for item in items]
    assert said == [
        ("user", TURNS[0]),
        ("assistant", "2 + 3 = 5."),
        ("user", TURNS[1]),
        ("assistant", "It is sunny in Paris."),
        ("user", TURNS[2]),
        ("assistant", "You are welcome."),
    ]
    # The third turn's first model call was sent the conversation, and no earlier tool call.
    last_input = lead_model.inputs[-1]
    assert [item.get("type", "message") for item in last_input] == ["message"] * 5
    # The conversation, in SQL: user messages and answers only.
    rows = db.rows(
        "SELECT role, content, section FROM conversation_messages "
        "WHERE conversation_id = :c ORDER BY seq",
        c=SESSION,
    )
    assert [(r["role"], r["content"], r["section"]) for r in rows] == [
        (role, text, "messages") for role, text in said
    ]
    # The trace, in SQL: the tool executions and the reasoning of the runs of the session.
    tools = db.rows(
        "SELECT t.tool_name, t.arguments, t.result FROM tool_executions t "
        "JOIN agent_runs r ON r.id = t.run_id WHERE r.conversation_id = :c "
        "ORDER BY r.started_at, r.id, t.step_index, t.position",
        c=SESSION,
    )
    assert [(t["tool_name"], _json(t["arguments"]), t["result"]) for t in tools] == [
        ("add", {"a": 2, "b": 3}, "5"),
        ("transfer_to_helper", {}, json.dumps({"assistant": "helper"})),
        ("weather", {"city": "Paris"}, "sunny in Paris"),
    ]
    reasoning = db.column(
        "SELECT s.reasoning FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
        "WHERE r.conversation_id = :c AND s.reasoning IS NOT NULL",
        c=SESSION,
    )
    assert reasoning == ["add them"]
    assert set(db.column("SELECT agent_name FROM agent_runs")) == {AGENT_NAME}
    assert db.column("SELECT id FROM conversations") == [SESSION]
    assert ledger.verify() == []


def test_the_session_id_is_the_conversations_id_and_every_add_is_a_run(ledger):
    session = LedgerSession(SESSION, ledger)
    run(drive(session))

    conversation = ledger.conversation(SESSION)
    assert conversation.metadata_ == {"openai_agents_session": SESSION}
    runs = ledger.runs(SESSION)
    # Each turn: its input, then each model call's items (the SDK saves them as they come).
    assert len(runs) == 3 + 6
    assert {r.status for r in runs} == {"completed"}
    assert sum(r.step_count for r in runs) == 6


def test_the_hooks_record_each_model_calls_usage_on_its_step_and_run(ledger, db):
    session = LedgerSession(SESSION, ledger)
    run(drive(session, hooks=session.hooks))

    steps = db.rows(
        "SELECT s.input_tokens, s.output_tokens, s.cache_read_tokens, s.reasoning_tokens, "
        "s.metadata FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
        "ORDER BY r.started_at, r.id, s.step_index"
    )
    assert len(steps) == 6
    assert {(s["input_tokens"], s["output_tokens"], s["cache_read_tokens"]) for s in steps} == {
        (100, 20, 40)
    }
    assert {s["reasoning_tokens"] for s in steps} == {5}
    agents = [_json(s["metadata"])["openai_agents_agent"] for s in steps]
    assert agents == ["lead", "lead", "lead", "helper", "helper", "lead"]
    assert sum(r.input_tokens for r in ledger.runs(SESSION)) == 600
    assert sum(db.column("SELECT input_tokens FROM agent_runs")) == 600


def test_a_model_call_whose_items_were_never_saved_is_not_counted_for_the_next_turn(ledger, db):
    @function_tool(failure_error_function=None)
    def explode() -> str:
        """Fails."""
        raise RuntimeError("the tool broke")

    class Counting(FakeModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            response = await super().get_response(*args, **kwargs)
            response.usage = Usage(requests=1, input_tokens=len(self.inputs), total_tokens=1)
            return response

    model = Counting("lead", [[call("explode", {}, "call_x")], [say("Fine now.", "msg_ok")]])
    agent = Agent(name="lead", tools=[explode], model=model)
    session = LedgerSession(SESSION, ledger)
    with pytest.raises(Exception, match="the tool broke"):
        run(Runner.run(agent, "break", session=session, hooks=session.hooks, run_config=NO_TRACING))
    run(Runner.run(agent, "again", session=session, hooks=session.hooks, run_config=NO_TRACING))

    # The first call's items never reached the session; the step holds the second call's usage.
    assert db.column("SELECT input_tokens FROM step_executions") == [2]
    assert [item["role"] for item in run(session.get_items())] == ["user", "user", "assistant"]


def test_without_the_hooks_the_usage_is_zero_and_nothing_else_changes(ledger, db):
    run(drive(LedgerSession(SESSION, ledger)))
    assert set(db.column("SELECT input_tokens FROM step_executions")) == {0}


def test_the_analytics_views_read_the_sessions_trace(ledger, db_url):
    session = LedgerSession(SESSION, ledger)
    run(drive(session, hooks=session.hooks))

    with Analytics.open(db_url) as analytics:
        calls = analytics.sql("SELECT tool_name, calls FROM tool_stats ORDER BY tool_name")
        assert calls.fetchall() == [("add", 1), ("transfer_to_helper", 1), ("weather", 1)]
        usage = analytics.sql(
            "SELECT steps, input_tokens, cache_read_tokens FROM conversation_usage "
            "WHERE conversation_id = ?",
            [SESSION],
        )
        assert usage.fetchall() == [(6, 600, 240)]


# --- limits --------------------------------------------------------------------------------------


@pytest.mark.parametrize("separate_trace", [True, False])
def test_a_limit_gives_the_newest_items_as_the_sdk_does(ledger, separate_trace):
    session = LedgerSession(SESSION, ledger, separate_trace=separate_trace)
    run(drive(session))
    every = run(session.get_items())

    assert run(session.get_items(limit=2)) == every[-2:]
    assert run(session.get_items(limit=0)) == []
    limited = LedgerSession(
        SESSION, ledger, separate_trace=separate_trace, session_settings=SessionSettings(limit=3)
    )
    assert run(limited.get_items()) == every[-3:]
    assert run(limited.get_items(limit=1)) == every[-1:]


# --- pop_item and clear_session keep every row ---------------------------------------------------


def test_pop_item_takes_the_newest_message_out_of_the_session_and_keeps_its_row(ledger, db):
    session = LedgerSession(SESSION, ledger)
    run(drive(session))
    before = run(session.get_items())
    rows = db.scalar("SELECT count(*) FROM conversation_messages")

    popped = run(session.pop_item())

    assert popped == before[-1]
    assert run(session.get_items()) == before[:-1]
    assert db.scalar("SELECT count(*) FROM conversation_messages") == rows
    assert [m.content for m in ledger.history(SESSION)][-1] == "You are welcome."
    removal = ledger.runs(SESSION)[-1]
    assert removal.agent_name == AGENT_NAME
    assert removal.metadata_ is not None
    assert len(removal.metadata_["openai_agents_removed"]) == 1
    # Popping again takes the user message before it, then the next add comes after.
    assert _text(run(session.pop_item())) == TURNS[2]
    run(session.add_items([{"role": "user", "content": "Thanks a lot!"}]))
    assert run(session.get_items()) == [*before[:-2], {"role": "user", "content": "Thanks a lot!"}]


def test_pop_item_with_the_trace_inline_takes_the_newest_item_of_any_kind(ledger):
    session = LedgerSession(SESSION, ledger, separate_trace=False)
    run(
        session.add_items(
            [
                {"role": "user", "content": "add"},
                {"type": "function_call", "call_id": "c", "name": "add", "arguments": "{}"},
            ]
        )
    )
    popped = run(session.pop_item())
    assert popped == {"type": "function_call", "call_id": "c", "name": "add", "arguments": "{}"}
    assert run(session.get_items()) == [{"role": "user", "content": "add"}]
    # The separated view of the same session never showed the call.
    assert run(LedgerSession(SESSION, ledger).get_items()) == [{"role": "user", "content": "add"}]


def test_pop_item_of_an_empty_session_is_none_and_writes_nothing(ledger, db):
    session = LedgerSession(SESSION, ledger)
    assert run(session.pop_item()) is None
    run(session.clear_session())
    assert db.scalar("SELECT count(*) FROM conversations") == 0
    assert db.scalar("SELECT count(*) FROM agent_runs") == 0


def test_clear_session_empties_the_session_and_keeps_the_history(ledger, db):
    session = LedgerSession(SESSION, ledger, separate_trace=False)
    run(drive(session))
    messages = db.scalar("SELECT count(*) FROM conversation_messages")
    tools = db.scalar("SELECT count(*) FROM tool_executions")

    run(session.clear_session())

    assert run(session.get_items()) == []
    assert run(LedgerSession(SESSION, ledger).get_items()) == []
    assert run(session.pop_item()) is None
    assert db.scalar("SELECT count(*) FROM conversation_messages") == messages
    assert db.scalar("SELECT count(*) FROM tool_executions") == tools
    assert len(ledger.history(SESSION)) == messages
    cleared = ledger.runs(SESSION)[-1].metadata_
    assert cleared == {"openai_agents_session": SESSION, "openai_agents_cleared": True}
    # The session goes on after it: a new turn sees only itself.
    answers, lead_model = run(drive(session))
    assert answers[0] == "2 + 3 = 5."
    assert lead_model.inputs[0] == [{"role": "user", "content": TURNS[0]}]


# --- one session, many ledger handles ------------------------------------------------------------


def test_a_session_id_continues_the_same_session_from_another_ledger_handle(
    ledger, second_handle, db_url
):
    first = LedgerSession(SESSION, ledger)
    run(first.add_items([{"role": "user", "content": "hello"}]))
    second = LedgerSession(SESSION, second_handle)
    assert run(second.get_items()) == [{"role": "user", "content": "hello"}]

    run(second.add_items([{"role": "assistant", "content": "hi"}]))
    assert run(first.get_items()) == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
    ]
    assert run(first.pop_item()) == {"role": "assistant", "content": "hi"}
    assert run(second.get_items()) == [{"role": "user", "content": "hello"}]
    with Ledger.open(db_url) as reopened:
        assert run(LedgerSession(SESSION, reopened).get_items()) == [
            {"role": "user", "content": "hello"}
        ]
    assert run(LedgerSession("someone-else", ledger).get_items()) == []


def test_two_sessions_on_one_ledger_keep_apart(ledger):
    a, b = LedgerSession("a-session", ledger), LedgerSession("b-session", ledger)
    run(a.add_items([{"role": "user", "content": "from a"}]))
    run(b.add_items([{"role": "user", "content": "from b"}]))
    run(b.clear_session())
    assert run(a.get_items()) == [{"role": "user", "content": "from a"}]
    assert run(b.get_items()) == []


# --- what the session keeps, and what it refuses -------------------------------------------------


def test_an_item_of_an_unknown_shape_is_kept_in_the_trace_and_comes_back(ledger, db):
    odd = [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}]},
        {"type": "mystery_call", "payload": [1, 2.5, None, {"deep": True}]},
        {"no_type": "at all", "ünïcode": "✓"},
        {"role": "developer", "content": "be brief"},
        {"type": "function_call_output", "call_id": "nowhere", "output": [{"x": 1}]},
    ]
    run(LedgerSession(SESSION, ledger).add_items(odd))

    assert run(LedgerSession(SESSION, ledger, separate_trace=False).get_items()) == odd
    assert run(LedgerSession(SESSION, ledger).get_items()) == odd[:1]
    assert db.column("SELECT content FROM conversation_messages") == ["look"]
    stored = db.column("SELECT metadata FROM step_executions")
    kept = [entry["item"] for m in stored for entry in _json(m)["openai_agents_items"]]
    assert kept == odd[1:]


@pytest.mark.parametrize(
    ("items", "error", "words"),
    [
        ([{"role": "user", "content": object()}], UsageError, "cannot be stored as JSON"),
        ([{"role": "user", "content": float("nan")}], UsageError, "cannot be stored as JSON"),
        (["just text"], UsageError, "is a str, not an item"),
        ({"role": "user", "content": "hi"}, UsageError, "takes a list of items"),
        ([{"role": "user", "content": "a\x00b"}], UnstorableTextError, "NUL"),
    ],
    ids=["object", "nan", "string", "not-a-list", "nul"],
)
def test_an_item_the_ledger_cannot_hold_is_refused_with_the_whole_batch(
    ledger, db, items, error, words
):
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([{"role": "user", "content": "kept"}]))
    batch = [{"role": "assistant", "content": "fine"}, *items] if isinstance(items, list) else items

    with pytest.raises(error, match=words) as raised:
        run(session.add_items(batch))

    assert "nothing was stored" in str(raised.value)
    assert run(session.get_items()) == [{"role": "user", "content": "kept"}]
    assert db.scalar("SELECT count(*) FROM agent_runs") == 1


@pytest.mark.parametrize("session_id", ["", None, 42])
def test_a_session_id_must_be_a_non_empty_string(ledger, session_id):
    with pytest.raises(UsageError, match="non-empty string"):
        LedgerSession(session_id, ledger)


def test_a_session_needs_a_ledger(tmp_path):
    with pytest.raises(UsageError, match=r"Ledger\.open"):
        LedgerSession(SESSION, str(tmp_path / "ledger.db"))  # type: ignore[arg-type]


def test_an_empty_batch_writes_nothing(ledger, db):
    run(LedgerSession(SESSION, ledger).add_items([]))
    assert db.scalar("SELECT count(*) FROM agent_runs") == 0


def _text(item: dict[str, Any]) -> str:
    content = item["content"]
    return content if isinstance(content, str) else content[0]["text"]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --- many writers ------------------------------------------------------------------------------


def test_writes_from_two_handles_at_once_all_land_in_order_of_their_runs(ledger, second_handle):
    sessions = [LedgerSession(SESSION, ledger), LedgerSession(SESSION, second_handle)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for turn in range(5):
                item = {"role": "user", "content": f"writer {n}, turn {turn}"}
                run(sessions[n].add_items([item]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    items = run(sessions[0].get_items())
    assert sorted(item["content"] for item in items) == sorted(
        f"writer {n}, turn {turn}" for n in range(2) for turn in range(5)
    )
    for n in range(2):  # each writer's items in the order it added them
        mine = [item["content"] for item in items if item["content"].startswith(f"writer {n}")]
        assert mine == [f"writer {n}, turn {turn}" for turn in range(5)]
    assert run(sessions[1].get_items()) == items


def test_a_conversation_an_agentledger_run_holds_refuses_the_write_and_loses_nothing(db_url):
    with Ledger.open(db_url, busy_timeout=0.2) as ledger:
        session = LedgerSession(SESSION, ledger)
        run(session.add_items([{"role": "user", "content": "first"}]))
        holder = AgentState(
            conversation_id=SESSION,
            run_id=new_id(),
            status=AgentStatus.RUNNING,
            run_started_at=ledger.clock(),
        )
        ledger.recorder.begin_run(holder, user_message=None, agent_name="other")

        with pytest.raises(ConversationBusyError):
            run(session.add_items([{"role": "user", "content": "second"}]))

        ledger.recorder.fail_run(holder, "given up")
        run(session.add_items([{"role": "user", "content": "second"}]))
        assert [i["content"] for i in run(session.get_items())] == ["first", "second"]


def test_without_the_sdk_the_integration_says_which_extra_to_install():
    script = (
        "import sys\n"
        "sys.modules['agents'] = None  # as if the SDK were not installed\n"
        "from agentledger.integrations.openai_agents import LedgerSession\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert "ConfigurationError" in done.stderr
    assert "pip install 'agentledger[openai-agents]'" in done.stderr
    assert issubclass(ConfigurationError, UsageError)

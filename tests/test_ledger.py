"""The SQL ledger: a run recorded as short transactions (begin, one per step, commit or fail),
one running run per conversation under a fenced lease, failure, crash and recovery, the
ledger's reads, and SQLite's settings. Checked through the public API and with SQL on the real
database, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentledger import (
    AgentStatus,
    ConversationBusyError,
    Message,
    NotFoundError,
    Role,
    RunResult,
    StopReason,
    ToolCall,
    Usage,
    UsageError,
    tool,
)
from agentledger._values import StepType
from agentledger.errors import LeaseLostError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support.ledger import (
    ANSWER,
    QUESTION,
    TOKEN_COLUMNS,
    Database,
    SteppedClock,
    answer,
    begin_by_hand,
    build_agent,
    counting_weather_tool,
    raising,
    weather_call,
)

STEP_0_USAGE = Usage(
    input_tokens=100,
    output_tokens=20,
    cache_read_tokens=40,
    cache_write_tokens=10,
    reasoning_tokens=5,
)
STEP_1_USAGE = Usage(
    input_tokens=150,
    output_tokens=30,
    cache_read_tokens=60,
    cache_write_tokens=0,
    reasoning_tokens=8,
)


# --- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """SQL on the ledger's database, through connections of its own."""
    database = Database(db_url)
    yield database
    database.close()


@pytest.fixture
def open_ledger(db_url: str) -> Iterator[Callable[..., Ledger]]:
    """``Ledger.open(db_url, **options)``; every handle is closed after the test."""
    opened: list[Ledger] = []

    def open_(**options: Any) -> Ledger:
        ledger = Ledger.open(db_url, **options)
        opened.append(ledger)
        return ledger

    yield open_
    for ledger in opened:
        ledger.close()


def now() -> datetime:
    return datetime.now(UTC)


def as_json(value: Any) -> Any:
    """A JSON column's value: text on SQLite (through plain SQL), decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def as_time(value: Any) -> datetime:
    """A timestamp column's value: ISO text on SQLite (through plain SQL), aware on PostgreSQL."""
    if isinstance(value, str):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    assert isinstance(value, datetime)
    return value


def message_rows(db: Database, conversation_id: str) -> list[tuple[Any, ...]]:
    return [
        (r["seq"], r["section"], r["role"], r["content"], r["run_id"])
        for r in db.conversation_rows(conversation_id)
    ]


def observing(
    observations: dict[str, Any],
    label: str,
    observe: Callable[[], Any],
    response: InferenceResponse,
) -> Callable[[InferenceRequest], InferenceResponse]:
    """A scripted response that first records what ``observe`` sees, mid-run.

    Assertions inside a model call would be caught by the driver (a failed model call), so the
    observations are asserted on after the run."""

    def respond(_request: InferenceRequest) -> InferenceResponse:
        try:
            observations[label] = observe()
        except Exception as exc:  # shown by the assertion that reads it
            observations[label] = exc
        return response

    return respond


def snapshot(db: Database, ledger: Ledger) -> dict[str, Any]:
    """The database as another connection sees it while the model is thinking."""
    runs = db.rows("SELECT * FROM agent_runs")
    conversation_id = runs[0]["conversation_id"] if runs else ""
    return {
        "runs": runs,
        "conversations": db.rows("SELECT * FROM conversations"),
        "messages": db.rows("SELECT * FROM conversation_messages ORDER BY seq"),
        "steps": db.rows("SELECT * FROM step_executions ORDER BY step_index"),
        "tools": db.rows("SELECT * FROM tool_executions ORDER BY step_index, position"),
        "buffer": db.rows("SELECT * FROM execution_buffer_rows ORDER BY seq"),
        "lease": ledger.conversation(conversation_id) if conversation_id else None,
        "write_blocked_by": db.write_now(conversation_id),
        "now": now(),
    }


def observed_weather_run(
    db: Database, ledger: Ledger, *, inline: bool = False
) -> tuple[RunResult, dict[str, Any]]:
    """One run with a tool step and an answer step; what the database held during each
    model call."""
    weather, _ = counting_weather_tool()
    seen: dict[str, Any] = {}
    llm = ScriptedLLM(
        [
            observing(
                seen,
                "first model call",
                lambda: snapshot(db, ledger),
                weather_call(
                    content="Let me look.",
                    reasoning="The user wants Paris.",
                    usage=STEP_0_USAGE,
                    metadata={"provider_id": "resp_1"},
                ),
            ),
            observing(
                seen, "second model call", lambda: snapshot(db, ledger), answer(usage=STEP_1_USAGE)
            ),
        ]
    )
    result = build_agent(llm, ledger, tools=[weather], inline=inline).run(QUESTION)
    assert result.status is AgentStatus.COMPLETED, result.error
    for label in ("first model call", "second model call"):
        assert not isinstance(seen.get(label), Exception), seen.get(label)
    return result, seen


def two_tool_steps_then_answer() -> ScriptedLLM:
    """A script with two calls in one step, one in the next, then the answer."""
    calls = (
        ToolCall(id="call_paris", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_rome", name="get_weather", arguments={"city": "Rome"}),
    )
    return ScriptedLLM(
        [
            InferenceResponse(
                content="Two cities.",
                tool_calls=calls,
                reasoning="Check both.",
                usage=STEP_0_USAGE,
                metadata={"provider_id": "resp_1"},
            ),
            weather_call("call_oslo", "Oslo", usage=STEP_1_USAGE),
            answer(usage=Usage(input_tokens=7, output_tokens=3)),
        ]
    )


# --- 1. the run's transactions ------------------------------------------------------------------


def test_begin_stores_the_user_message_and_takes_the_conversations_lease_before_the_model_runs(
    db, open_ledger
):
    ledger = open_ledger()
    result, seen = observed_weather_run(db, ledger)

    during = seen["first model call"]
    assert [(r["id"], r["status"]) for r in during["runs"]] == [(result.run_id, "running")]
    assert during["runs"][0]["conversation_id"] == result.conversation_id
    assert during["runs"][0]["finished_at"] is None
    assert [
        (m["section"], m["seq"], m["role"], m["content"], m["run_id"]) for m in during["messages"]
    ] == [("messages", 0, "user", QUESTION, result.run_id)]
    [conversation] = during["conversations"]
    assert conversation["id"] == result.conversation_id
    assert conversation["lease_run_id"] == result.run_id
    assert conversation["lease_holder"] is not None
    assert conversation["version"] == 0
    assert during["lease"].lease_expires_at > during["now"]
    assert during["steps"] == [] and during["buffer"] == []


def test_each_step_is_committed_with_its_tools_and_trace_before_the_next_model_call(
    db, open_ledger
):
    ledger = open_ledger()
    result, seen = observed_weather_run(db, ledger)

    during = seen["second model call"]
    [step] = during["steps"]
    assert (step["run_id"], step["step_index"], step["step_type"]) == (result.run_id, 0, "tool_use")
    assert step["content"] == "Let me look."
    assert step["reasoning"] == "The user wants Paris."
    assert step["tool_call_count"] == 1  # the call itself is its tool row, below
    assert [step[c] for c in TOKEN_COLUMNS] == [getattr(STEP_0_USAGE, c) for c in TOKEN_COLUMNS]
    [tool] = during["tools"]
    assert (tool["step_id"], tool["tool_call_id"], tool["tool_name"]) == (
        step["id"],
        "call_1",
        "get_weather",
    )
    assert tool["result"] == "22C and sunny in Paris"
    assert as_json(tool["arguments"]) == {"city": "Paris"}
    assert not tool["is_error"]
    assert [(b["step_index"], b["seq"], b["section"], b["role"]) for b in during["buffer"]] == [
        (0, 0, "execution_buffer", "assistant"),
        (0, 1, "execution_buffer", "tool"),
    ]
    assert during["buffer"][0]["id"] == step["message_id"]
    assert during["buffer"][1]["id"] == tool["id"]
    assert during["buffer"][1]["tool_call_id"] == "call_1"
    # the conversation still holds only the user's message: never half a run
    assert [m["role"] for m in during["messages"]] == ["user"]
    assert during["runs"][0]["step_count"] == 1


def test_no_database_transaction_is_open_while_the_model_is_called(db, open_ledger):
    ledger = open_ledger()
    _, seen = observed_weather_run(db, ledger)

    assert seen["first model call"]["write_blocked_by"] is None
    assert seen["second model call"]["write_blocked_by"] is None


def test_commit_appends_the_answer_flushes_the_buffer_closes_the_run_and_frees_the_lease(
    db, open_ledger
):
    ledger = open_ledger()
    result, _ = observed_weather_run(db, ledger)

    assert message_rows(db, result.conversation_id) == [
        (0, "messages", "user", QUESTION, result.run_id),
        (1, "messages", "assistant", ANSWER, result.run_id),
    ]
    assert as_json(db.conversation_rows(result.conversation_id)[1]["tool_calls"]) is None
    assert db.count("execution_buffer_rows", "run_id = :r", r=result.run_id) == 0
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=result.run_id)
    assert (run["status"], run["stop_reason"], run["error"]) == ("completed", "completed", None)
    assert run["step_count"] == 2
    assert run["finished_at"] is not None
    assert run["model"] == "scripted"
    sums = db.row(
        "SELECT "
        + ", ".join(f"SUM({c}) AS {c}" for c in TOKEN_COLUMNS)
        + " FROM step_executions WHERE run_id = :r",
        r=result.run_id,
    )
    expected = STEP_0_USAGE + STEP_1_USAGE
    for column in TOKEN_COLUMNS:
        assert run[column] == sums[column] == getattr(expected, column), column
    conversation = db.row("SELECT * FROM conversations WHERE id = :c", c=result.conversation_id)
    assert conversation["version"] == 1
    assert conversation["lease_holder"] is None
    assert conversation["lease_run_id"] is None
    assert conversation["lease_expires_at"] is None
    assert result.answer == ANSWER
    assert result.usage == expected
    db.assert_runs_consistent()


def test_absent_json_values_are_sql_null_so_that_is_null_queries_work(db, open_ledger):
    ledger = open_ledger()
    result, _ = observed_weather_run(db, ledger)

    # Documented as nullable: an answer has no tool calls, a plain message no metadata, ...
    for table, column, where in [
        ("conversation_messages", "tool_calls", "role = 'user'"),
        ("conversation_messages", "tool_calls", "role = 'assistant'"),
        ("conversation_messages", "metadata", "role = 'user'"),
        ("step_executions", "metadata", "step_type = 'response'"),
        ("tool_executions", "metadata", "1 = 1"),
        ("agent_runs", "metadata", "1 = 1"),
        ("conversations", "metadata", "1 = 1"),
    ]:
        stored = db.rows(f"SELECT {column} AS value FROM {table} WHERE {where}")
        assert stored, (table, where)
        assert db.count(table, f"{where} AND {column} IS NOT NULL") == 0, (table, column, stored)
    assert list(ledger.messages(result.conversation_id)) == list(result.state.messages())


# --- 2. a second run on the conversation --------------------------------------------------------


def test_a_second_run_sees_the_conversation_but_none_of_the_first_runs_trace(db, open_ledger):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = ScriptedLLM([weather_call(reasoning="Paris."), answer(), answer("Rain tomorrow.")])
    agent = build_agent(llm, ledger, tools=[weather])

    first = agent.run(QUESTION)
    second = agent.run("And tomorrow?", conversation_id=first.conversation_id)

    assert second.conversation_id == first.conversation_id
    assert second.run_id != first.run_id
    seen = llm.requests[2].messages
    assert [(m.role, m.content) for m in seen] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, ANSWER),
        (Role.USER, "And tomorrow?"),
    ]
    assert not any(m.is_tool_trace() or m.reasoning for m in seen)
    assert list(seen) == list(ledger.messages(first.conversation_id))[:3]
    assert message_rows(db, first.conversation_id) == [
        (0, "messages", "user", QUESTION, first.run_id),
        (1, "messages", "assistant", ANSWER, first.run_id),
        (2, "messages", "user", "And tomorrow?", second.run_id),
        (3, "messages", "assistant", "Rain tomorrow.", second.run_id),
    ]
    assert db.scalar("SELECT version FROM conversations") == 2
    assert db.count("execution_buffer_rows") == 0
    assert [r.id for r in ledger.runs(first.conversation_id)] == [first.run_id, second.run_id]
    db.assert_runs_consistent()


# --- 3. inline mode -----------------------------------------------------------------------------


def test_inline_mode_commits_the_tool_calls_the_results_and_the_answer_to_the_conversation(
    db, open_ledger
):
    ledger = open_ledger()
    result, seen = observed_weather_run(db, ledger, inline=True)

    rows = db.conversation_rows(result.conversation_id)
    assert [(r["seq"], r["section"], r["role"], r["run_id"]) for r in rows] == [
        (0, "messages", "user", result.run_id),
        (1, "messages", "assistant", result.run_id),
        (2, "messages", "tool", result.run_id),
        (3, "messages", "assistant", result.run_id),
    ]
    assert as_json(rows[1]["tool_calls"]) == [
        {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
    ]
    assert (rows[2]["tool_call_id"], rows[2]["name"], rows[2]["content"]) == (
        "call_1",
        "get_weather",
        "22C and sunny in Paris",
    )
    assert rows[3]["content"] == ANSWER
    assert as_json(rows[3]["tool_calls"]) is None
    assert list(ledger.messages(result.conversation_id)) == list(result.state.messages())
    # while it ran, the step's messages waited in the buffer, filed for the conversation
    during = seen["second model call"]
    assert [m["role"] for m in during["messages"]] == ["user"]
    assert [(b["section"], b["role"]) for b in during["buffer"]] == [
        ("messages", "assistant"),
        ("messages", "tool"),
    ]
    assert db.count("execution_buffer_rows") == 0


# --- 4. reading the ledger ----------------------------------------------------------------------


def test_trace_messages_rebuild_the_runs_trace_exactly_after_its_buffer_was_flushed(
    db, open_ledger
):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = two_tool_steps_then_answer()
    result = build_agent(llm, ledger, tools=[weather]).run(QUESTION)

    assert result.status is AgentStatus.COMPLETED, result.error
    assert db.count("execution_buffer_rows") == 0
    expected = [m for e in result.state.step_executions for m in e.step.trace_messages]
    assert len(expected) == 5  # two calls and their results, one call and its result
    assert list(ledger.trace_messages(result.run_id)) == expected


def test_steps_and_tool_executions_read_back_as_the_run_produced_them(db, open_ledger):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = two_tool_steps_then_answer()
    result = build_agent(llm, ledger, tools=[weather]).run(QUESTION)
    produced = result.state.step_executions

    stored = ledger.steps(result.run_id)

    assert [e.step_index for e in stored] == [0, 1, 2]
    assert [e.step.step_type for e in stored] == [
        StepType.TOOL_USE,
        StepType.TOOL_USE,
        StepType.RESPONSE,
    ]
    for mine, theirs in zip(produced, stored, strict=True):
        assert theirs.step_index == mine.step_index
        assert theirs.step.id == mine.step.id
        assert theirs.step.step_type == mine.step.step_type
        assert theirs.step.usage == mine.step.usage
        assert theirs.outcome == mine.outcome
        assert theirs.step.tool_executions == mine.step.tool_executions
        assert theirs.step.assistant_message == mine.step.assistant_message
        assert theirs.step.response_messages == mine.step.response_messages
        assert (theirs.started_at, theirs.finished_at) == (mine.started_at, mine.finished_at)
    every_tool = tuple(t for e in produced for t in e.step.tool_executions)
    assert ledger.tool_executions(result.run_id) == every_tool
    assert [t.tool_call.arguments["city"] for t in every_tool] == ["Paris", "Rome", "Oslo"]
    positions = db.rows(
        "SELECT step_index, position, tool_call_id FROM tool_executions ORDER BY id"
    )
    assert [(p["step_index"], p["position"], p["tool_call_id"]) for p in positions] == [
        (0, 0, "call_paris"),
        (0, 1, "call_rome"),
        (1, 0, "call_oslo"),
    ]


def test_arguments_that_were_not_json_read_back_exactly_and_are_in_the_tool_rows_metadata(
    db, open_ledger
):
    ledger = open_ledger()
    weather, calls = counting_weather_tool()
    bad = ToolCall(id="call_bad", name="get_weather", raw_arguments="{'city': Paris")
    llm = ScriptedLLM([InferenceResponse(tool_calls=[bad]), answer()])
    result = build_agent(llm, ledger, tools=[weather]).run(QUESTION)

    (stored,) = ledger.tool_executions(result.run_id)
    assert stored.tool_call == bad and stored.is_error and calls == []
    assert stored == result.state.step_executions[0].step.tool_executions[0]
    (row,) = db.rows("SELECT arguments, metadata FROM tool_executions")
    assert as_json(row["metadata"]) == {"raw_arguments": "{'city': Paris"}
    assert as_json(row["arguments"]) == {}


def test_runs_conversations_messages_and_buffer_read_back_what_was_committed(db, open_ledger):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = ScriptedLLM([weather_call(), answer(), answer("Rain tomorrow.")])
    agent = build_agent(llm, ledger, tools=[weather])
    first = agent.run(QUESTION)
    second = agent.run("And tomorrow?", conversation_id=first.conversation_id)
    cid = first.conversation_id

    runs = ledger.runs(cid)
    assert [(r.id, r.status, r.step_count) for r in runs] == [
        (first.run_id, "completed", 2),
        (second.run_id, "completed", 1),
    ]
    assert ledger.run(second.run_id) == runs[1]
    assert runs[0].conversation_id == cid
    assert runs[0].root_run_id == first.run_id and runs[0].depth == 0
    assert runs[0].usage == first.usage
    assert runs[0].finished_at is not None
    conversation = ledger.conversation(cid)
    assert (conversation.id, conversation.kind, conversation.version) == (cid, "main", 2)
    assert conversation.lease_holder is None and conversation.lease_run_id is None
    assert [c.id for c in ledger.conversations()] == [cid]
    assert list(ledger.messages(cid)) == list(second.state.messages())
    assert [m.content for m in ledger.messages(cid)] == [
        QUESTION,
        ANSWER,
        "And tomorrow?",
        "Rain tomorrow.",
    ]
    assert list(ledger.messages(cid, "summary")) == []
    assert list(ledger.buffer(first.run_id)) == []
    assert list(ledger.buffer(second.run_id)) == []


def _two_conversations(ledger: Ledger) -> tuple[RunResult, RunResult]:
    llm = ScriptedLLM([answer(), answer("Sunny in Rome as well.")])
    agent = build_agent(llm, ledger)
    return agent.run(QUESTION), agent.run("And in Rome?")


def test_search_finds_committed_messages_by_their_words_in_any_case(db, open_ledger):
    ledger = open_ledger()
    paris, _ = _two_conversations(ledger)

    [hit] = ledger.search("sunny PARIS")
    assert (hit.conversation_id, hit.section, hit.seq, hit.run_id) == (
        paris.conversation_id,
        "messages",
        1,
        paris.run_id,
    )
    assert hit.message == ledger.messages(paris.conversation_id)[1]
    assert {h.message.content for h in ledger.search("SUNNY")} == {
        ANSWER,
        "Sunny in Rome as well.",
    }
    assert ledger.search("snowing") == []
    assert ledger.search("sunny*") == ledger.search("sunny")


def test_search_is_limited_to_one_conversation_when_asked(db, open_ledger):
    ledger = open_ledger()
    paris, rome = _two_conversations(ledger)

    hits = ledger.search("sunny", conversation_id=rome.conversation_id)

    assert [(h.conversation_id, h.message.content) for h in hits] == [
        (rome.conversation_id, "Sunny in Rome as well.")
    ]
    in_paris = ledger.search("paris", conversation_id=paris.conversation_id)
    assert sorted((h.conversation_id, h.seq) for h in in_paris) == [
        (paris.conversation_id, 0),  # the question and the answer
        (paris.conversation_id, 1),
    ]
    assert ledger.search("paris", conversation_id=rome.conversation_id) == []


def test_search_for_punctuation_only_finds_nothing(db, open_ledger):
    ledger = open_ledger()
    _two_conversations(ledger)

    for query in ("", "   ", "?!...", "'\"()*", "--"):
        assert ledger.search(query) == [], query


def test_search_does_not_choke_on_full_text_query_syntax(db, open_ledger):
    ledger = open_ledger()
    _two_conversations(ledger)

    assert ledger.search('"AND OR (') == []  # no message holds both "and" and "or"
    for query in ('sunny" OR "x', "NEAR(sunny paris)", "content:sunny", "-sunny", "^x'", "a*b"):
        assert isinstance(ledger.search(query), list), query
    assert [h.message.content for h in ledger.search('"Paris" AND (sunny')] == [ANSWER]


# --- 5. one running run per conversation -------------------------------------------------------


def test_a_second_run_on_a_conversation_in_progress_is_refused_and_writes_nothing(db, open_ledger):
    ledger1, ledger2 = open_ledger(), open_ledger()
    intruder_llm = ScriptedLLM([answer("I should never have run.")])
    intruder = build_agent(intruder_llm, ledger2)

    def meanwhile() -> dict[str, Any]:
        running = db.running_run()
        try:
            intruder.run("Me too?", conversation_id=running["conversation_id"])
        except ConversationBusyError as exc:
            refused: Exception | None = exc
        else:
            refused = None
        return {"running": running, "refused": refused, "tables": db.table_counts()}

    seen: dict[str, Any] = {}
    llm = ScriptedLLM([observing(seen, "during", meanwhile, answer())])
    result = build_agent(llm, ledger1).run(QUESTION)

    during = seen["during"]
    assert not isinstance(during, Exception), during
    assert isinstance(during["refused"], ConversationBusyError)
    assert result.run_id in str(during["refused"])
    assert intruder_llm.requests == []
    assert during["tables"]["agent_runs"] == 1
    assert during["tables"]["conversation_messages"] == 1
    assert result.status is AgentStatus.COMPLETED, result.error
    assert message_rows(db, result.conversation_id) == [
        (0, "messages", "user", QUESTION, result.run_id),
        (1, "messages", "assistant", ANSWER, result.run_id),
    ]
    assert db.column("SELECT id FROM agent_runs") == [result.run_id]


def test_a_conversation_whose_lease_expired_can_be_taken_by_a_new_run(db, open_ledger):
    clock = SteppedClock(now())
    ledger1 = open_ledger(clock=clock, lease_seconds=30)
    weather, _ = counting_weather_tool()
    stalled = begin_by_hand(build_agent(ScriptedLLM([]), ledger1, tools=[weather]), ledger1)
    ledger1.close()  # its heartbeat stops, as if its process had died
    ledger2 = open_ledger(clock=clock, lease_seconds=30)
    agent2 = build_agent(ScriptedLLM([answer("Here I am.")]), ledger2)
    cid = stalled.conversation_id

    clock.advance(29)
    with pytest.raises(ConversationBusyError, match=stalled.run_id):
        agent2.run("Anyone there?", conversation_id=cid)
    assert db.count("conversation_messages") == 1 and db.count("agent_runs") == 1

    clock.advance(2)
    result = agent2.run("Anyone there?", conversation_id=cid)

    assert result.status is AgentStatus.COMPLETED, result.error
    assert [(r[2], r[3], r[4]) for r in message_rows(db, cid)] == [
        ("user", QUESTION, stalled.run_id),
        ("user", "Anyone there?", result.run_id),
        ("assistant", "Here I am.", result.run_id),
    ]
    assert [r.id for r in ledger2.stale_runs()] == [stalled.run_id]


def test_a_step_pushes_the_lease_on_only_once_less_than_half_of_it_is_left(db, open_ledger):
    clock = SteppedClock(now())
    ledger = open_ledger(clock=clock, lease_seconds=30)
    turn = ledger.turn(user="Count slowly", agent_name="counter")
    turn.begin()
    expiry = "SELECT lease_expires_at, change_seq FROM conversations"
    taken = db.rows(expiry)

    clock.advance(14)
    turn.step("one")
    assert db.rows(expiry) == taken  # the fence read the holder; the row was not written

    clock.advance(2)  # 14 s of the 30 left
    turn.step("two")
    pushed = db.rows(expiry)[0]
    assert pushed["lease_expires_at"] > taken[0]["lease_expires_at"]
    assert pushed["change_seq"] > taken[0]["change_seq"]

    clock.advance(40)  # expired: taken over by another handle
    other = open_ledger(clock=clock, lease_seconds=30)
    with other.turn(user="Mine now", conversation_id=turn.conversation_id) as taking:
        taking.answer("yes")
    with pytest.raises(LeaseLostError):
        turn.step("three")


@pytest.mark.serial  # a heartbeat every 0.2 s must keep a 0.6 s lease
def test_the_heartbeat_keeps_the_lease_of_a_run_whose_model_call_outlasts_it(db, open_ledger):
    ledger1, ledger2 = open_ledger(lease_seconds=0.6), open_ledger()
    intruder_llm = ScriptedLLM([answer("I should never have run.")])
    intruder = build_agent(intruder_llm, ledger2)

    def slow_model() -> dict[str, Any]:
        running = db.running_run()
        time.sleep(1.5)  # more than twice the lease: only the heartbeat can keep it
        try:
            intruder.run("Me too?", conversation_id=running["conversation_id"])
        except ConversationBusyError as exc:
            refused: Exception | None = exc
        else:
            refused = None
        return {"before": running, "after": db.running_run(), "refused": refused}

    seen: dict[str, Any] = {}
    llm = ScriptedLLM([observing(seen, "slow", slow_model, answer())])
    result = build_agent(llm, ledger1).run(QUESTION)

    slow = seen["slow"]
    assert not isinstance(slow, Exception), slow
    assert isinstance(slow["refused"], ConversationBusyError)
    assert intruder_llm.requests == []
    assert as_time(slow["after"]["heartbeat_at"]) > as_time(slow["before"]["heartbeat_at"])
    assert result.status is AgentStatus.COMPLETED, result.error
    assert [(r[2], r[3]) for r in message_rows(db, result.conversation_id)] == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]


# --- 6. fencing ---------------------------------------------------------------------------------


def test_a_run_taken_over_by_another_process_cannot_write_any_more(db, open_ledger):
    ledger1, ledger2 = open_ledger(), open_ledger()
    weather, weather_calls = counting_weather_tool()
    successor_llm = ScriptedLLM([answer("Answer of the process that took over.")])
    successor = build_agent(successor_llm, ledger2, tools=[weather])

    def take_over() -> RunResult:
        return successor.resume(db.running_run()["id"], stale_after=0)

    seen: dict[str, Any] = {}
    stalled_llm = ScriptedLLM(
        [weather_call(), observing(seen, "takeover", take_over, answer("Stale answer."))]
    )
    stalled = build_agent(stalled_llm, ledger1, tools=[weather])

    with pytest.raises(LeaseLostError) as lost:
        stalled.run(QUESTION)

    takeover = seen["takeover"]
    assert isinstance(takeover, RunResult), takeover
    run_id = takeover.run_id
    assert run_id in str(lost.value)
    assert takeover.status is AgentStatus.COMPLETED
    assert successor_llm.requests[0].messages.root[-1].role is Role.TOOL  # continued after step 0
    assert weather_calls == ["Paris"]
    [conversation_id] = db.column("SELECT id FROM conversations")
    assert [(r[2], r[3]) for r in message_rows(db, conversation_id)] == [
        ("user", QUESTION),
        ("assistant", "Answer of the process that took over."),
    ]
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=run_id)
    assert (run["status"], run["error"], run["step_count"]) == ("completed", None, 2)
    assert db.count("step_executions", "content = 'Stale answer.'") == 0
    assert db.count("conversation_messages", "content = 'Stale answer.'") == 0
    assert db.count("execution_buffer_rows") == 0
    assert db.scalar("SELECT lease_holder FROM conversations") is None
    db.assert_runs_consistent()


def test_a_run_whose_lease_expired_while_the_model_was_thinking_loses_the_conversation(
    db, open_ledger
):
    clock = SteppedClock(now())
    ledger1 = open_ledger(clock=clock, lease_seconds=30)
    ledger2 = open_ledger(clock=clock, lease_seconds=30)
    weather, _ = counting_weather_tool()
    next_llm = ScriptedLLM([answer("The next run's answer.")])
    next_agent = build_agent(next_llm, ledger2)

    def stall_past_the_lease() -> RunResult:
        clock.advance(31)  # the process stalled: no step, no heartbeat
        return next_agent.run("Hello?", conversation_id=db.running_run()["conversation_id"])

    seen: dict[str, Any] = {}
    stalled_llm = ScriptedLLM(
        [weather_call(), observing(seen, "next", stall_past_the_lease, answer("Stale."))]
    )

    with pytest.raises(LeaseLostError):
        build_agent(stalled_llm, ledger1, tools=[weather]).run(QUESTION)

    following = seen["next"]
    assert isinstance(following, RunResult), following
    assert following.status is AgentStatus.COMPLETED
    [stalled_id] = db.column("SELECT id FROM agent_runs WHERE id <> :r", r=following.run_id)
    assert [(r[2], r[3], r[4]) for r in message_rows(db, following.conversation_id)] == [
        ("user", QUESTION, stalled_id),
        ("user", "Hello?", following.run_id),
        ("assistant", "The next run's answer.", following.run_id),
    ]
    assert db.step_indexes(stalled_id) == [0]  # its second step was refused
    assert db.count("conversation_messages", "content = 'Stale.'") == 0
    assert [r.id for r in ledger2.stale_runs()] == [stalled_id]
    assert [r.status for r in ledger2.recover()] == ["interrupted"]


# --- 7. a failed model call ---------------------------------------------------------------------


def _failed_run(ledger: Ledger) -> tuple[RunResult, Any]:
    weather, _ = counting_weather_tool()
    llm = ScriptedLLM([weather_call(), raising(RuntimeError("model down"))])
    return build_agent(llm, ledger, tools=[weather]).run(QUESTION), weather


def test_a_failed_model_call_fails_the_run_keeps_its_buffer_and_frees_the_conversation(
    db, open_ledger
):
    ledger = open_ledger()
    result, _ = _failed_run(ledger)

    assert result.status is AgentStatus.FAILED
    assert result.stop_reason is StopReason.ERROR
    assert result.error is not None and "model down" in result.error
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=result.run_id)
    assert (run["status"], run["stop_reason"]) == ("failed", "error")
    assert "model down" in run["error"]
    assert run["finished_at"] is not None
    assert db.column(
        "SELECT step_type FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    ) == ["tool_use", "error"]
    buffer = db.rows("SELECT * FROM execution_buffer_rows ORDER BY seq")
    assert [(b["run_id"], b["step_index"], b["role"]) for b in buffer] == [
        (result.run_id, 0, "assistant"),
        (result.run_id, 0, "tool"),
    ]
    assert list(ledger.buffer(result.run_id)) == list(result.state.execution_buffer())
    conversation = db.row("SELECT * FROM conversations")
    assert (conversation["lease_holder"], conversation["lease_run_id"]) == (None, None)
    assert conversation["version"] == 0
    assert [r[2] for r in message_rows(db, result.conversation_id)] == ["user"]


def test_a_failed_run_does_not_block_the_next_run_on_its_conversation(db, open_ledger):
    ledger = open_ledger()
    failed, _ = _failed_run(ledger)

    llm = ScriptedLLM([answer("Back again.")])
    result = build_agent(llm, ledger).run("Try again?", conversation_id=failed.conversation_id)

    assert result.status is AgentStatus.COMPLETED, result.error
    assert [m.content for m in llm.requests[0].messages] == [QUESTION, "Try again?"]
    assert [r[3] for r in message_rows(db, failed.conversation_id)] == [
        QUESTION,
        "Try again?",
        "Back again.",
    ]


def test_resuming_a_failed_run_continues_it_to_one_answer(db, open_ledger):
    ledger = open_ledger()
    failed, weather = _failed_run(ledger)
    llm = ScriptedLLM([answer()])

    resumed = build_agent(llm, ledger, tools=[weather]).resume(failed.run_id)

    assert resumed.run_id == failed.run_id
    assert resumed.conversation_id == failed.conversation_id
    assert resumed.status is AgentStatus.COMPLETED, resumed.error
    assert resumed.answer == ANSWER
    assert [m.role for m in llm.requests[0].messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert db.step_indexes(failed.run_id) == [0, 1, 2]
    assert message_rows(db, failed.conversation_id) == [
        (0, "messages", "user", QUESTION, failed.run_id),
        (1, "messages", "assistant", ANSWER, failed.run_id),
    ]
    assert db.count("execution_buffer_rows") == 0
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=failed.run_id)
    assert (run["status"], run["stop_reason"], run["error"]) == ("completed", "completed", None)
    assert run["step_count"] == 3
    assert db.count("agent_runs") == 1
    assert db.scalar("SELECT version FROM conversations") == 1
    db.assert_runs_consistent()


def test_a_step_whose_write_fails_leaves_no_half_step_and_is_redone_on_resume(db, open_ledger):
    ledger = open_ledger()
    weather, weather_calls = counting_weather_tool()
    db.fail_inserts_into("execution_buffer_rows", "injected: disk full")

    with pytest.raises(Exception, match="injected: disk full"):
        build_agent(ScriptedLLM([weather_call()]), ledger, tools=[weather]).run(QUESTION)

    # the step row and its tool rows went in before the buffer rows, in the same transaction
    assert db.count("step_executions") == 0
    assert db.count("tool_executions") == 0
    assert db.count("execution_buffer_rows") == 0
    run = db.row("SELECT * FROM agent_runs")
    assert run["status"] == "failed" and "injected" in run["error"]
    assert db.scalar("SELECT lease_holder FROM conversations") is None
    assert [r[2] for r in message_rows(db, run["conversation_id"])] == ["user"]

    db.allow_inserts_into("execution_buffer_rows")
    llm = ScriptedLLM([weather_call(), answer()])
    resumed = build_agent(llm, ledger, tools=[weather]).resume(run["id"])

    assert resumed.status is AgentStatus.COMPLETED, resumed.error
    assert weather_calls == ["Paris", "Paris"]  # a step is redone: tools run at least once
    assert db.step_indexes(run["id"]) == [0, 1]
    assert [(r[2], r[3]) for r in message_rows(db, run["conversation_id"])] == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]
    db.assert_runs_consistent()


def test_an_interrupt_in_the_middle_of_a_step_ends_the_run_interrupted_with_the_steps_before_it(
    db, open_ledger
):
    """Ctrl-C (a KeyboardInterrupt) inside a step cancels the run: it ends ``interrupted``,
    keeping its recorded steps and the step it was in (flagged, its call answered), committing
    what it had shown (nothing, without a stream), and the conversation is free for the next
    run at once."""
    ledger = open_ledger()
    interrupted: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        if city == "Rome" and not interrupted:
            interrupted.append(city)
            raise KeyboardInterrupt
        return f"22C and sunny in {city}"

    llm = ScriptedLLM([weather_call("call_1", "Paris"), weather_call("call_2", "Rome")])
    with pytest.raises(KeyboardInterrupt):
        build_agent(llm, ledger, tools=[get_weather]).run(QUESTION)

    run = db.row("SELECT * FROM agent_runs")
    assert (run["status"], run["stop_reason"], run["error"]) == ("interrupted", "cancelled", None)
    assert db.step_indexes(run["id"]) == [0, 1]
    flags = db.column("SELECT interrupted FROM step_executions ORDER BY step_index")
    assert [bool(f) for f in flags] == [False, True]
    calls = db.rows("SELECT tool_call_id, is_error, error FROM tool_executions ORDER BY step_index")
    assert [(c["tool_call_id"], bool(c["is_error"])) for c in calls] == [
        ("call_1", False),
        ("call_2", True),
    ]
    assert "it had started" in calls[1]["error"]
    assert db.count("execution_buffer_rows") == 0
    assert db.scalar("SELECT lease_holder FROM conversations") is None
    cid = run["conversation_id"]
    assert [(r[2], r[3]) for r in message_rows(db, cid)] == [("user", QUESTION)]

    again = build_agent(ScriptedLLM([answer()]), ledger, tools=[get_weather]).run("Go on.", cid)

    assert again.status is AgentStatus.COMPLETED, again.error
    assert [(r[2], r[3]) for r in message_rows(db, cid)] == [
        ("user", QUESTION),
        ("user", "Go on."),
        ("assistant", ANSWER),
    ]


# --- 8. a crashed process -----------------------------------------------------------------------


def _crash_after_one_step(
    ledger: Ledger, *, inline: bool = False
) -> tuple[str, str, Any, list[str]]:
    """A run that recorded its tool step, then lost its process (no commit, no heartbeat)."""
    weather, calls = counting_weather_tool()
    llm = ScriptedLLM([weather_call(usage=STEP_0_USAGE, cost_usd=0.004)])
    agent = build_agent(llm, ledger, tools=[weather], inline=inline)
    state = begin_by_hand(agent, ledger)
    after = agent.step(state)
    ledger.recorder.record_step(after.run_id, after.current_execution, after.filed_since(state))
    ledger.close()
    assert after.run_id is not None
    return after.run_id, after.conversation_id, weather, calls


def test_a_crashed_run_is_stale_once_its_lease_expires_and_abandoning_it_cleans_up(db, open_ledger):
    run_id, cid, _, _ = _crash_after_one_step(open_ledger(lease_seconds=30))
    clock = SteppedClock(now())
    ledger2 = open_ledger(clock=clock, lease_seconds=30)

    assert ledger2.stale_runs() == []  # its lease may still be held
    assert ledger2.recover() == []
    assert db.scalar("SELECT status FROM agent_runs") == "running"
    clock.advance(31)
    assert [r.id for r in ledger2.stale_runs()] == [run_id]
    with pytest.raises(TypeError):  # abandoning is all it does: resuming is Agent.recover
        ledger2.recover("resume")  # type: ignore[misc]

    abandoned = ledger2.recover()

    assert [(r.id, r.status) for r in abandoned] == [(run_id, "interrupted")]
    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=run_id)
    assert run["status"] == "interrupted"
    assert run["error"] and run["finished_at"] is not None
    assert db.count("execution_buffer_rows") == 0
    assert db.count("step_executions") == 1  # the permanent trace stays
    conversation = db.row("SELECT * FROM conversations")
    assert (conversation["lease_holder"], conversation["lease_run_id"]) == (None, None)
    assert message_rows(db, cid) == [(0, "messages", "user", QUESTION, run_id)]
    assert ledger2.stale_runs() == []
    after = build_agent(ScriptedLLM([answer()]), ledger2).run("Still there?", conversation_id=cid)
    assert after.status is AgentStatus.COMPLETED, after.error
    assert db.step_indexes(run_id) == [0]


def test_an_abandoned_run_carries_the_totals_of_the_steps_it_recorded(db, open_ledger):
    run_id, _, _, _ = _crash_after_one_step(open_ledger(lease_seconds=30))
    ledger2 = open_ledger(clock=SteppedClock(now() + timedelta(seconds=31)))

    [abandoned] = ledger2.recover()

    run = db.row("SELECT * FROM agent_runs WHERE id = :r", r=run_id)
    assert run["status"] == "interrupted"
    assert [run[c] for c in TOKEN_COLUMNS] == [getattr(STEP_0_USAGE, c) for c in TOKEN_COLUMNS]
    assert run["cost_usd"] == pytest.approx(0.004)
    assert abandoned.usage == STEP_0_USAGE
    db.assert_runs_consistent()


@pytest.mark.parametrize("inline", [False, True], ids=["separated", "inline"])
def test_agent_recover_resumes_a_crashed_run_without_redoing_its_recorded_step(
    db, open_ledger, inline
):
    run_id, cid, weather, weather_calls = _crash_after_one_step(open_ledger(), inline=inline)
    ledger2 = open_ledger()
    llm = ScriptedLLM([answer()])
    agent = build_agent(llm, ledger2, tools=[weather], inline=inline)

    results = agent.recover(stale_after=0)

    assert [(r.run_id, r.status, r.answer) for r in results] == [
        (run_id, AgentStatus.COMPLETED, ANSWER)
    ]
    assert weather_calls == ["Paris"]  # the tool ran once, before the crash
    assert len(llm.requests) == 1
    assert [m.role for m in llm.requests[0].messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    expected = [("user", QUESTION), ("assistant", "")] if inline else [("user", QUESTION)]
    expected += [("tool", "22C and sunny in Paris")] if inline else []
    expected += [("assistant", ANSWER)]
    rows = message_rows(db, cid)
    assert [(r[2], r[3]) for r in rows] == expected
    assert [r[0] for r in rows] == list(range(len(expected)))
    assert {r[4] for r in rows} == {run_id}
    assert db.step_indexes(run_id) == [0, 1]
    assert db.count("execution_buffer_rows") == 0
    assert db.scalar("SELECT lease_holder FROM conversations") is None
    assert ledger2.run(run_id).status == "completed"
    db.assert_runs_consistent()


def test_a_crashed_run_is_resumed_by_only_one_of_two_recovering_processes(db, open_ledger):
    run_id, cid, weather, weather_calls = _crash_after_one_step(open_ledger(lease_seconds=30))
    clock = SteppedClock(now() + timedelta(seconds=31))
    ledger2, ledger3 = open_ledger(clock=clock), open_ledger(clock=clock)
    rival_llm = ScriptedLLM([answer("The rival's answer.")])
    rival = build_agent(rival_llm, ledger3, tools=[weather])

    def rival_tries() -> dict[str, Any]:
        recovered = rival.recover()
        try:
            rival.resume(run_id)
        except ConversationBusyError as exc:
            return {"recovered": recovered, "refused": exc}
        return {"recovered": recovered, "refused": None}

    seen: dict[str, Any] = {}
    llm = ScriptedLLM([observing(seen, "rival", rival_tries, answer())])
    results = build_agent(llm, ledger2, tools=[weather]).recover()

    assert [(r.run_id, r.status) for r in results] == [(run_id, AgentStatus.COMPLETED)]
    assert not isinstance(seen["rival"], Exception), seen["rival"]
    assert seen["rival"]["recovered"] == []
    assert isinstance(seen["rival"]["refused"], ConversationBusyError)
    assert rival_llm.requests == []
    assert [(r[2], r[3]) for r in message_rows(db, cid)] == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]
    assert weather_calls == ["Paris"]
    db.assert_runs_consistent()


def test_resuming_a_completed_run_is_a_usage_error(db, open_ledger):
    ledger = open_ledger()
    result = build_agent(ScriptedLLM([answer()]), ledger).run(QUESTION)
    before = db.table_counts()

    with pytest.raises(UsageError, match="completed") as refused:
        build_agent(ScriptedLLM([answer()]), ledger).resume(result.run_id)

    assert not isinstance(refused.value, NotFoundError)
    assert result.run_id in str(refused.value)
    assert db.table_counts() == before
    assert ledger.run(result.run_id).status == "completed"


# --- 9. unknown ids -----------------------------------------------------------------------------

UNKNOWN = "00000000-0000-7000-8000-000000000000"


def test_running_on_an_unknown_conversation_is_not_found_and_writes_nothing(db, open_ledger):
    ledger = open_ledger()
    llm = ScriptedLLM([answer()])

    with pytest.raises(NotFoundError) as missing:
        build_agent(llm, ledger).run(QUESTION, conversation_id=UNKNOWN)

    assert UNKNOWN in str(missing.value)
    assert "agentledger conversations" in str(missing.value)  # where to find the real ids
    assert llm.requests == []
    assert set(db.table_counts().values()) == {0}


def test_reading_an_unknown_conversation_is_not_found(db, open_ledger):
    ledger = open_ledger()
    for read in (ledger.conversation, ledger.messages, ledger.runs):
        with pytest.raises(NotFoundError, match=UNKNOWN) as missing:
            read(UNKNOWN)
        assert "agentledger conversations" in str(missing.value), read


def test_reading_an_unknown_run_is_not_found(db, open_ledger):
    ledger = open_ledger()
    reads = (ledger.run, ledger.steps, ledger.trace_messages, ledger.tool_executions, ledger.buffer)
    for read in reads:
        with pytest.raises(NotFoundError, match=UNKNOWN) as missing:
            read(UNKNOWN)
        assert "agentledger runs" in str(missing.value), read


def test_resuming_an_unknown_run_is_not_found_and_writes_nothing(db, open_ledger):
    ledger = open_ledger()
    build_agent(ScriptedLLM([answer()]), ledger).run(QUESTION)
    before = db.table_counts()
    llm = ScriptedLLM([answer()])

    with pytest.raises(NotFoundError, match=UNKNOWN) as missing:
        build_agent(llm, ledger).resume(UNKNOWN)

    assert "agentledger runs" in str(missing.value)
    assert llm.requests == []
    assert db.table_counts() == before


# --- 10. SQLite's settings and the forms of its address ----------------------------------------


def _pragmas(ledger: Ledger) -> dict[str, Any]:
    with ledger.engine.connect() as conn:
        return {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "foreign_keys", "synchronous")
        }


def test_a_sqlite_ledger_runs_in_wal_mode_with_foreign_keys_and_full_sync(tmp_path):
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        assert _pragmas(ledger) == {"journal_mode": "wal", "foreign_keys": 1, "synchronous": 2}


def test_a_sqlite_ledger_can_trade_durability_for_speed_with_normal_sync(tmp_path):
    with Ledger.open(tmp_path / "ledger.db", synchronous="NORMAL") as ledger:
        assert _pragmas(ledger) == {"journal_mode": "wal", "foreign_keys": 1, "synchronous": 1}


@pytest.mark.parametrize("form", ["str", "pathlib", "relative", "url"])
def test_a_sqlite_ledger_opens_from_a_path_a_pathlib_path_or_a_sqlite_url(
    tmp_path, monkeypatch, form
):
    file = tmp_path / "ledger.db"
    monkeypatch.chdir(tmp_path)
    target = {
        "str": str(file),
        "pathlib": file,
        "relative": "ledger.db",
        "url": f"sqlite:///{file.as_posix()}",
    }[form]

    with Ledger.open(target) as ledger:
        result = build_agent(ScriptedLLM([answer()]), ledger).run(QUESTION)

    with contextlib.closing(sqlite3.connect(file)) as conn:
        rows = conn.execute(
            "SELECT role, content, run_id FROM conversation_messages ORDER BY seq"
        ).fetchall()
    assert rows == [("user", QUESTION, result.run_id), ("assistant", ANSWER, result.run_id)]
    with Ledger.open(file) as reopened:
        assert [m.content for m in reopened.messages(result.conversation_id)] == [QUESTION, ANSWER]


# --- 11. usage and cost totals ------------------------------------------------------------------


def test_a_runs_token_totals_are_the_sums_of_its_steps(db, open_ledger):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = two_tool_steps_then_answer()
    result = build_agent(llm, ledger, tools=[weather]).run(QUESTION)

    totals = db.row(
        "SELECT "
        + ", ".join(
            f"r.{c} AS {c}, (SELECT SUM(s.{c}) FROM step_executions s "
            f"WHERE s.run_id = r.id) AS sum_{c}"
            for c in TOKEN_COLUMNS
        )
        + " FROM agent_runs r WHERE r.id = :r",
        r=result.run_id,
    )
    expected = STEP_0_USAGE + STEP_1_USAGE + Usage(input_tokens=7, output_tokens=3)
    for column in TOKEN_COLUMNS:
        assert totals[column] == totals[f"sum_{column}"] == getattr(expected, column), column
    assert ledger.run(result.run_id).usage == expected == result.usage


@pytest.mark.parametrize(
    ("costs", "total", "fully_priced"),
    [
        pytest.param((None, None), None, False, id="no-step-priced"),
        pytest.param((0.01, 0.02), 0.03, True, id="every-step-priced"),
        pytest.param((0.01, None), 0.01, False, id="one-step-unpriced"),
    ],
)
def test_a_runs_cost_is_the_sum_of_the_known_step_costs_and_null_when_none_is_known(
    db, open_ledger, costs, total, fully_priced
):
    ledger = open_ledger()
    weather, _ = counting_weather_tool()
    llm = ScriptedLLM([weather_call(cost_usd=costs[0]), answer(cost_usd=costs[1])])
    result = build_agent(llm, ledger, tools=[weather]).run(QUESTION)

    run = db.row("SELECT cost_usd, fully_priced FROM agent_runs WHERE id = :r", r=result.run_id)
    step_costs = db.column(
        "SELECT cost_usd FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    )
    assert step_costs == list(costs)
    if total is None:
        assert run["cost_usd"] is None and result.cost_usd is None
    else:
        assert run["cost_usd"] == pytest.approx(total)
        assert result.cost_usd == pytest.approx(total)
    assert bool(run["fully_priced"]) is fully_priced
    assert ledger.run(result.run_id).fully_priced is fully_priced


# --- 12. without a ledger -----------------------------------------------------------------------


def test_without_a_ledger_a_conversation_is_kept_between_runs_in_the_process():
    llm = ScriptedLLM([answer(), answer("Rain tomorrow.")])
    agent = build_agent(llm)

    first = agent.run(QUESTION)
    second = agent.run("And tomorrow?", conversation_id=first.conversation_id)

    assert second.conversation_id == first.conversation_id
    assert [(m.role, m.content) for m in llm.requests[1].messages] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, ANSWER),
        (Role.USER, "And tomorrow?"),
    ]
    assert [m.content for m in second.state.messages()] == [
        QUESTION,
        ANSWER,
        "And tomorrow?",
        "Rain tomorrow.",
    ]


def test_without_a_ledger_a_second_run_on_a_conversation_in_progress_is_refused():
    outcome: dict[str, Any] = {}
    llm = ScriptedLLM([answer(), lambda _r: intrude(), answer("Third.")])
    agent = build_agent(llm)
    first = agent.run(QUESTION)

    def intrude() -> InferenceResponse:
        try:
            agent.run("Me too?", conversation_id=first.conversation_id)
        except ConversationBusyError as exc:
            outcome["refused"] = exc
        return answer("Second.")

    second = agent.run("Again?", conversation_id=first.conversation_id)
    third = agent.run("Once more?", conversation_id=first.conversation_id)

    assert isinstance(outcome.get("refused"), ConversationBusyError)
    assert second.run_id in str(outcome["refused"])
    assert second.status is AgentStatus.COMPLETED
    assert len(llm.requests) == 3
    assert [m.content for m in third.state.messages()] == [
        QUESTION,
        ANSWER,
        "Again?",
        "Second.",
        "Once more?",
        "Third.",
    ]


def test_without_a_ledger_an_unknown_conversation_is_not_found():
    llm = ScriptedLLM([answer()])

    with pytest.raises(NotFoundError, match=UNKNOWN):
        build_agent(llm).run(QUESTION, conversation_id=UNKNOWN)

    assert llm.requests == []


def test_message_equality_covers_timestamps_so_the_round_trip_checks_are_exact():
    message = Message.user("hi")
    assert message != message.model_copy(update={"created_at": message.created_at + timedelta(1)})


def test_close_waits_for_a_write_in_flight_and_refuses_what_begins_after(tmp_path):
    """A write another thread began (one a cancelled run left to finish) ends before
    ``close()`` returns, its connection given back and closed; a transaction that would begin
    after it is refused with an error that says so."""

    from agentledger.errors import LedgerUnavailableError

    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write below waits for this lock
    created: list[str] = []
    writer = threading.Thread(
        target=lambda: created.append(ledger.create_conversation(title="late").id)
    )
    writer.start()
    time.sleep(0.2)
    threading.Timer(0.3, holder.rollback).start()
    started = time.monotonic()
    ledger.close()
    waited = time.monotonic() - started
    writer.join(5)
    assert created and waited >= 0.2  # close() returned once the write had committed
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT title FROM conversations").fetchall() == [("late",)]
    with pytest.raises(LedgerUnavailableError, match=r"closed \(Ledger.close\(\)\)"):
        ledger.create_conversation(title="too late")
    holder.close()


def test_a_chosen_conversation_id_another_writer_is_inserting_is_refused_as_taken(pg_url: str):
    """Checking that a chosen id is free cannot see an insert not yet committed: the insert
    that waits behind it then gets the same refusal as a taken id, not a database error."""
    import psycopg

    with Ledger.open(pg_url) as ledger, psycopg.connect(pg_url) as other:
        other.execute(
            "INSERT INTO conversations (id, kind, version, created_at, updated_at)"
            " VALUES ('chat-7', 'main', 0, now(), now())"
        )
        outcome: list[object] = []

        def create() -> None:
            try:
                outcome.append(ledger.create_conversation(conversation_id="chat-7"))
            except Exception as exc:
                outcome.append(exc)

        writer = threading.Thread(target=create)
        writer.start()
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            deadline = time.monotonic() + 30
            while watcher.execute(waiting).fetchone() != (1,) and time.monotonic() < deadline:
                time.sleep(0.01)
        other.commit()
        writer.join(30)
        (refused,) = outcome
        assert isinstance(refused, UsageError), refused
        assert "'chat-7' is taken in this ledger" in str(refused)
        assert [c.id for c in ledger.conversations()] == ["chat-7"]

"""The recording API: a turn that the caller's own code ran (``ledger.turn`` / ``aturn``),
recorded as a run with the agent loop's transactions and rules, on SQLite and PostgreSQL, and
checked with SQL on the database itself (and the ledger's invariants)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from agentledger import (
    AgentBuilder,
    AgentStatus,
    ConversationBusyError,
    InferenceResponse,
    Ledger,
    PriceTable,
    ScriptedLLM,
    ToolCall,
    Usage,
    UsageError,
    tool,
)
from agentledger.errors import UnstorableTextError
from support.databases import BACKENDS
from support.invariants import violations
from support.ledger import Database

SQLITE_ONLY = pytest.mark.parametrize("db_url", BACKENDS[:1], indirect=True)
"""For checks made before anything is written: the backend plays no part."""

WEATHER = ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})
QUESTION = "What's the weather in Paris?"


def conversation(db: Database, conversation_id: str) -> list[tuple[str, str, bool]]:
    rows = db.rows(
        "SELECT role, content, interrupted FROM conversation_messages "
        "WHERE conversation_id = :id AND section = 'messages' ORDER BY seq",
        id=conversation_id,
    )
    return [(r["role"], r["content"], bool(r["interrupted"])) for r in rows]


def test_a_turn_is_a_run_its_answer_the_conversation_its_tool_calls_the_trace(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    with ledger.turn(user=QUESTION, agent_name="support", model="gpt-4o") as turn:
        step = turn.step(
            tool_calls=[WEATHER],
            usage=Usage(input_tokens=812, output_tokens=24),
            finish_reason="tool_calls",
        )
        step.tool_result("c1", "22C, sunny", duration_ms=41.0)
        turn.shown("Sunny and ")
        result = turn.answer("Sunny and 22C.", usage=Usage(input_tokens=870, output_tokens=9))

    assert turn.status is AgentStatus.COMPLETED and result.answer == "Sunny and 22C."
    assert conversation(db, turn.conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", "Sunny and 22C.", False),
    ]
    run = db.row("SELECT * FROM agent_runs WHERE id = :id", id=turn.run_id)
    assert (run["status"], run["agent_name"], run["step_count"], run["model"]) == (
        "completed",
        "support",
        2,
        "gpt-4o",
    )
    assert (run["input_tokens"], run["output_tokens"]) == (812 + 870, 24 + 9)
    priced = ledger.recorder.run_result(turn.run_id).cost_usd
    assert priced is not None and run["cost_usd"] == pytest.approx(priced) and priced > 0
    steps = db.rows(
        "SELECT step_type, finish_reason, input_tokens, cost_usd FROM step_executions "
        "WHERE run_id = :id ORDER BY step_index",
        id=turn.run_id,
    )
    assert [(s["step_type"], s["finish_reason"], s["input_tokens"]) for s in steps] == [
        ("tool_use", "tool_calls", 812),
        ("response", None, 870),
    ]
    assert all(s["cost_usd"] > 0 for s in steps)
    tool = db.row("SELECT * FROM tool_executions WHERE run_id = :id", id=turn.run_id)
    assert (tool["tool_name"], tool["result"], tool["duration_ms"], tool["is_error"]) == (
        "get_weather",
        "22C, sunny",
        41.0,
        False,
    )
    assert violations(db_url) == [] and ledger.verify() == []


def test_turns_continue_a_conversation_and_the_model_context_holds_them(ledger: Ledger) -> None:
    with ledger.turn(user="Hi", conversation_id="thread-7") as first:
        first.answer("Hello!")
    with ledger.turn(user="And again?", conversation_id="thread-7") as second:
        second.answer("Still here.")

    assert first.conversation_id == second.conversation_id == "thread-7"
    context = ledger.model_context("thread-7")
    assert [m.content for m in context] == ["Hi", "Hello!", "And again?", "Still here."]
    assert [t.run_id for t in ledger.turns("thread-7")] == [first.run_id, second.run_id]


def test_an_exception_fails_the_run_keeping_the_user_message_and_steps(
    ledger: Ledger, db: Database
) -> None:
    turn = ledger.turn(user=QUESTION)
    with pytest.raises(RuntimeError, match="the weather API is down"), turn:
        turn.step("Let me look.", usage=Usage(input_tokens=5, output_tokens=3))
        raise RuntimeError("the weather API is down")

    run = db.row("SELECT status, error, step_count FROM agent_runs WHERE id = :id", id=turn.run_id)
    assert run == {
        "status": "failed",
        "error": "RuntimeError: the weather API is down",
        "step_count": 1,
    }
    assert conversation(db, turn.conversation_id) == [("user", QUESTION, False)]
    assert ledger.recorder.load_conversation(turn.conversation_id).messages()[0].content == QUESTION


def test_a_cancelled_turn_keeps_exactly_what_was_shown_and_answers_its_open_calls(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    with pytest.raises(KeyboardInterrupt), ledger.turn(user=QUESTION) as turn:
        step = turn.step("Checking.", tool_calls=[WEATHER, WEATHER.model_copy(update={"id": "c2"})])
        step.tool_result("c1", "22C")
        turn.shown("It is 22")
        raise KeyboardInterrupt

    assert turn.status is AgentStatus.INTERRUPTED
    assert conversation(db, turn.conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", "It is 22", True),
    ]
    tools = db.rows(
        "SELECT tool_call_id, result, is_error FROM tool_executions WHERE run_id = :id "
        "ORDER BY position",
        id=turn.run_id,
    )
    assert [(t["tool_call_id"], t["is_error"]) for t in tools] == [("c1", False), ("c2", True)]
    assert tools[1]["result"].startswith("interrupted:")
    run = db.row("SELECT status, stop_reason FROM agent_runs WHERE id = :id", id=turn.run_id)
    assert run == {"status": "interrupted", "stop_reason": "cancelled"}
    assert violations(db_url) == []


def test_a_turn_left_without_an_answer_is_an_error_that_names_it(
    ledger: Ledger, db: Database
) -> None:
    turn = ledger.turn(user=QUESTION)
    with pytest.raises(UsageError, match="ended without an answer") as raised, turn:
        turn.step("Thinking.")
    assert turn.run_id in str(raised.value)
    assert db.scalar("SELECT status FROM agent_runs WHERE id = :id", id=turn.run_id) == "failed"


def test_fail_after_text_was_shown_keeps_the_text_as_an_answer_cut_short(
    ledger: Ledger, db: Database
) -> None:
    with ledger.turn(user=QUESTION) as turn:
        turn.shown("Sunny")
        turn.fail("the stream was cut")

    run = db.row("SELECT status, stop_reason, error FROM agent_runs WHERE id = :id", id=turn.run_id)
    assert run == {"status": "interrupted", "stop_reason": "error", "error": "the stream was cut"}
    assert conversation(db, turn.conversation_id)[-1] == ("assistant", "Sunny", True)


def test_shown_text_is_durable_while_the_turn_goes_on(ledger: Ledger, db: Database) -> None:
    with ledger.turn(user=QUESTION) as turn:
        turn.shown("Sunny and ")
        row = db.row("SELECT partial_output FROM agent_runs WHERE id = :id", id=turn.run_id)
        assert row["partial_output"] == "Sunny and "
        turn.answer("Sunny and 22C.")
    assert db.scalar("SELECT partial_output FROM agent_runs WHERE id = :id", id=turn.run_id) is None


def test_a_child_turn_is_a_subagent_run_linked_to_the_call_that_ran_it(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    research = ToolCall(id="r1", name="research", arguments={"topic": "Paris"})
    with ledger.turn(user="Plan a trip", agent_name="planner", model="gpt-4o") as turn:
        step = turn.step(tool_calls=[research], usage=Usage(input_tokens=100, output_tokens=10))
        with turn.child("Find sights in Paris", agent_name="researcher", call_id="r1") as child:
            child.answer("The Louvre.", usage=Usage(input_tokens=50, output_tokens=5))
        step.tool_result("r1", "The Louvre.")
        turn.answer("Go to the Louvre.", usage=Usage(input_tokens=120, output_tokens=6))

    runs = db.rows(
        "SELECT r.id, r.parent_run_id, r.root_run_id, r.depth, c.kind FROM agent_runs r "
        "JOIN conversations c ON c.id = r.conversation_id ORDER BY r.depth"
    )
    assert [(r["parent_run_id"], r["root_run_id"], r["depth"], r["kind"]) for r in runs] == [
        (None, turn.run_id, 0, "main"),
        (turn.run_id, turn.run_id, 1, "subagent"),
    ]
    assert (
        db.scalar("SELECT child_run_id FROM tool_executions WHERE run_id = :id", id=turn.run_id)
        == child.run_id
    )
    tree = ledger.run_tree(turn.run_id)
    assert tree.inclusive.usage.input_tokens == 100 + 50 + 120
    assert [node.run.agent_name for node in tree.walk()] == ["planner", "researcher"]
    assert violations(db_url) == []


def test_one_writer_per_conversation_a_second_turn_is_refused_with_nothing_written(
    ledger: Ledger, db: Database
) -> None:
    with ledger.turn(user="first", conversation_id="busy") as first:
        second = ledger.turn(user="second", conversation_id="busy")
        with pytest.raises(ConversationBusyError), second:
            pass  # pragma: no cover - never entered
        first.answer("done")
    assert [c for _, c, _ in conversation(db, "busy")] == ["first", "done"]
    assert db.scalar("SELECT count(*) FROM agent_runs WHERE conversation_id = 'busy'") == 1


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("misuse", "message"),
    [
        (lambda turn, step: step.tool_result("nope", "x"), "has no tool call 'nope'"),
        (lambda turn, step: turn.answer("too soon"), "waiting for the results"),
        (lambda turn, step: turn.step("again"), "waiting for the results"),
    ],
    ids=["unknown call", "answer before results", "step before results"],
)
def test_misuse_is_a_clear_error_and_loses_nothing(
    ledger: Ledger, db: Database, misuse, message
) -> None:  # type: ignore[no-untyped-def]
    with ledger.turn(user=QUESTION) as turn:
        step = turn.step(tool_calls=[WEATHER])
        with pytest.raises(UsageError, match=message):
            misuse(turn, step)
        step.tool_result("c1", "22C")
        turn.answer("22C.")
    assert [c for _, c, _ in conversation(db, turn.conversation_id)] == [QUESTION, "22C."]


@SQLITE_ONLY
def test_text_the_ledger_cannot_store_is_refused_before_anything_is_written(
    ledger: Ledger, db: Database
) -> None:
    with pytest.raises(UnstorableTextError):
        ledger.turn(user="bad \x00 text")
    with ledger.turn(user=QUESTION) as turn:
        with pytest.raises(UnstorableTextError):
            turn.answer("bad \x00 answer")
        turn.answer("fine")
    assert db.scalar("SELECT count(*) FROM agent_runs") == 1


def test_a_scoped_handle_records_turns_in_its_tenant(ledger: Ledger, db: Database) -> None:
    with ledger.scoped(tenant_id="acme").turn(user="hello") as turn:
        turn.answer("hi")
    assert (
        db.scalar("SELECT tenant_id FROM conversations WHERE id = :id", id=turn.conversation_id)
        == "acme"
    )
    assert db.scalar("SELECT tenant_id FROM agent_runs WHERE id = :id", id=turn.run_id) == "acme"


def test_async_turns_record_the_same_and_a_cancelled_task_keeps_what_was_shown(
    ledger: Ledger, db: Database
) -> None:
    shown = threading.Event()

    async def turn_that_streams() -> None:
        async with ledger.aturn(user=QUESTION, agent_name="async") as turn:
            step = await turn.step(tool_calls=[WEATHER], usage=Usage(input_tokens=3))
            await step.tool_result("c1", "22C")
            await turn.shown("Sunny")
            shown.set()
            await asyncio.sleep(30)
        raise AssertionError("not reached")  # pragma: no cover

    async def main() -> str:
        task = asyncio.create_task(turn_that_streams())
        while not shown.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with ledger.aturn(user="again") as done:
            await done.answer("ok")
        return done.conversation_id

    other = asyncio.run(main())
    cut = db.row("SELECT id, conversation_id, status FROM agent_runs WHERE agent_name = 'async'")
    assert cut["status"] == "interrupted"
    assert conversation(db, cut["conversation_id"]) == [
        ("user", QUESTION, False),
        ("assistant", "Sunny", True),
    ]
    steps = db.rows(
        "SELECT step_type, interrupted FROM step_executions WHERE run_id = :id ORDER BY step_index",
        id=cut["id"],
    )
    assert [(s["step_type"], bool(s["interrupted"])) for s in steps] == [
        ("tool_use", False),
        ("response", True),  # the answer as far as it was shown
    ]
    assert [c for _, c, _ in conversation(db, other)] == ["again", "ok"]


def test_a_recorded_turn_writes_the_rows_agent_run_writes_for_the_same_turn(
    ledger: Ledger, db: Database
) -> None:
    """One write path: what a caller's loop records is what the agent loop records, column for
    column (but for ids, times and who recorded it)."""
    first, second = (
        Usage(input_tokens=812, output_tokens=24),
        Usage(input_tokens=870, output_tokens=9),
    )
    llm = ScriptedLLM(
        [
            InferenceResponse(tool_calls=[WEATHER], usage=first, finish_reason="tool_calls"),
            InferenceResponse(content="Sunny and 22C.", usage=second, finish_reason="stop"),
        ],
        model="gpt-4o",
        prices=PriceTable.default(),
    )

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "22C, sunny"

    agent = AgentBuilder().with_llm(llm).with_tools([get_weather]).with_ledger(ledger).build()
    ran = agent.run(QUESTION)
    with ledger.turn(user=QUESTION, model="gpt-4o") as turn:
        turn.step(tool_calls=[WEATHER], usage=first, finish_reason="tool_calls").tool_result(
            "c1", "22C, sunny"
        )
        turn.answer("Sunny and 22C.", usage=second, finish_reason="stop")

    queries = {
        "agent_runs": "SELECT agent_name, status, stop_reason, error, step_count, model, "
        "input_tokens, output_tokens, cost_usd, fully_priced, depth FROM agent_runs WHERE id = :id",
        "step_executions": "SELECT step_index, step_type, model, finish_reason, input_tokens, "
        "output_tokens, cost_usd, error, interrupted FROM step_executions WHERE run_id = :id "
        "ORDER BY step_index",
        "tool_executions": "SELECT step_index, position, tool_name, tool_call_id, arguments, "
        "result, is_error, error FROM tool_executions WHERE run_id = :id ORDER BY step_index",
        "conversation_messages": "SELECT seq, role, content, section, tool_calls, in_context, "
        "interrupted FROM conversation_messages WHERE run_id = :id ORDER BY seq",
    }
    for table, sql in queries.items():
        assert db.rows(sql, id=turn.run_id) == db.rows(sql, id=ran.run_id), table
    assert db.rows(queries["tool_executions"], id=turn.run_id)  # not two empty lists


@SQLITE_ONLY
def test_user_metadata_is_kept_with_the_user_message(ledger: Ledger, db: Database) -> None:
    with ledger.turn(user=QUESTION, user_metadata={"channel": "web", "lang": "fr"}) as turn:
        turn.answer("Sunny.")
    stored = db.scalar(
        "SELECT metadata FROM conversation_messages WHERE run_id = :id AND role = 'user'",
        id=turn.run_id,
    )
    assert json.loads(stored) == {"channel": "web", "lang": "fr"}
    assert ledger.messages(turn.conversation_id)[0].metadata == {"channel": "web", "lang": "fr"}


@SQLITE_ONLY
def test_a_turn_that_stops_to_wait_for_approval_ends_interrupted_with_its_calls_answered(
    ledger: Ledger, db: Database
) -> None:
    refund = ToolCall(id="r1", name="refund", arguments={"amount": 40})
    with ledger.turn(user="Refund my order") as turn:
        turn.step("I need a human to approve this.", tool_calls=[refund])
        result = turn.interrupt("waiting for a human to approve the refund")

    assert result.status is AgentStatus.INTERRUPTED and turn.status is AgentStatus.INTERRUPTED
    run = db.row("SELECT status, stop_reason, error FROM agent_runs WHERE id = :id", id=turn.run_id)
    assert run == {
        "status": "interrupted",
        "stop_reason": "error",
        "error": "waiting for a human to approve the refund",
    }
    tool = db.row("SELECT is_error, result FROM tool_executions WHERE run_id = :id", id=turn.run_id)
    assert tool["is_error"] and tool["result"].startswith("interrupted:")
    with pytest.raises(UsageError, match="has ended"):
        turn.answer("too late")

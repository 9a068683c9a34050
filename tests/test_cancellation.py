"""Cancelled runs lose nothing: a run stopped mid-answer (its stream closed, its task cancelled,
Ctrl-C) ends ``interrupted`` with exactly the text its caller was shown committed, flagged; the
text is flushed while it streams; tool calls in flight get a result; and a run cancelled at any
await point keeps the ledger's invariants. On SQLite and PostgreSQL, checked with SQL."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentBuilder,
    AgentStatus,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Role,
    ScriptedLLM,
    SubagentSpec,
    ToolCall,
    Usage,
    tool,
)
from agentledger._loop import AsyncRunStream
from agentledger._recording import INTERRUPTED_RESULT
from agentledger.errors import ProviderStreamCutError
from agentledger.events import TextDelta, ToolCallStarted
from agentledger.ledger import Ledger
from support.cli import flat, ok
from support.invariants import violations
from support.ledger import Database

QUESTION = "Tell me about Lisbon."
LONG = "Lisbon is built on seven hills above the Tagus. " * 12


def answer(text: str) -> InferenceResponse:
    return InferenceResponse(content=text, finish_reason="stop")


def calls(*pairs: tuple[str, dict[str, Any]], text: str = "") -> InferenceResponse:
    return InferenceResponse(
        content=text,
        tool_calls=[
            ToolCall(id=f"call_{n}", name=t, arguments=a) for n, (t, a) in enumerate(pairs)
        ],
        finish_reason="tool_calls",
    )


def slow(ledger: Ledger, *responses: InferenceResponse, **flush: Any) -> Agent:
    llm = ScriptedLLM(list(responses) or [answer(LONG)], chunk_size=6, chunk_delay=0.01)
    builder = AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([weather])
    return (builder.with_partial_flush(**flush) if flush else builder).build()


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


def conversation(db: Database, conversation_id: str) -> list[tuple[str, str, bool]]:
    return [
        (r["role"], r["content"], bool(r["interrupted"]))
        for r in db.rows(
            "SELECT role, content, interrupted FROM conversation_messages "
            "WHERE conversation_id = :c ORDER BY seq",
            c=conversation_id,
        )
    ]


def tool_rows(db: Database, run_id: str) -> list[dict[str, Any]]:
    """The run's tool executions in call order, ``is_error`` as a bool on every backend."""
    rows = db.rows(
        "SELECT tool_call_id, tool_name, is_error, error, result FROM tool_executions "
        "WHERE run_id = :r ORDER BY step_index, position",
        r=run_id,
    )
    return [{**r, "is_error": bool(r["is_error"])} for r in rows]


def the_run(db: Database, run_id: str) -> dict[str, Any]:
    return db.row(
        "SELECT status, stop_reason, error, partial_output, conversation_id "
        "FROM agent_runs WHERE id = :r",
        r=run_id,
    )


async def stopped_after(stream: AsyncRunStream, characters: int) -> str:
    """Read ``stream`` until it has shown ``characters`` of text, then close it (the user
    pressed Stop); the text shown."""
    shown = ""
    async for event in stream:
        if isinstance(event, TextDelta):
            shown += event.text
            if len(shown) >= characters:
                break
    await stream.aclose()
    return shown


# --- closing or cancelling a stream mid-answer --------------------------------------------------


def test_closing_a_stream_commits_exactly_the_text_it_handed_over(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    stream = slow(ledger).stream(QUESTION)
    shown = ""
    for event in stream:
        if isinstance(event, TextDelta):
            shown += event.text
            if len(shown) >= 60:
                break
    stream.close()

    result = stream.result
    assert result.status is AgentStatus.INTERRUPTED and result.answer == shown
    run = the_run(db, result.run_id)
    assert (run["status"], run["stop_reason"], run["partial_output"]) == (
        "interrupted",
        "cancelled",
        None,
    )
    assert conversation(db, result.conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", shown, True),
    ]
    # the step it was streaming is in the trace tables, flagged, holding what was shown
    step = db.row(
        "SELECT step_index, step_type, interrupted, content, stop_reason FROM step_executions "
        "WHERE run_id = :r",
        r=result.run_id,
    )
    assert {**step, "interrupted": bool(step["interrupted"])} == {
        "step_index": 0,
        "step_type": "response",
        "interrupted": True,
        "content": shown,
        "stop_reason": "cancelled",
    }
    assert db.scalar("SELECT step_count FROM agent_runs") == 1
    assert violations(db_url) == []


def test_aclose_commits_exactly_the_text_it_handed_over_and_the_next_run_sees_it(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    async def main() -> tuple[str, Any]:
        stream = slow(ledger).astream(QUESTION)
        return await stopped_after(stream, 30), stream.result

    shown, result = asyncio.run(main())
    assert result.status is AgentStatus.INTERRUPTED and result.answer == shown
    assert conversation(db, result.conversation_id)[-1] == ("assistant", shown, True)

    llm = ScriptedLLM([answer("...and its trams are yellow.")])
    AgentBuilder().with_llm(llm).with_ledger(ledger).build().run("go on", result.conversation_id)
    seen = [(m.role, m.content) for m in llm.requests[0].messages]
    assert seen[-2:] == [(Role.ASSISTANT, shown), (Role.USER, "go on")]
    assert violations(db_url) == []


def test_cancelling_the_task_that_consumes_a_stream_keeps_what_it_was_shown(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    shown: list[str] = []

    async def consume(agent: Agent, enough: asyncio.Event) -> None:
        async for event in agent.astream(QUESTION):
            if isinstance(event, TextDelta):
                shown.append(event.text)
                if len(shown) == 4:
                    enough.set()

    async def main() -> float:
        enough = asyncio.Event()
        # Its whole answer would take 30 s (100 chunks, 0.3 s apart): a cancel that waited
        # for it would take that long, one that did not takes a chunk's time at most.
        llm = ScriptedLLM([answer(LONG)], chunk_size=6, chunk_delay=0.3)
        agent = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
        task = asyncio.create_task(consume(agent, enough))
        await enough.wait()
        task.cancel()
        started = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.perf_counter() - started

    took = asyncio.run(main())
    assert took < 10  # the cancel did not wait for the model to finish its answer
    run = db.row("SELECT id, status, stop_reason, conversation_id FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")
    assert conversation(db, run["conversation_id"])[-1] == ("assistant", "".join(shown), True)
    assert violations(db_url) == []


def test_keyboard_interrupt_in_a_plain_run_ends_it_interrupted(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    @tool
    def press_ctrl_c(city: str) -> str:
        """Stands for the user pressing Ctrl-C while a tool runs."""
        raise KeyboardInterrupt

    llm = ScriptedLLM([calls(("press_ctrl_c", {"city": "Lisbon"}), text="Let me look.")])
    agent = AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([press_ctrl_c]).build()
    with pytest.raises(KeyboardInterrupt):
        agent.run(QUESTION)

    run = db.row("SELECT id, status, stop_reason, conversation_id FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")
    # nobody was shown the text (no stream): the conversation holds the question alone
    assert conversation(db, run["conversation_id"]) == [("user", QUESTION, False)]
    # and the call the model made is in the trace, answered "interrupted"
    (call,) = db.rows("SELECT tool_call_id, is_error, error, result FROM tool_executions")
    assert (call["tool_call_id"], bool(call["is_error"])) == ("call_0", True)
    assert call["error"] == call["result"] == INTERRUPTED_RESULT
    assert db.scalar("SELECT content FROM step_executions") == "Let me look."
    assert violations(db_url) == []


# --- durable while it streams -------------------------------------------------------------------


@pytest.mark.parametrize("flush", [{"seconds": 0.05}, {"seconds": 3600, "characters": 24}])
def test_what_was_shown_is_flushed_while_the_step_streams_then_cleared(
    ledger: Ledger, db: Database, flush: dict[str, float]
) -> None:
    stream = slow(ledger, **flush).stream(QUESTION)
    shown, flushed = "", []
    for event in stream:
        if isinstance(event, TextDelta):
            shown += event.text
            partial = db.scalar("SELECT partial_output FROM agent_runs")
            if partial:
                flushed.append((partial, shown))
    assert flushed, "no flush was seen while the answer streamed"
    for partial, shown_then in flushed:
        assert shown_then.startswith(partial)  # never more than was shown
    assert stream.result.answer == LONG
    run = db.row("SELECT status, partial_output, partial_step_index FROM agent_runs")
    assert (run["status"], run["partial_output"], run["partial_step_index"]) == (
        "completed",
        None,
        None,
    )


def test_the_flush_interval_is_checked() -> None:
    with pytest.raises(Exception, match="seconds > 0"):
        AgentBuilder().with_partial_flush(seconds=0)


# --- cut streams and failures after text was shown ----------------------------------------------


class CutAfter:
    """Streams ``text``, then the connection drops (as a provider reports a cut stream)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        raise AssertionError("a streaming caller calls stream")

    def stream(self, request: InferenceRequest) -> Iterator[InferenceDelta | InferenceResponse]:
        for word in self.text.split(" "):
            yield InferenceDelta(text=word + " ")
        raise ProviderStreamCutError(
            "the connection to the provider dropped mid-stream",
            provider="Test",
            partial=answer(self.text),
        )


def test_a_stream_cut_after_text_was_shown_keeps_that_text_and_the_error(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    agent = AgentBuilder().with_llm(CutAfter("Lisbon is")).with_ledger(ledger).build()
    stream = agent.stream(QUESTION)
    shown = "".join(e.text for e in stream if isinstance(e, TextDelta))
    assert shown == "Lisbon is "

    result = stream.result
    assert result.status is AgentStatus.INTERRUPTED and result.answer == shown
    run = the_run(db, result.run_id)
    assert (run["status"], run["stop_reason"]) == ("interrupted", "error")
    assert "dropped mid-stream" in run["error"]
    assert conversation(db, result.conversation_id)[-1] == ("assistant", shown, True)
    assert violations(db_url) == []


# --- tools in flight ----------------------------------------------------------------------------


def test_cancelling_during_tools_cancels_async_tools_and_answers_every_call(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    cancelled, sync_done = threading.Event(), threading.Event()

    @tool
    async def slow_async(city: str) -> str:
        """Takes a long time."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @tool
    def slow_sync(city: str) -> str:
        """Takes a while, in a thread."""
        time.sleep(0.4)
        sync_done.set()
        return "done late"

    @tool
    def quick(city: str) -> str:
        """Returns at once."""
        return f"quick {city}"

    step = calls(
        ("quick", {"city": "Lisbon"}),
        ("slow_async", {"city": "Lisbon"}),
        ("slow_sync", {"city": "Lisbon"}),
        text="Checking three sources.",
    )
    llm = ScriptedLLM([step, answer("never reached")], chunk_size=8)
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_ledger(ledger)
        .with_tools([quick, slow_async, slow_sync])
        .with_parallel_tools(3)
        .build()
    )

    async def main() -> tuple[str, Any, float]:
        stream = agent.astream(QUESTION)
        shown, started = "", 0
        async for event in stream:
            if isinstance(event, TextDelta):
                shown += event.text
            if isinstance(event, ToolCallStarted):
                started += 1
                if started == 3:
                    break
        await asyncio.sleep(0.05)  # the quick tool returns
        begun = time.perf_counter()
        await stream.aclose()
        return shown, stream.result, time.perf_counter() - begun

    shown, result, took = asyncio.run(main())
    assert took < 1 and cancelled.wait(2)
    assert shown == "Checking three sources." == result.answer
    message = db.row(
        "SELECT content, interrupted, tool_calls FROM conversation_messages "
        "WHERE conversation_id = :c AND role = 'assistant'",
        c=result.conversation_id,
    )
    assert message["content"] == shown and message["interrupted"]
    assert message["tool_calls"] in (None, "[]", [])  # a model is sent a plain answer
    rows = {r["tool_name"]: r for r in tool_rows(db, result.run_id)}
    assert (rows["quick"]["result"], rows["quick"]["is_error"]) == ("quick Lisbon", False)
    assert (rows["slow_async"]["result"], rows["slow_async"]["is_error"]) == (
        INTERRUPTED_RESULT,
        True,
    )
    assert rows["slow_sync"]["is_error"] and rows["slow_sync"]["error"].startswith("interrupted:")
    # the sync tool finished in its thread: its result is added to its row, still flagged an
    # error (nothing acted on it)
    assert sync_done.wait(2)
    deadline, late = time.monotonic() + 5, None
    while time.monotonic() < deadline:
        late = {r["tool_name"]: r for r in tool_rows(db, result.run_id)}["slow_sync"]
        if late["result"] != INTERRUPTED_RESULT:
            break
        time.sleep(0.02)
    assert late is not None and late["result"] == "done late" and late["is_error"]
    assert "returned after the run had ended" in late["error"]
    assert db.scalar("SELECT count(*) FROM agent_runs") == 1
    assert db.scalar("SELECT status FROM agent_runs") == "interrupted"
    assert violations(db_url) == []


def test_a_tool_call_cut_by_a_cancel_is_in_the_trace_tables_and_everything_reading_them(
    ledger: Ledger, db: Database, db_url: str, tmp_path: Any
) -> None:
    @tool
    async def lookup(city: str) -> str:
        """Looks a city up, for ever."""
        await asyncio.Event().wait()
        return "never"

    three = [("weather", "Lisbon"), ("lookup", "Lisbon"), ("weather", "Porto")]
    step = InferenceResponse(
        content="Let me check.",
        tool_calls=[
            ToolCall(id=f"call_{n}", name=name, arguments={"city": city})
            for n, (name, city) in enumerate(three)
        ],
        usage=Usage(input_tokens=120, output_tokens=30),
        cost_usd=0.002,
        model="scripted-model",
        finish_reason="tool_calls",
    )
    llm = ScriptedLLM([step, answer("never reached")], chunk_size=8)
    builder = AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([weather, lookup])
    agent = builder.build()  # one call after another: the third never starts

    async def main() -> tuple[str, Any]:
        stream = agent.astream(QUESTION)
        shown = ""
        async for event in stream:
            if isinstance(event, TextDelta):
                shown += event.text
            if isinstance(event, ToolCallStarted) and event.call.name == "lookup":
                break
        await stream.aclose()
        return shown, stream.result

    shown, result = asyncio.run(main())
    assert shown == "Let me check." == result.answer
    run_id = result.run_id
    row = db.row(
        "SELECT step_index, step_type, interrupted, content, tool_call_count, input_tokens, "
        "output_tokens, cost_usd, stop_reason FROM step_executions WHERE run_id = :r",
        r=run_id,
    )
    assert {**row, "interrupted": bool(row["interrupted"])} == {
        "step_index": 0,
        "step_type": "tool_use",
        "interrupted": True,
        "content": "Let me check.",
        "tool_call_count": 3,
        "input_tokens": 120,
        "output_tokens": 30,
        "cost_usd": 0.002,
        "stop_reason": "cancelled",
    }
    done, cut, never = tool_rows(db, run_id)
    assert (done["tool_name"], done["is_error"], done["result"]) == (
        "weather",
        False,
        "22C and sunny in Lisbon",
    )
    assert (cut["tool_name"], cut["is_error"]) == ("lookup", True)
    assert cut["error"].startswith("interrupted:") and "it had started" in cut["error"]
    assert (never["tool_name"], never["is_error"]) == ("weather", True)
    assert never["error"].startswith("interrupted:") and "it had not started" in never["error"]
    run = db.row(
        "SELECT status, step_count, input_tokens, cost_usd FROM agent_runs WHERE id = :r", r=run_id
    )
    assert run == {"status": "interrupted", "step_count": 1, "input_tokens": 120, "cost_usd": 0.002}
    # a model can be sent the trace: each call is followed by its result
    trace = ledger.trace_messages(run_id)
    assert [m.role for m in trace] == [Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.TOOL]
    assert [c.id for c in trace[0].tool_calls] == [m.tool_call_id for m in trace[1:]]
    assert trace[2].content == cut["result"]
    # the trace command shows the step, its calls and the answer the user was shown
    shown_trace = flat(ok("--db", db_url, "trace", run_id))
    assert "step 0 · tool_use · 120 in / 30 out" in shown_trace
    assert "interrupted" in shown_trace and "✗ lookup" in shown_trace
    assert "interrupted answer: Let me check." in shown_trace
    # the analytics and the OpenTelemetry export see the calls
    pytest.importorskip("duckdb")
    from agentledger.analytics import Analytics
    from agentledger.integrations.otel import export_otlp

    with Analytics.open(db_url) as analytics:
        relation = analytics.tool_stats()
        stats = {r[0]: dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()}
    assert (stats["lookup"]["calls"], stats["lookup"]["errors"]) == (1, 1)
    assert (stats["weather"]["calls"], stats["weather"]["errors"]) == (2, 1)
    output = tmp_path / "spans.jsonl"
    export_otlp(ledger, since=datetime(2000, 1, 1, tzinfo=UTC), output=output)
    spans = json.loads(output.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert sorted(s["name"] for s in spans if s["name"].startswith("execute_tool")) == [
        "execute_tool lookup",
        "execute_tool weather",
        "execute_tool weather",
    ]
    assert violations(db_url) == []


def test_cancelling_a_run_while_its_subagent_streams_interrupts_both(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    child = SubagentSpec(
        name="researcher",
        description="Looks things up.",
        llm=ScriptedLLM([answer(LONG)], chunk_size=6, chunk_delay=0.01),
    )
    spawn = calls(("spawn_subagent", {"subagent": "researcher", "task": "Lisbon facts"}))
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([spawn, answer("never reached")]))
        .with_ledger(ledger)
        .with_subagents([child])
        .build()
    )

    shown = asyncio.run(stopped_after(agent.astream(QUESTION), 30))
    runs = db.rows("SELECT id, status, stop_reason, parent_run_id, conversation_id FROM agent_runs")
    assert {(r["status"], r["stop_reason"]) for r in runs} == {("interrupted", "cancelled")}
    [sub] = [r for r in runs if r["parent_run_id"] is not None]
    assert conversation(db, sub["conversation_id"])[-1] == ("assistant", shown, True)
    assert violations(db_url) == []


# --- every await point --------------------------------------------------------------------------


async def cancelled_at(coroutine: Coroutine[Any, Any, Any], point: int) -> int:
    """Run ``coroutine`` on this task, cancelling it at its ``point``-th await (from 1) exactly
    as ``Task.cancel`` would: the future it waits on is cancelled and it resumes. Returns how
    many awaits it made (fewer than ``point`` when it ended first)."""
    made = 0
    while True:
        try:
            waited = coroutine.send(None)
        except StopIteration:
            return made
        except asyncio.CancelledError:
            return made
        made += 1
        if made == point and waited is not None:
            waited.cancel()
            continue
        if waited is None:
            await asyncio.sleep(0)
        else:
            await asyncio.wait([waited])


def a_turn(ledger: Ledger) -> Agent:
    script = [calls(("weather", {"city": "Lisbon"}), text="Let me check."), answer(LONG[:90])]
    llm = ScriptedLLM(script, chunk_size=6)
    return AgentBuilder().with_llm(llm).with_ledger(ledger).with_tools([weather]).build()


def test_a_run_cancelled_at_each_of_its_await_points_keeps_every_invariant(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    awaits = asyncio.run(cancelled_at(a_turn(ledger).arun(QUESTION), point=10**6))
    assert awaits >= 6  # load, begin, two steps and their records, the commit
    for point in range(1, awaits + 1):
        asyncio.run(cancelled_at(a_turn(ledger).arun(QUESTION), point))
        assert violations(db_url) == [], f"cancelled at await {point}"
        assert db.scalar("SELECT count(*) FROM agent_runs WHERE status = 'running'") == 0
    # every cancelled run kept its user message, and answered or was flagged interrupted
    for run in db.rows("SELECT id, status, stop_reason FROM agent_runs"):
        messages = db.rows(
            "SELECT role, interrupted FROM conversation_messages WHERE run_id = :r ORDER BY seq",
            r=run["id"],
        )
        assert messages[0]["role"] == "user", run
        if run["status"] == "interrupted":
            assert run["stop_reason"] == "cancelled"
            assert all(m["interrupted"] for m in messages[1:]), run
        else:
            assert run["status"] == "completed" and len(messages) == 2, run
    # and every conversation is free: a new run on it completes
    for conversation_id in db.column("SELECT id FROM conversations"):
        result = a_turn(ledger).run("And then?", conversation_id)
        assert result.status is AgentStatus.COMPLETED


def test_a_stream_closed_after_each_of_its_events_keeps_exactly_what_was_shown(
    ledger: Ledger, db: Database, db_url: str
) -> None:
    async def events() -> int:
        return len([e async for e in a_turn(ledger).astream(QUESTION)])

    count = asyncio.run(events())

    async def closed_after(n: int) -> tuple[str, Any]:
        stream = a_turn(ledger).astream(QUESTION)
        shown, seen = {}, 0
        async for event in stream:
            seen += 1
            if isinstance(event, TextDelta):
                shown[event.step_index] = shown.get(event.step_index, "") + event.text
            if seen == n:
                break
        await stream.aclose()
        return shown, stream.result

    for n in range(1, count):
        shown, result = asyncio.run(closed_after(n))
        if result.status is AgentStatus.INTERRUPTED:
            step = max(shown, default=None)
            recorded = db.scalar(
                "SELECT count(*) FROM step_executions WHERE run_id = :r AND NOT interrupted",
                r=result.run_id,
            )
            expected = shown.get(step, "") if step is not None and step >= recorded else ""
            assert (result.answer or "") == expected, f"closed after event {n}"
        assert violations(db_url) == [], f"closed after event {n}"


def test_a_stream_closed_while_its_run_begins_ends_the_run(tmp_path: Any) -> None:
    """Closed before its first event (the run's row being written, the database busy), the
    run still ends interrupted rather than running until its lease expires."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    db = Database(url)
    with Ledger.open(url) as ledger:
        agent = slow(ledger)
        agent.run("Warm up.")  # the conversation exists; its next run's begin will wait
        blocker = db.engine.connect()
        blocker.exec_driver_sql("BEGIN IMMEDIATE")  # holds the write lock
        stream = agent.stream(QUESTION)
        reader = threading.Thread(target=lambda: list(stream), daemon=True)
        reader.start()
        time.sleep(0.2)  # the run waits on the lock, in begin_run
        threading.Timer(0.3, blocker.rollback).start()
        stream.close()
        reader.join(5)
        blocker.close()
        runs = db.rows("SELECT status, stop_reason FROM agent_runs ORDER BY started_at")
        assert [(r["status"], r["stop_reason"]) for r in runs] == [
            ("completed", "completed"),
            ("interrupted", "cancelled"),
        ]
        assert violations(url) == []
    db.close()

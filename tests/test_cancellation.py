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
from typing import Any

import pytest

from agentledger import (
    Agent,
    AgentBuilder,
    AgentStatus,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ProviderStreamCutError,
    Role,
    ScriptedLLM,
    SubagentSpec,
    ToolCall,
    tool,
)
from agentledger.events import TextDelta, ToolCallStarted
from agentledger.ledger import Ledger
from agentledger.loop import AsyncRunStream
from agentledger.recording import INTERRUPTED_RESULT, INTERRUPTED_TOOL_CALLS, LATE_TOOL_RESULTS
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


def as_json(value: Any) -> Any:
    """A JSON column's value: text on SQLite, decoded already on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


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
        task = asyncio.create_task(consume(slow(ledger), enough))
        await enough.wait()
        task.cancel()
        started = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.perf_counter() - started

    took = asyncio.run(main())
    assert took < 1  # the cancel did not wait for the model to finish its answer
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

    run = db.row("SELECT status, stop_reason, conversation_id FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")
    # nobody was shown the text (no stream), but the call the model made gets its answer
    [(role, content, flag)] = conversation(db, run["conversation_id"])[1:]
    assert (role, content, flag) == ("assistant", "", True)
    metadata = as_json(
        db.scalar(
            "SELECT metadata FROM conversation_messages WHERE role = 'assistant' AND "
            "conversation_id = :c",
            c=run["conversation_id"],
        )
    )
    assert [(c["id"], c["result"]) for c in metadata[INTERRUPTED_TOOL_CALLS]] == [
        ("call_0", INTERRUPTED_RESULT)
    ]
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
        "SELECT content, interrupted, tool_calls, metadata FROM conversation_messages "
        "WHERE conversation_id = :c AND role = 'assistant'",
        c=result.conversation_id,
    )
    assert message["content"] == shown and message["interrupted"]
    assert message["tool_calls"] in (None, "[]", [])  # a model is sent a plain answer
    metadata = as_json(message["metadata"])
    results = {c["name"]: c["result"] for c in metadata[INTERRUPTED_TOOL_CALLS]}
    assert results == {
        "quick": "quick Lisbon",
        "slow_async": INTERRUPTED_RESULT,
        "slow_sync": INTERRUPTED_RESULT,
    }
    # the sync tool finished in its thread: its result is recorded, and nothing acted on it
    assert sync_done.wait(2)
    deadline, late = time.monotonic() + 5, None
    while late is None and time.monotonic() < deadline:
        metadata = as_json(db.scalar("SELECT metadata FROM agent_runs")) or {}
        late = metadata.get(LATE_TOOL_RESULTS)
        time.sleep(0.02)
    assert late == {"call_2": "done late"}
    assert db.scalar("SELECT count(*) FROM agent_runs") == 1
    assert db.scalar("SELECT status FROM agent_runs") == "interrupted"
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
                "SELECT count(*) FROM step_executions WHERE run_id = :r", r=result.run_id
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

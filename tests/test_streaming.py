"""Streaming a run: ``Agent.stream`` and ``Agent.astream`` tell a run's events as they happen
(typed, JSON-ready, the subagents' runs among them), then give its result; ``ScriptedLLM``
streams offline."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest
from pydantic import TypeAdapter

from agentledger import (
    Agent,
    AgentBuilder,
    AgentStatus,
    SubagentSpec,
    ToolCall,
    UsageError,
    tool,
)
from agentledger.events import (
    Event,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    StepRecorded,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from agentledger.ledger import Ledger
from agentledger.llm import InferenceDelta, InferenceRequest, InferenceResponse, ScriptedLLM
from support.ledger import Database

QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny and 22C in Paris, says the researcher."
CHILD_ANSWER = "Sunny, 22C."


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


def calls(*pairs: tuple[str, dict[str, Any]]) -> InferenceResponse:
    return InferenceResponse(
        tool_calls=[
            ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
        ],
        finish_reason="tool_calls",
    )


def answer(text: str, reasoning: str | None = None) -> InferenceResponse:
    return InferenceResponse(content=text, reasoning=reasoning, finish_reason="stop")


def lead(ledger: Ledger | None, *, chunk_size: int | None = 5) -> Agent:
    """``lead`` looks the weather up, then asks ``researcher`` (a subagent), then answers."""
    researcher = SubagentSpec(
        name="researcher",
        description="Checks the weather.",
        llm=ScriptedLLM([answer(CHILD_ANSWER)], chunk_size=chunk_size),
    )
    llm = ScriptedLLM(
        [
            calls(("weather", {"city": "Paris"})),
            calls(("spawn_subagent", {"subagent": "researcher", "task": "Check Paris"})),
            answer(ANSWER, reasoning="The tools agree."),
        ],
        chunk_size=chunk_size,
    )
    builder = AgentBuilder().with_llm(llm).with_name("lead").with_tools([weather])
    builder = builder.with_subagents([researcher])
    return (builder.with_ledger(ledger) if ledger is not None else builder).build()


def shape(events: list[Any]) -> list[tuple[str, int]]:
    """Each event's type and the depth of the run it comes from."""
    depths: dict[str, int] = {}
    for event in events:
        if isinstance(event, RunStarted):
            depths[event.run_id] = event.depth
    return [(e.type, depths[e.run_id]) for e in events]


EXPECTED_SHAPE = [
    ("run_started", 0),
    ("tool_call_started", 0),
    ("tool_call_finished", 0),
    ("step_recorded", 0),
    ("tool_call_started", 0),
    ("run_started", 1),
    *[("text_delta", 1)] * -(-len(CHILD_ANSWER) // 5),
    ("step_recorded", 1),
    ("run_finished", 1),
    ("tool_call_finished", 0),
    ("step_recorded", 0),
    *[("text_delta", 0)] * -(-len(ANSWER) // 5),
    *[("reasoning_delta", 0)] * -(-len("The tools agree.") // 5),
    ("step_recorded", 0),
    ("run_finished", 0),
]


def test_a_stream_tells_a_run_with_tools_and_a_subagent_in_order(ledger: Ledger) -> None:
    stream = lead(ledger).stream(QUESTION)
    events = list(stream)

    assert shape(events) == EXPECTED_SHAPE
    result = stream.result
    assert result.answer == ANSWER and result.status is AgentStatus.COMPLETED
    started = [e for e in events if isinstance(e, RunStarted)]
    assert started[0].run_id == result.run_id and started[0].agent_name == "lead"
    assert started[1].parent_run_id == result.run_id and started[1].agent_name == "researcher"
    assert started[1].run_id == result.child_run_ids[0]
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert finished[-1].result is result
    tools = [e for e in events if isinstance(e, ToolCallFinished) and e.run_id == result.run_id]
    assert [t.result for t in tools] == ["22C and sunny in Paris", CHILD_ANSWER]


def test_every_event_dumps_to_json_and_reads_back_by_its_type(ledger: Ledger) -> None:
    stream = lead(ledger).stream(QUESTION)
    events = list(stream)
    dumped = [e.model_dump(mode="json") for e in events]

    adapter = TypeAdapter(list[Event])
    assert adapter.validate_python(dumped) == [
        e.model_copy(update={"result": None}) if isinstance(e, RunFinished) else e for e in events
    ]
    last = dumped[-1]
    assert last["type"] == "run_finished" and "result" not in last and "state" not in last
    assert last["answer"] == ANSWER and last["status"] == "completed"
    call = next(d for d in dumped if d["type"] == "tool_call_started")
    assert call["call"]["name"] == "weather" and call["call"]["arguments"] == {"city": "Paris"}


def test_the_text_deltas_of_the_answer_join_to_the_answer(ledger: Ledger) -> None:
    stream = lead(ledger, chunk_size=3).stream(QUESTION)
    events = list(stream)
    run_id = stream.result.run_id
    text = [e.text for e in events if isinstance(e, TextDelta) and e.run_id == run_id]
    reasoning = [e.text for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(text) == ANSWER == stream.result.answer
    assert all(len(piece) <= 3 for piece in text)
    assert "".join(reasoning) == "The tools agree."


def test_a_model_that_cannot_stream_tells_its_whole_text_as_one_delta() -> None:
    class Whole:
        def complete(self, request: InferenceRequest) -> InferenceResponse:
            return answer(ANSWER)

    events = list(AgentBuilder().with_llm(Whole()).build().stream(QUESTION))
    assert [e.text for e in events if isinstance(e, TextDelta)] == [ANSWER]


def test_step_recorded_comes_once_the_step_is_in_the_database(ledger: Ledger, db: Database) -> None:
    seen: list[tuple[int, int]] = []
    for event in lead(ledger).stream(QUESTION):
        if isinstance(event, StepRecorded):
            steps = db.scalar(
                "SELECT count(*) FROM step_executions WHERE run_id = :r AND step_index = :i",
                r=event.run_id,
                i=event.step_index,
            )
            seen.append((event.step_index, steps))
    assert seen == [(0, 1), (0, 1), (1, 1), (2, 1)]  # the child's step 0 comes between


def test_the_result_is_known_only_once_the_stream_is_exhausted() -> None:
    stream = AgentBuilder().with_llm(ScriptedLLM([answer(ANSWER)])).build().stream(QUESTION)
    with pytest.raises(UsageError, match="exhausted"):
        _ = stream.result
    for _event in stream:
        pass
    assert stream.result.answer == ANSWER
    assert list(stream) == []  # an exhausted stream stays exhausted


def test_astream_tells_the_same_events_as_stream(ledger: Ledger) -> None:
    async def main() -> tuple[list[Any], Any]:
        stream = lead(ledger).astream(QUESTION)
        return [event async for event in stream], stream.result

    events, result = asyncio.run(main())
    assert shape(events) == EXPECTED_SHAPE
    assert result.answer == ANSWER
    assert isinstance(events[-1], RunFinished) and events[-1].result is result


def test_a_run_that_fails_ends_its_stream_with_a_failed_run_finished() -> None:
    def down(request: InferenceRequest) -> InferenceResponse:
        raise RuntimeError("provider down")

    stream = AgentBuilder().with_llm(ScriptedLLM([down])).build().stream(QUESTION)
    events = list(stream)
    assert [e.type for e in events] == ["run_started", "step_recorded", "run_finished"]
    assert events[-1].status is AgentStatus.FAILED and "provider down" in events[-1].error


def slow_lead(ledger: Ledger) -> Agent:
    llm = ScriptedLLM([answer("word " * 200)], chunk_size=5, chunk_delay=0.01)
    return AgentBuilder().with_llm(llm).with_ledger(ledger).build()


def test_closing_a_stream_mid_answer_stops_the_run_and_frees_the_conversation(
    ledger: Ledger, db: Database
) -> None:
    stream = slow_lead(ledger).stream(QUESTION)
    for event in stream:
        if isinstance(event, TextDelta):
            break
    started = time.perf_counter()
    stream.close()
    assert time.perf_counter() - started < 1

    run = db.row("SELECT status, stop_reason, conversation_id FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")
    assert stream.result.status is AgentStatus.INTERRUPTED
    again = (
        AgentBuilder()
        .with_llm(ScriptedLLM([answer("Sun.")]))
        .with_ledger(ledger)
        .build()
        .run("Again?", run["conversation_id"])
    )
    assert again.status is AgentStatus.COMPLETED
    assert ledger.verify() == []


def test_closing_a_stream_with_a_timeout_says_a_long_sync_tool_still_holds_the_run(
    ledger: Ledger, db: Database
) -> None:
    """The run stops at its next event: a sync tool that is running holds it until it returns.
    ``close(timeout)`` does not wait for that, and says so; ``close()`` then waits."""
    release = threading.Event()

    @tool
    def slow(city: str) -> str:
        """Takes its time."""
        release.wait(10)
        return "done"

    llm = ScriptedLLM([calls(("slow", {"city": "Paris"})), answer("Never shown.")])
    agent = AgentBuilder().with_llm(llm).with_tools([slow]).with_ledger(ledger).build()
    stream = agent.stream(QUESTION)
    for event in stream:
        if isinstance(event, ToolCallStarted):
            break
    started = time.perf_counter()
    assert stream.close(timeout=0.05) is False
    assert time.perf_counter() - started < 1
    assert db.scalar("SELECT status FROM agent_runs") == "running"

    release.set()
    assert stream.close() is True
    assert stream.result.status is AgentStatus.INTERRUPTED
    assert db.row("SELECT status, stop_reason FROM agent_runs") == {
        "status": "interrupted",
        "stop_reason": "cancelled",
    }
    assert stream.close(timeout=0) is True  # closing a stopped stream again is harmless


def test_a_stream_dropped_mid_answer_stops_its_run(ledger: Ledger, db: Database) -> None:
    stream = slow_lead(ledger).stream(QUESTION)
    for event in stream:
        if isinstance(event, TextDelta):
            break
    del stream, event
    gc.collect()
    deadline = time.monotonic() + 5
    while db.scalar("SELECT status FROM agent_runs") == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    run = db.row("SELECT status, stop_reason FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")


def test_aclose_of_an_astream_mid_answer_stops_the_run(ledger: Ledger, db: Database) -> None:
    async def main() -> None:
        stream = slow_lead(ledger).astream(QUESTION)
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await stream.aclose()

    asyncio.run(main())
    run = db.row("SELECT status, stop_reason FROM agent_runs")
    assert (run["status"], run["stop_reason"]) == ("interrupted", "cancelled")
    assert ledger.verify() == []


@pytest.mark.parametrize(
    ("chunk_size", "pieces"),
    [(None, ["Hello world"]), (4, ["Hell", "o wo", "rld"]), (20, ["Hello world"])],
)
def test_scripted_llm_streams_its_content_in_chunks_then_the_whole_response(
    chunk_size: int | None, pieces: list[str]
) -> None:
    llm = ScriptedLLM([answer("Hello world")], chunk_size=chunk_size)
    items = list(llm.stream(InferenceRequest()))
    assert items[:-1] == [InferenceDelta(text=p) for p in pieces]
    assert isinstance(items[-1], InferenceResponse) and items[-1].content == "Hello world"


def test_scripted_llm_astream_sleeps_chunk_delay_between_chunks_without_blocking() -> None:
    llm = ScriptedLLM([answer("abcdef")], chunk_size=2, chunk_delay=0.05)

    async def main() -> tuple[list[Any], int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        ticking = asyncio.create_task(ticker())
        items = [item async for item in llm.astream(InferenceRequest())]
        ticking.cancel()
        return items, ticks

    started = time.perf_counter()
    items, ticks = asyncio.run(main())
    assert time.perf_counter() - started >= 0.1  # two pauses, between three chunks
    assert [i.text for i in items[:-1]] == ["ab", "cd", "ef"]
    assert ticks >= 5


@pytest.mark.parametrize(
    ("options", "message"),
    [({"chunk_size": 0}, "chunk_size=0"), ({"chunk_delay": -1.0}, "chunk_delay=-1.0")],
)
def test_scripted_llm_refuses_chunks_it_cannot_make(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ScriptedLLM([], **options)


def test_the_deltas_a_model_streams_on_the_event_loop_do_not_each_wake_it_from_outside() -> None:
    """A model streaming on the run's event loop tells each delta from the loop's own thread:
    handing it to the stream needs no wake-up write (``call_soon_threadsafe``), which at one
    per delta of many streams kept the loop busy. Events told from worker threads still
    wake it."""

    class CountingLoop(asyncio.SelectorEventLoop):
        woken = 0

        def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:
            CountingLoop.woken += 1
            return super().call_soon_threadsafe(*args, **kwargs)

    text = "x" * 200
    llm = ScriptedLLM([answer(text)], chunk_size=2)

    async def main() -> list[Event]:
        return [event async for event in AgentBuilder().with_llm(llm).build().astream(QUESTION)]

    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        events = runner.run(main())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == text and len(deltas) == 100
    assert CountingLoop.woken < 20  # the steps' and writes' threads handing back, not deltas

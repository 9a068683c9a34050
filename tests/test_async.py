"""The asynchronous loop: ``arun``, ``aresume``, ``arecover`` and ``acompact`` do what their
synchronous forms do (the same rows in the ledger), never block the event loop, run ``async
def`` tools (and sync tools in worker threads), and share one ``Ledger`` among many runs."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from agentledger import Agent, AgentBuilder, AgentStatus, ToolCall, tool
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support.ledger import Database, begin_by_hand, raising

QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny and 22C in Paris."


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


@tool
async def forecast(city: str, days: int = 1) -> str:
    """The forecast for a city, from an async service."""
    await asyncio.sleep(0.01)
    return f"{days} days of sun in {city}"


def calls(*pairs: tuple[str, dict[str, Any]]) -> InferenceResponse:
    return InferenceResponse(
        tool_calls=[
            ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(pairs)
        ],
        finish_reason="tool_calls",
    )


def script() -> list[InferenceResponse]:
    return [
        calls(("weather", {"city": "Paris"}), ("forecast", {"city": "Paris", "days": 2})),
        InferenceResponse(content=ANSWER, finish_reason="stop"),
    ]


def agent(llm: Any, ledger: Ledger | None = None, *tools: Any, parallel: int = 1) -> Agent:
    builder = AgentBuilder().with_llm(llm).with_tools(list(tools or (weather, forecast)))
    builder = builder.with_parallel_tools(parallel)
    return (builder.with_ledger(ledger) if ledger is not None else builder).build()


def rows_of(db: Database, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Everything the run wrote, without ids and times (which differ between two runs)."""
    run = db.row("SELECT * FROM agent_runs WHERE id = :id", id=run_id)
    return {
        "run": [
            {
                k: run[k]
                for k in ("status", "stop_reason", "error", "step_count", "depth", "agent_name")
            }
        ],
        "messages": db.rows(
            "SELECT section, seq, role, content, tool_calls, tool_call_id FROM "
            "conversation_messages WHERE conversation_id = :c ORDER BY seq",
            c=run["conversation_id"],
        ),
        "steps": db.rows(
            "SELECT step_index, step_type, finish_reason, should_continue, stop_reason, error "
            "FROM step_executions WHERE run_id = :r ORDER BY step_index",
            r=run_id,
        ),
        "tools": db.rows(
            "SELECT tool_call_id, tool_name, arguments, result, is_error FROM tool_executions "
            "WHERE run_id = :r ORDER BY tool_call_id",
            r=run_id,
        ),
    }


async def tick(ticks: list[float]) -> None:
    """Note the time every 10 ms: gaps show when the event loop was blocked."""
    while True:
        ticks.append(time.perf_counter())
        await asyncio.sleep(0.01)


def test_arun_records_the_same_rows_as_run(ledger: Ledger, db: Database) -> None:
    ran = agent(ScriptedLLM(script()), ledger).run(QUESTION)
    awaited = asyncio.run(agent(ScriptedLLM(script()), ledger).arun(QUESTION))

    assert awaited.answer == ran.answer == ANSWER
    assert awaited.status is AgentStatus.COMPLETED
    assert rows_of(db, awaited.run_id) == rows_of(db, ran.run_id)
    assert [t["result"] for t in rows_of(db, awaited.run_id)["tools"]] == [
        "22C and sunny in Paris",
        "2 days of sun in Paris",
    ]
    assert ledger.verify() == []


def test_arun_continues_a_conversation_like_run(ledger: Ledger, db: Database) -> None:
    first = agent(ScriptedLLM(script()), ledger).run(QUESTION)
    second = asyncio.run(
        agent(ScriptedLLM([InferenceResponse(content="Yes.")]), ledger).arun(
            "Sure?", first.conversation_id
        )
    )
    assert second.conversation_id == first.conversation_id
    contents = db.column(
        "SELECT content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=first.conversation_id,
    )
    assert contents == [QUESTION, ANSWER, "Sure?", "Yes."]


def test_an_async_tool_works_from_the_sync_loop_too() -> None:
    result = agent(ScriptedLLM(script())).run(QUESTION)
    results = [t.result for t in result.state.current_step.tool_executions]  # type: ignore[union-attr]
    assert results == []  # the last step is the answer; the tools ran in the first
    first = result.state.step_executions[0].step.tool_executions
    assert [t.result for t in first] == ["22C and sunny in Paris", "2 days of sun in Paris"]


def test_a_sync_tool_runs_in_a_worker_thread_and_the_event_loop_keeps_ticking() -> None:
    """The tool blocks its thread until a task on the event loop lets it go: had it run on
    the loop's thread, that task could never run, and the tool would say so."""
    started, released = threading.Event(), threading.Event()

    @tool
    def blocking() -> str:
        """Blocks its thread until the event loop releases it."""
        started.set()
        if not released.wait(timeout=30):
            return "the event loop was blocked"
        return threading.current_thread().name

    async def release_when_started() -> None:
        while not started.is_set():
            await asyncio.sleep(0.001)
        released.set()

    async def main() -> str | None:
        releasing = asyncio.create_task(release_when_started())
        llm = ScriptedLLM([calls(("blocking", {})), InferenceResponse(content="done")])
        result = await agent(llm, None, blocking).arun("go")
        await releasing
        return result.state.step_executions[0].step.tool_executions[0].result

    thread_name = asyncio.run(main())
    assert thread_name not in ("the event loop was blocked", threading.main_thread().name)


def test_parallel_async_tools_run_concurrently_up_to_max_parallel_tools() -> None:
    running: list[int] = []
    peak: list[int] = [0]

    @tool
    async def wait(name: str) -> str:
        """Waits a little."""
        running.append(1)
        peak[0] = max(peak[0], len(running))
        await asyncio.sleep(0.2)
        running.pop()
        return name

    four = calls(*[("wait", {"name": str(i)}) for i in range(4)])
    llm = ScriptedLLM([four, InferenceResponse(content="done")])
    result = asyncio.run(agent(llm, None, wait, parallel=2).arun("go"))

    executions = result.state.step_executions[0].step.tool_executions
    assert [e.result for e in executions] == ["0", "1", "2", "3"]  # in the calls' order
    assert peak[0] == 2  # two at once, never more


def test_a_failing_tool_call_does_not_cancel_its_siblings_it_is_an_error_result() -> None:
    @tool
    async def boom() -> str:
        """Raises."""
        raise ValueError("no")

    llm = ScriptedLLM(
        [calls(("boom", {}), ("forecast", {"city": "Oslo"})), InferenceResponse(content="ok")]
    )
    result = asyncio.run(agent(llm, None, boom, forecast, parallel=2).arun("go"))
    first, second = result.state.step_executions[0].step.tool_executions
    assert first.is_error and "ValueError: no" in first.result
    assert second.result == "1 days of sun in Oslo"


class OnlyComplete:
    """A model with nothing but ``complete``: the async loop calls it in a worker thread."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        self.threads.append(threading.current_thread().name)
        return InferenceResponse(content=ANSWER, finish_reason="stop")


def test_a_model_with_only_complete_works_in_the_async_loop_off_the_event_loop() -> None:
    llm = OnlyComplete()
    result = asyncio.run(agent(llm).arun(QUESTION))
    assert result.answer == ANSWER
    assert llm.threads and threading.main_thread().name not in llm.threads


class OnlyAsync:
    """A model whose ``acomplete`` is awaited on the event loop."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        raise AssertionError("the async loop awaits acomplete")

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        self.loops.append(asyncio.get_running_loop())
        return InferenceResponse(content=ANSWER, finish_reason="stop")


def test_an_async_model_is_awaited_on_the_running_event_loop() -> None:
    llm = OnlyAsync()

    async def main() -> tuple[str | None, asyncio.AbstractEventLoop]:
        return (await agent(llm).arun(QUESTION)).answer, asyncio.get_running_loop()

    answer, loop = asyncio.run(main())
    assert answer == ANSWER and llm.loops == [loop]


def test_aresume_continues_a_failed_run_like_resume(ledger: Ledger, db: Database) -> None:
    failed = agent(ScriptedLLM([raising(RuntimeError("provider down"))]), ledger).run(QUESTION)
    assert failed.status is AgentStatus.FAILED

    resumed = asyncio.run(agent(ScriptedLLM(script()), ledger).aresume(failed.run_id))

    assert resumed.run_id == failed.run_id and resumed.answer == ANSWER
    assert db.scalar("SELECT status FROM agent_runs WHERE id = :r", r=failed.run_id) == "completed"
    assert ledger.verify() == []


def test_arecover_resumes_stale_runs_like_recover(ledger: Ledger, db: Database) -> None:
    crashed = agent(ScriptedLLM(script()), ledger)
    left_running = begin_by_hand(crashed, ledger, QUESTION)  # its process died here
    recovered = asyncio.run(agent(ScriptedLLM(script()), ledger).arecover(stale_after=0))
    assert [r.run_id for r in recovered] == [left_running.run_id]
    assert recovered[0].status is AgentStatus.COMPLETED and recovered[0].answer == ANSWER
    assert db.scalar("SELECT status FROM agent_runs") == "completed"


def test_acompact_without_a_summarizer_says_how_to_get_one(ledger: Ledger) -> None:
    from agentledger import UsageError

    with pytest.raises(UsageError, match="with_context_budget"):
        asyncio.run(agent(ScriptedLLM([]), ledger).acompact("any"))


class Slow:
    """A model that takes its time: long enough to be cancelled while it is asked."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        raise AssertionError("the async loop awaits acomplete")

    async def acomplete(self, request: InferenceRequest) -> InferenceResponse:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return InferenceResponse(content="late")


def test_a_cancelled_arun_ends_interrupted_with_its_user_message_kept_and_frees_the_conversation(
    ledger: Ledger, db: Database
) -> None:
    first = agent(ScriptedLLM(script()), ledger).run(QUESTION)

    async def main() -> None:
        task = asyncio.create_task(
            agent(Slow(), ledger).arun("And tomorrow?", first.conversation_id)
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - started < 2  # the run did not wait for the model

    cancelled = db.row(
        "SELECT status, stop_reason, error FROM agent_runs WHERE conversation_id = :c AND id != :r",
        c=first.conversation_id,
        r=first.run_id,
    )
    assert (cancelled["status"], cancelled["stop_reason"]) == ("interrupted", "cancelled")
    assert cancelled["error"] is None
    # the conversation is free again, and holds the user message of the cancelled run
    again = asyncio.run(
        agent(ScriptedLLM([InferenceResponse(content="Sun.")]), ledger).arun(
            "And the day after?", first.conversation_id
        )
    )
    assert again.status is AgentStatus.COMPLETED
    contents = db.column(
        "SELECT content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=first.conversation_id,
    )
    assert contents == [QUESTION, ANSWER, "And tomorrow?", "And the day after?", "Sun."]
    assert ledger.verify() == []


@pytest.mark.serial
def test_many_concurrent_aruns_share_one_ledger_handle(ledger: Ledger, db: Database) -> None:
    async def one(i: int) -> Any:
        llm = ScriptedLLM(script(), chunk_size=4, chunk_delay=0.001)
        return await agent(llm, ledger, parallel=2).arun(f"{QUESTION} ({i})")

    async def main() -> list[Any]:
        return await asyncio.gather(*(one(i) for i in range(24)))

    results = asyncio.run(main())
    assert [r.status for r in results] == [AgentStatus.COMPLETED] * 24
    assert len({r.conversation_id for r in results}) == 24
    assert db.scalar("SELECT count(*) FROM agent_runs WHERE status = 'completed'") == 24
    assert db.scalar("SELECT count(*) FROM tool_executions") == 48
    assert ledger.verify() == []


@pytest.mark.serial
def test_recording_a_step_whose_flush_waits_on_a_locked_database_leaves_the_event_loop_free(
    tmp_path: Any,
) -> None:
    """Recording a streamed step first waits for a flush of its partial output in flight: a
    database write, here held up for a second by another connection's write lock. That wait
    happens in a worker thread; the event loop keeps ticking (it was blocked for the whole
    wait while it happened on the loop)."""
    import sqlite3

    path = tmp_path / "locked.db"
    ledger = Ledger.open(path, busy_timeout=10)
    llm = ScriptedLLM([InferenceResponse(content=ANSWER * 2)], chunk_size=2, chunk_delay=0.01)
    streaming = AgentBuilder().with_llm(llm).with_ledger(ledger)
    streaming = streaming.with_partial_flush(seconds=0.05).build()
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    held: list[float] = []  # when the lock was taken, and when it was let go

    def release() -> None:
        held.append(time.perf_counter())
        blocker.rollback()

    async def main() -> tuple[list[float], AgentStatus]:
        ticks: list[float] = []
        ticking = asyncio.create_task(tick(ticks))
        stream = streaming.astream(QUESTION)
        async for event in stream:
            if event.type == "text_delta" and not held:
                blocker.execute("BEGIN IMMEDIATE")  # the next flush waits for this lock
                held.append(time.perf_counter())
                threading.Timer(1.0, release).start()
        ticking.cancel()
        return ticks, stream.result.status

    ticks, status = asyncio.run(main())
    assert status is AgentStatus.COMPLETED
    taken, let_go = held
    assert ticks[-1] > let_go  # the run waited for the lock
    # Blocked on the loop, it would not tick once while the lock was held.
    assert sum(taken < t < let_go for t in ticks) >= 5
    blocker.close()
    ledger.close()

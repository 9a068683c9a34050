"""A driver written outside the package, from the names ``agentledger`` exports alone: its
``StepRequest`` hands it where its events go, how its thread awaits and how to run the tools
its model called, so it runs, streams and is recorded like the built-in ones, sync and async.
And a model's abilities (streaming, async) are decided once, when its driver is made."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    AgentStep,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    Ledger,
    Message,
    Role,
    ScriptedLLM,
    StepRequest,
    StepType,
    ToolCall,
    tool,
)
from agentledger.events import Event, RunFinished, TextDelta, ToolCallFinished, ToolCallStarted
from support.databases import sqlite_url
from support.ledger import Database

QUESTION = "Weather in Paris?"
WORDS = ["Sunny ", "and ", "22C."]


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C, sunny in {city}"


def script() -> list[InferenceResponse]:
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})
    return [InferenceResponse(tool_calls=(call,)), InferenceResponse(content="".join(WORDS))]


class WordByWordDriver:
    """Awaits its model's ``acomplete`` through the request, tells its answer word by word,
    and runs the tools the model called through the request: names from the door only."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.asynchronous: list[bool] = []

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep:
        self.asynchronous.append(request.asynchronous)
        inference = InferenceRequest(
            messages=state.messages_for_inference(), tools=request.tools.schemas()
        )
        response = request.wait_for(self._ask(inference))
        if response.content:
            for word in WORDS:
                request.tell(InferenceDelta(text=word))
        message = Message(
            role=Role.ASSISTANT, content=response.content, tool_calls=response.tool_calls
        )
        answered = AgentStep(
            step_type=StepType.TOOL_USE if response.tool_calls else StepType.RESPONSE,
            assistant_message=message,
            usage=response.usage,
            started_at=request.started_at,
            finished_at=request.clock(),
        )
        executions = request.run_tools(state, answered)
        return answered.model_copy(update={"tool_executions": executions})

    async def _ask(self, inference: InferenceRequest) -> InferenceResponse:
        self.loops.append(asyncio.get_running_loop())
        return await self.llm.acomplete(inference)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path)


def rows(url: str, sql: str) -> list[dict[str, Any]]:
    with contextlib.closing(Database(url)) as db:
        return db.rows(sql)


def drive(mode: str, ledger: Ledger, driver: WordByWordDriver) -> tuple[Any, list[Event]]:
    """Run the question with ``driver`` in ``mode``: the result, and the events streamed."""
    agent = AgentBuilder().with_driver(driver).with_tools([get_weather]).with_ledger(ledger).build()
    if mode == "run":
        return agent.run(QUESTION), []
    if mode == "stream":
        stream = agent.stream(QUESTION)
        events = list(stream)
        return stream.result, events

    async def main() -> tuple[Any, list[Event], asyncio.AbstractEventLoop]:
        if mode == "arun":
            return await agent.arun(QUESTION), [], asyncio.get_running_loop()
        stream = agent.astream(QUESTION)
        events = [event async for event in stream]
        return stream.result, events, asyncio.get_running_loop()

    result, events, loop = asyncio.run(main())
    assert driver.loops == [loop, loop]  # awaited on the caller's own event loop
    return result, events


@pytest.mark.parametrize("mode", ["run", "arun", "stream", "astream"])
def test_a_driver_written_from_the_door_awaits_tells_and_runs_tools_through_its_request(
    mode: str, url: str
) -> None:
    driver = WordByWordDriver(ScriptedLLM(script()))
    with Ledger.open(url) as ledger:
        result, events = drive(mode, ledger, driver)

    assert result.status is AgentStatus.COMPLETED and result.answer == "".join(WORDS)
    asynchronous = mode in ("arun", "astream")
    assert driver.asynchronous == [asynchronous, asynchronous]
    if not asynchronous:  # awaited on a private event loop, one a call
        assert len(set(map(id, driver.loops))) == 2
        assert all(loop.is_closed() for loop in driver.loops)
    if mode in ("stream", "astream"):
        told = [(e.step_index, e.text) for e in events if isinstance(e, TextDelta)]
        assert told == [(1, word) for word in WORDS]
        tools = [type(e) for e in events if isinstance(e, ToolCallStarted | ToolCallFinished)]
        assert tools == [ToolCallStarted, ToolCallFinished]
        assert isinstance(events[-1], RunFinished)
    assert rows(url, "SELECT result FROM tool_executions") == [{"result": "22C, sunny in Paris"}]
    assert rows(url, "SELECT content FROM conversation_messages WHERE role = 'assistant'") == [
        {"content": "".join(WORDS)}
    ]


class CutDriver:
    """Tells the first word of its answer, then its model's stream is cut: the step fails."""

    def perform_step(self, state: AgentState, request: StepRequest) -> AgentStep:
        request.tell(InferenceDelta(text=WORDS[0], reasoning="Checking."))
        return AgentStep(
            step_type=StepType.ERROR,
            started_at=request.started_at,
            finished_at=request.clock(),
            error="ConnectionError: the stream was cut",
        )


def test_what_a_custom_driver_told_before_its_step_failed_is_kept_as_an_interrupted_answer(
    url: str,
) -> None:
    with Ledger.open(url) as ledger:
        agent = AgentBuilder().with_driver(CutDriver()).with_ledger(ledger).build()
        stream = agent.stream(QUESTION)
        events = list(stream)

    assert [e.type for e in events if e.type.endswith("_delta")] == [
        "text_delta",
        "reasoning_delta",
    ]
    assert stream.result.status is AgentStatus.INTERRUPTED
    assert rows(
        url, "SELECT content, interrupted FROM conversation_messages WHERE role = 'assistant'"
    ) == [{"content": WORDS[0], "interrupted": True}]


# --- a model's abilities ------------------------------------------------------------------------


class Plain:
    """A model with ``complete`` alone (its class may gain more after the agent is built)."""

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(content="Hello there.")


@pytest.fixture
def plain() -> type[Plain]:
    """A class of ``Plain``'s own for the test, which may gain methods without it leaking."""
    return type("Later", (Plain,), {})


def test_a_model_that_gains_stream_after_the_agent_is_built_is_not_streamed(
    plain: type[Plain],
) -> None:
    agent = AgentBuilder().with_llm(plain()).build()

    def stream(self: Plain, request: InferenceRequest) -> Iterator[object]:
        raise AssertionError("its abilities were decided when the agent was built")

    plain.stream = stream  # type: ignore[attr-defined]
    told = [e.text for e in agent.stream(QUESTION) if isinstance(e, TextDelta)]
    assert told == ["Hello there."]  # its whole text, as one delta


def test_a_model_that_gains_acomplete_after_the_agent_is_built_is_not_awaited(
    plain: type[Plain],
) -> None:
    agent = AgentBuilder().with_llm(plain()).build()

    async def acomplete(self: Plain, request: InferenceRequest) -> InferenceResponse:
        raise AssertionError("its abilities were decided when the agent was built")

    plain.acomplete = acomplete  # type: ignore[attr-defined]
    result = asyncio.run(agent.arun(QUESTION))
    assert result.answer == "Hello there."

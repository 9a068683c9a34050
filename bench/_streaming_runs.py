"""The workloads of ``bench/streaming.py``: many conversations streaming at once on one event
loop, cancels mid-answer, and one turn after another through ``Agent.run`` and ``Agent.arun``.

Every figure is taken where a user of the library would see it: by the consumer of
``agent.astream(...)`` (the time it is handed each event), by a ticker task on the same event
loop, and by SQL on the ledger afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import sqlalchemy as sa

from agentledger import Agent, AgentBuilder, AgentStatus, ToolCall
from agentledger.events import RunFinished, RunStarted, StepRecorded, TextDelta, ToolCallFinished
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM

from ._common import TOOL_NAME, USAGE, call_arguments, call_id, lookup

TOOL_STEPS = 3
"""Tool-calling steps a turn (one trivial call each), then the answer."""
CHUNK_SIZE = 4
"""Characters a delta: about one token."""
CHUNK_DELAY = 0.02
"""Seconds between deltas: about 50 tokens a second."""
PREAMBLE = "Let me look that up for you. "
"""What each tool-calling step says before its call: 29 characters, 8 deltas."""
ANSWER = "The answer, from the three lookups: " + "all of them agree on it. " * 8
"""The answer: 236 characters, 59 deltas (about 1.2 s at 50 tokens a second)."""
CANCEL_AFTER = 20
"""Deltas of the answer a cancelling consumer reads before it calls ``aclose()``."""
TICK = 0.01
"""The ticker's period, in seconds."""
RARE_FLUSH = {"seconds": 3600.0, "characters": 10**9}
"""A partial-output flush that never happens within a turn."""
FLUSH_COLUMNS = {"heartbeat_at", "partial_output", "partial_step_index"}
"""The columns a flush's write sets, and no others (``RECORD_PARTIAL_OUTPUT`` in
``ledger/_interrupts.py``; recording a step clears them along with its other columns)."""


def turn_script(turns: int) -> list[InferenceResponse]:
    """``turns`` turns: each ``TOOL_STEPS`` steps saying ``PREAMBLE`` and calling ``lookup``,
    then ``ANSWER``."""
    steps = [
        InferenceResponse(
            content=PREAMBLE,
            tool_calls=[ToolCall(id=call_id(s, 0), name=TOOL_NAME, arguments=call_arguments(s, 0))],
            usage=USAGE,
        )
        for s in range(TOOL_STEPS)
    ]
    return [*steps, InferenceResponse(content=ANSWER, usage=USAGE)] * turns


def streaming_agent(ledger: Ledger, turns: int, *, rare_flush: bool = False) -> Agent:
    """An agent of its own (its own script) for one conversation, on the shared ledger."""
    llm = ScriptedLLM(turn_script(turns), chunk_size=CHUNK_SIZE, chunk_delay=CHUNK_DELAY)
    builder = AgentBuilder().with_llm(llm).with_tools([lookup]).with_ledger(ledger)
    if rare_flush:
        builder = builder.with_partial_flush(**RARE_FLUSH)
    return builder.build()


def plain_agent(ledger: Ledger, turns: int) -> Agent:
    """The same turns, not streamed and without delay: for ``Agent.run`` against ``arun``."""
    llm = ScriptedLLM(turn_script(turns))
    return AgentBuilder().with_llm(llm).with_tools([lookup]).with_ledger(ledger).build()


# --- what is observed ----------------------------------------------------------------------------


@dataclass
class Observed:
    """One round of concurrent conversations, as its consumers and its ticker saw it."""

    conversations: int
    turns: int
    wall: float = 0.0
    turn_times: list[float] = field(default_factory=list)
    """Seconds from ``astream(...)`` to its ``RunFinished``, per turn."""
    step_lags: list[float] = field(default_factory=list)
    """Seconds from a step's last ``TextDelta`` or ``ToolCallFinished`` to its
    ``StepRecorded``, as the consumer was handed them."""
    lateness: list[float] = field(default_factory=list)
    """Seconds each tick of the ticker woke after it was due."""
    flushes: int = 0
    """Partial-output writes sent to the database during the round."""
    cancels: list[float] = field(default_factory=list)
    """Seconds from ``aclose()`` called to it returned (the run recorded as stopped)."""
    cancelled_runs: list[str] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    """Status of the round's runs, from ``agent_runs``, counted."""
    interrupted_answers: int = 0
    """Answers flagged interrupted in ``conversation_messages``, from the cancelled runs."""

    @property
    def turns_done(self) -> int:
        return len(self.turn_times)


@contextlib.contextmanager
def counting_flushes(ledger: Ledger, observed: Observed) -> Iterator[None]:
    """Count the partial-output writes sent on ``ledger``'s engine while inside."""

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        if is_flush(statement):
            observed.flushes += 1

    sa.event.listen(ledger.engine, "before_cursor_execute", seen)
    try:
        yield
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", seen)


def is_flush(statement: str) -> bool:
    """Whether ``statement`` is a partial-output flush: an UPDATE of ``agent_runs`` setting
    exactly ``FLUSH_COLUMNS``."""
    found = re.match(r"\s*update agent_runs set (.*?) where ", statement, re.I | re.S)
    if found is None:
        return False
    columns = {part.split("=")[0].strip() for part in found.group(1).split(",")}
    return columns - {"change_seq"} == FLUSH_COLUMNS  # the stamp of the write (SQLite)


async def ticker(lateness: list[float], stop: asyncio.Event) -> None:
    """Wake every ``TICK`` seconds; note how late each wake is."""
    while not stop.is_set():
        due = time.perf_counter() + TICK
        await asyncio.sleep(TICK)
        lateness.append(time.perf_counter() - due)


async def converse(agent: Agent, turns: int, observed: Observed) -> None:
    """``turns`` turns on one conversation, each consumed through ``astream``."""
    conversation_id: str | None = None
    for turn in range(turns):
        started = time.perf_counter()
        ended: dict[int, float] = {}
        stream = agent.astream(f"question {turn}", conversation_id)
        async for event in stream:
            now = time.perf_counter()
            if isinstance(event, TextDelta | ToolCallFinished):
                ended[event.step_index] = now
            elif isinstance(event, StepRecorded):
                observed.step_lags.append(now - ended[event.step_index])
            elif isinstance(event, RunFinished):
                conversation_id = event.conversation_id
        observed.turn_times.append(time.perf_counter() - started)
        if stream.result.status is not AgentStatus.COMPLETED:
            raise RuntimeError(f"turn {turn} ended {stream.result.status}: {stream.result.error}")


async def converse_and_cancel(agent: Agent, observed: Observed) -> None:
    """One turn, closed once ``CANCEL_AFTER`` deltas of its answer were read."""
    stream = agent.astream("question 0")
    answered = 0
    async for event in stream:
        if isinstance(event, RunStarted):
            observed.cancelled_runs.append(event.run_id)
        if isinstance(event, TextDelta) and event.step_index == TOOL_STEPS:
            answered += 1
            if answered == CANCEL_AFTER:
                break
    started = time.perf_counter()
    await stream.aclose()
    observed.cancels.append(time.perf_counter() - started)
    if stream.result.status is not AgentStatus.INTERRUPTED:
        raise RuntimeError(f"a cancelled run ended {stream.result.status}: {stream.result.error}")


async def _round(work: list[Callable[[], object]], observed: Observed) -> None:
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(observed.lateness, stop))
    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for start in work:
            group.create_task(start())  # type: ignore[arg-type]
    observed.wall = time.perf_counter() - started
    stop.set()
    await tick


def concurrent_round(
    ledger: Ledger, conversations: int, turns: int, *, rare_flush: bool = False, cancels: int = 0
) -> Observed:
    """``conversations`` conversations at once on a new event loop, ``turns`` turns each; the
    first ``cancels`` of them instead take one turn and close it mid-answer."""
    observed = Observed(conversations, turns)
    agents = [streaming_agent(ledger, turns, rare_flush=rare_flush) for _ in range(conversations)]
    work: list[Callable[[], object]] = [
        (lambda a=a: converse_and_cancel(a, observed))
        if i < cancels
        else (lambda a=a: converse(a, turns, observed))
        for i, a in enumerate(agents)
    ]
    first_run = _latest_run(ledger)
    with counting_flushes(ledger, observed):
        asyncio.run(_round(work, observed))
    observed.statuses = _statuses_since(ledger, first_run)
    if observed.cancelled_runs:
        observed.interrupted_answers = _interrupted_answers(ledger, observed.cancelled_runs)
    return observed


def _latest_run(ledger: Ledger) -> str:
    with ledger.engine.connect() as conn:
        latest = conn.exec_driver_sql("SELECT max(id) FROM agent_runs").scalar()
    return str(latest or "")


def _statuses_since(ledger: Ledger, after: str) -> dict[str, int]:
    """The runs started after run ``after`` (ids are time-ordered), counted by status."""
    query = sa.text("SELECT status, count(*) FROM agent_runs WHERE id > :after GROUP BY status")
    with ledger.engine.connect() as conn:
        return {str(s): int(n) for s, n in conn.execute(query, {"after": after})}


def _interrupted_answers(ledger: Ledger, run_ids: list[str]) -> int:
    query = sa.text(
        "SELECT count(*) FROM conversation_messages WHERE interrupted AND run_id IN :ids"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with ledger.engine.connect() as conn:
        return int(conn.execute(query, {"ids": run_ids}).scalar() or 0)


# --- one turn after another ----------------------------------------------------------------------


def sync_turns(ledger: Ledger, turns: int) -> float:
    """``turns`` turns through ``Agent.run``, a new conversation each: seconds."""
    agent = plain_agent(ledger, turns)
    started = time.perf_counter()
    for turn in range(turns):
        agent.run(f"question {turn}")
    return time.perf_counter() - started


def async_turns(ledger: Ledger, turns: int) -> float:
    """The same turns through ``await agent.arun``, one after another on one event loop:
    seconds, the loop's start and end left out."""
    agent = plain_agent(ledger, turns)

    async def turns_in_a_row() -> float:
        started = time.perf_counter()
        for turn in range(turns):
            await agent.arun(f"question {turn}")
        return time.perf_counter() - started

    return asyncio.run(turns_in_a_row())

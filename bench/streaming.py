"""Sections 13 and 14: async and streaming, many conversations in one process.

13. ``conversations`` conversations at once on one event loop and one ledger (a SQLite file;
    a throwaway PostgreSQL server when one can be started), each an agent of its own consuming
    ``agent.astream(...)`` of a model streaming at about 50 tokens a second. Every figure is
    taken where a user would see it: by the consumer (when it is handed each event), by a
    ticker task on the same loop (how late it wakes), and by SQL on the ledger afterwards
    (every turn completed; every cancelled run interrupted, its answer flagged). The rounds
    with the default partial-output flush and with none in a turn are interleaved; the flush
    writes are counted at the driver's cursor.
14. The same turn, not streamed, one turn after another through ``Agent.run`` and through
    ``await agent.arun``, interleaved.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agentledger import Agent, AgentStatus, ScriptedLLM
from agentledger.events import RunFinished, RunStarted, StepRecorded, TextDelta, ToolCallFinished
from agentledger.ledger import Ledger

from ._common import (
    TOOL_STEPS,
    Samples,
    Sizes,
    builder,
    interleaved,
    ms,
    p99,
    postgres,
    question,
    script,
)
from ._report import Row, Section, ratio, seconds, table

PREAMBLE = "Let me look that up for you. "
"""What each tool-calling step says before its call: 29 characters, 8 deltas."""
ANSWER = "The answer, from the three lookups: " + "all of them agree on it. " * 8
"""The answer: 236 characters, 59 deltas (about 1.2 s at 50 tokens a second)."""
CHUNK_SIZE, CHUNK_DELAY, CANCEL_AFTER, TICK = 4, 0.02, 20, 0.01
"""Characters a delta (about a token), seconds between deltas, deltas of the answer read
before a cancel, the ticker's period."""
FLUSH_COLUMNS = {"heartbeat_at", "partial_output", "partial_step_index"}
"""The columns a flush's write sets, and no others (recording a step clears them along with
its other columns)."""
DEFAULT, RARE = "default flush", "no flush in a turn"


@dataclass(frozen=True)
class Plan:
    conversations: int
    turns: int
    reps: int
    """Rounds of each flush setting, and cancel rounds."""
    cancels: int
    sequential_turns: int
    sequential_reps: int


PLANS = {
    "quick": Plan(20, 1, 1, 5, 20, 3),
    "default": Plan(200, 2, 2, 50, 50, 5),
    "full": Plan(200, 3, 3, 50, 100, 9),
}


def agent(ledger: Ledger, turns: int, *, streamed: bool = True, rare_flush: bool = False) -> Agent:
    """An agent of its own (its own script) for one conversation, on the shared ledger."""
    responses = script(TOOL_STEPS, 1, said=PREAMBLE, answer=ANSWER) * turns
    delays = {"chunk_size": CHUNK_SIZE, "chunk_delay": CHUNK_DELAY} if streamed else {}
    agent = builder(ScriptedLLM(responses, **delays), ledger)  # type: ignore[arg-type]
    if rare_flush:  # an hour, and more characters than a turn has
        agent = agent.with_partial_flush(seconds=3600.0, characters=10**9)
    return agent.build()


@dataclass
class Observed:
    """One round of concurrent conversations, as its consumers and its ticker saw it, and its
    runs counted by status in ``agent_runs``."""

    turn_times: list[float] = field(default_factory=list)
    step_lags: list[float] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    cancels: list[float] = field(default_factory=list)
    cancelled_runs: list[str] = field(default_factory=list)
    flushes: int = 0
    wall: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    interrupted_answers: int = 0

    def seen(self, conn: object, cursor: object, statement: str, *args: object) -> None:
        """A ``before_cursor_execute`` listener counting the flushes."""
        self.flushes += is_flush(statement)


def is_flush(statement: str) -> bool:
    """Whether ``statement`` is a partial-output flush: an UPDATE of ``agent_runs`` setting
    exactly :data:`FLUSH_COLUMNS` (and, on SQLite, the write's change stamp)."""
    found = re.match(r"\s*update agent_runs set (.*?) where ", statement, re.I | re.S)
    columns = {part.split("=")[0].strip() for part in found.group(1).split(",")} if found else set()
    return columns - {"change_seq"} == FLUSH_COLUMNS


async def converse(agent: Agent, turns: int, observed: Observed) -> None:
    """``turns`` turns on one conversation, each consumed through ``astream``."""
    conversation_id: str | None = None
    for turn in range(turns):
        started, ended = time.perf_counter(), {}
        stream = agent.astream(question(turn), conversation_id)
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
    stream, answered = agent.astream(question(0)), 0
    async for event in stream:
        if isinstance(event, RunStarted):
            observed.cancelled_runs.append(event.run_id)
        answered += isinstance(event, TextDelta) and event.step_index == TOOL_STEPS
        if answered == CANCEL_AFTER:
            break
    started = time.perf_counter()
    await stream.aclose()
    observed.cancels.append(time.perf_counter() - started)
    if stream.result.status is not AgentStatus.INTERRUPTED:
        raise RuntimeError(f"a cancelled run ended {stream.result.status}: {stream.result.error}")


async def _round(work: list[Coroutine[Any, Any, None]], observed: Observed) -> None:
    """``work`` at once, beside a ticker that notes how late the loop wakes it."""
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            due = time.perf_counter() + TICK
            await asyncio.sleep(TICK)
            observed.lateness.append(time.perf_counter() - due)

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for conversation in work:
            group.create_task(conversation)
    observed.wall = time.perf_counter() - started
    stop.set()
    await tick


def concurrent_round(
    ledger: Ledger, plan: Plan, *, rare_flush: bool = False, cancels: int = 0
) -> Observed:
    """``plan.conversations`` conversations at once on a new event loop, ``plan.turns`` turns
    each; the first ``cancels`` of them instead take one turn and close it mid-answer. Checked:
    every turn completed, every cancelled run interrupted with its answer flagged."""
    observed, turns = Observed(), 1 if cancels else plan.turns
    agents = [agent(ledger, turns, rare_flush=rare_flush) for _ in range(plan.conversations)]
    with ledger.engine.connect() as conn:
        first = str(conn.exec_driver_sql("SELECT max(id) FROM agent_runs").scalar() or "")
    sa.event.listen(ledger.engine, "before_cursor_execute", observed.seen)
    try:
        asyncio.run(
            _round(
                [
                    converse_and_cancel(a, observed)
                    if i < cancels
                    else converse(a, turns, observed)
                    for i, a in enumerate(agents)
                ],
                observed,
            )
        )
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", observed.seen)
    by_status = sa.text("SELECT status, count(*) FROM agent_runs WHERE id > :first GROUP BY status")
    flagged = sa.text(
        "SELECT count(*) FROM conversation_messages WHERE interrupted AND run_id IN :ids"
    )
    flagged = flagged.bindparams(sa.bindparam("ids", expanding=True))
    with ledger.engine.connect() as conn:
        observed.statuses = {str(s): int(n) for s, n in conn.execute(by_status, {"first": first})}
        ids = observed.cancelled_runs or [""]
        observed.interrupted_answers = int(conn.execute(flagged, {"ids": ids}).scalar() or 0)
    expected = {"completed": (plan.conversations - cancels) * turns, "interrupted": cancels}
    found = (observed.statuses, observed.interrupted_answers)
    if found != ({k: v for k, v in expected.items() if v}, cancels):
        raise RuntimeError(f"runs ended {found[0]}, {found[1]} answers flagged: not {expected}")
    return observed


def turns_in_a_row(ledger: Ledger, turns: int, *, asynchronous: bool) -> float:
    """``turns`` turns one after another, a new conversation each, through ``Agent.run`` or
    ``await agent.arun`` on one event loop (its start and end left out): seconds a turn."""
    plain = agent(ledger, turns, streamed=False)

    async def in_a_row() -> float:
        started = time.perf_counter()
        for turn in range(turns):
            await plain.arun(question(turn))
        return (time.perf_counter() - started) / turns

    if asynchronous:
        return asyncio.run(in_a_row())
    started = time.perf_counter()
    for turn in range(turns):
        plain.run(question(turn))
    return (time.perf_counter() - started) / turns


@dataclass
class Figures:
    """One backend's rounds."""

    rounds: dict[str, list[Observed]] = field(default_factory=lambda: {DEFAULT: [], RARE: []})
    cancel_rounds: list[Observed] = field(default_factory=list)
    sequential: Samples = field(default_factory=Samples)

    def pooled(self, variant: str, what: str) -> list[float]:
        rounds = self.cancel_rounds if variant == "cancel" else self.rounds[variant]
        return [value for observed in rounds for value in getattr(observed, what)]

    def turns_per_second(self, variant: str) -> float:
        return statistics.median(len(o.turn_times) / o.wall for o in self.rounds[variant])

    def flushes_per_turn(self, variant: str) -> float:
        rounds = self.rounds[variant]
        return sum(o.flushes for o in rounds) / sum(len(o.turn_times) for o in rounds)


def measure_backend(ledger: Ledger, plan: Plan) -> Figures:
    figures = Figures()
    for rep in range(plan.reps):
        for variant in [DEFAULT, RARE] if rep % 2 == 0 else [RARE, DEFAULT]:
            observed = concurrent_round(ledger, plan, rare_flush=variant == RARE)
            figures.rounds[variant].append(observed)
        figures.cancel_rounds.append(concurrent_round(ledger, plan, cancels=plan.cancels))
    if figures.flushes_per_turn(RARE):
        raise RuntimeError("a partial-output flush was written with a flush interval of an hour")
    turns = plan.sequential_turns
    systems: dict[str, Callable[[], float]] = {
        "Agent.run": lambda: turns_in_a_row(ledger, turns, asynchronous=False),
        "await agent.arun": lambda: turns_in_a_row(ledger, turns, asynchronous=True),
    }
    figures.sequential = interleaved(systems, plan.sequential_reps)
    return figures


@dataclass
class Measured:
    plan: Plan
    backends: dict[str, Figures] = field(default_factory=dict)
    took: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def measure(plan: Plan, tmp: Path, *, with_postgres: bool = True) -> Measured:
    measured = Measured(plan)
    with postgres(measured.skipped, wanted=with_postgres) as new_database:
        urls = {"SQLite": f"sqlite:///{tmp / 'streaming.db'}"}
        urls |= {"PostgreSQL": new_database()} if new_database else {}
        for title, url in urls.items():
            print(f"  {title} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            with Ledger.open(url) as ledger:
                measured.backends[title] = measure_backend(ledger, plan)
            measured.took[title] = time.perf_counter() - started
    return measured


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("async and streaming, many conversations ...", file=sys.stderr, flush=True)
    return report(measure(PLANS[sizes.name], tmp))


def _streaming(title: str, figures: Figures) -> tuple[list[Row], list[str]]:
    """Section 13's rows and table for one backend."""
    lags, cancels = figures.pooled(DEFAULT, "step_lags"), figures.pooled("cancel", "cancels")
    turns = [statistics.median(figures.pooled(v, "turn_times")) for v in (DEFAULT, RARE)]
    late = p99(figures.pooled(DEFAULT, "lateness"))
    rows = [
        Row(f"{title}: turns per second", f"{figures.turns_per_second(DEFAULT):,.1f}"),
        seconds(f"{title}: event loop lateness, p99", late, "< 20 ms", headline=True),
        seconds(f"{title}: a step's end → its StepRecorded, median", statistics.median(lags)),
        seconds(f"{title}: a step's end → its StepRecorded, p99", p99(lags), headline=True),
        Row(f"{title}: flush writes per turn", f"{figures.flushes_per_turn(DEFAULT):.2f}"),
        ratio(
            f"{title}: turn time, default flush / no flush in a turn",
            turns[0] / turns[1],
            headline=True,
        ),
        seconds(
            f"{title}: cancel → committed interrupted, p99", p99(cancels), "< 200 ms", headline=True
        ),
    ]
    cells = []
    for variant in (DEFAULT, RARE):
        pooled = [figures.pooled(variant, what) for what in ("turn_times", "lateness", "step_lags")]
        spread = [shown for p in pooled for shown in (ms(statistics.median(p)), ms(p99(p)))]
        per_second, flushes = figures.turns_per_second(variant), figures.flushes_per_turn(variant)
        cells.append([variant, f"{per_second:,.1f}", *spread, f"{flushes:.2f}"])
    header = ["flush", "turns/s", "turn, median", "turn, p99", "loop lateness, median"]
    header += [
        "loop lateness, p99",
        "step's end → StepRecorded, median",
        "p99",
        "flush writes per turn",
    ]
    table_lines = [
        f"### {title}",
        "",
        *table(header, cells),
        f"Cancel rounds: {len(cancels)} cancels; cancel → committed median "
        f"{ms(statistics.median(cancels))}, p99 {ms(p99(cancels))}, max {ms(max(cancels))}; "
        f"loop lateness p99 during them {ms(p99(figures.pooled('cancel', 'lateness')))}.",
        "",
    ]
    return rows, table_lines


def report(measured: Measured) -> list[Section]:
    plan, sequential = measured.plan, []
    rows: list[Row] = []
    details: list[str] = []
    for title, figures in measured.backends.items():
        more, lines = _streaming(title, figures)
        rows, details = rows + more, details + lines
        samples = figures.sequential
        sequential += [
            seconds(f"{title}: Agent.run, per turn", samples.median("Agent.run")),
            seconds(f"{title}: await agent.arun, per turn", samples.median("await agent.arun")),
            ratio(
                f"{title}: arun / run, per turn",
                samples.ratio("await agent.arun", "Agent.run"),
                "≤ 1.2x",
                True,
            ),
        ]
    took = ", ".join(f"{title} {seconds:.0f} s" for title, seconds in measured.took.items())
    streaming = Section(
        "13. Async streaming: many conversations in one process",
        f"{plan.conversations} conversations at once on one event loop and one ledger, each an "
        f"agent of its own consuming `agent.astream(...)`, {plan.turns} turns each; `ScriptedLLM` "
        f"streaming deltas of {CHUNK_SIZE} characters {CHUNK_DELAY} s apart (about 50 tokens a "
        f"second); a turn is {TOOL_STEPS} tool-calling steps (a 29-character sentence, a trivial "
        "tool's call) and a 236-character answer. SQLite at the ledger's defaults; PostgreSQL a "
        f"throwaway server, fsync and synchronous_commit on. {plan.reps} rounds with the default "
        f"partial flush and {plan.reps} with none in a turn, interleaved, the figures pooled. "
        f"Cancels: {plan.reps} rounds of one turn in which {plan.cancels} conversations call "
        f"`aclose()` after {CANCEL_AFTER} deltas of the answer; the time `aclose()` takes (it "
        "returns once the run is recorded as interrupted, checked in SQL).",
        rows,
        [*measured.skipped, f"Measuring took (both sections): {took}."],
        details,
    )
    return [
        streaming,
        Section(
            "14. Async against sync: one turn after another",
            f"The same turn, not streamed, the model without delay, {plan.sequential_turns} turns "
            "one after another, a new conversation each, on the same ledgers: through `Agent.run`, "
            "and through `await agent.arun` on one event loop (its start and end left out); "
            f"{plan.sequential_reps} interleaved repetitions, medians.",
            sequential,
            list(measured.skipped),
        ),
    ]

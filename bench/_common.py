"""What the benchmarks share: the turn they record, the agents that record it, the run's mode, the
interleaved timing loop every comparison goes through, and the throwaway PostgreSQL server.

Everything here, and in every module a worker process imports, uses only the names
``agentledger`` exports and ``agentledger.ledger``: the previous version (``--previous REF``)
runs the same code, and its private modules were laid out differently.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agentledger import Agent, AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall, Usage, tool

if TYPE_CHECKING:
    from agentledger.ledger._failures import Synchronous  # the settings Ledger.open takes

RESULT = "x" * 1024
"""Every tool result: about 1 KB."""
TOOL_NAME, ANSWER, MODEL = "lookup", "done", "scripted"
USAGE = Usage(input_tokens=100, output_tokens=20)
TOOL_STEPS = 3
"""A turn: a user message, three tool-calling steps of one ``lookup`` call each, an answer."""
STEPS_PER_TURN = TOOL_STEPS + 1
"""A turn's model calls: a step's cost is the turn's / this."""


def as_synchronous(mode: str) -> Synchronous:
    """``mode`` (a run's setting, as the sections pass it on) as ``Ledger.open`` takes it (which
    refuses any other)."""
    return cast("Synchronous", mode)


REPOSITORY = Path(__file__).resolve().parent.parent
"""The repository ``bench/`` sits in."""


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return RESULT


def call_id(step: int, position: int) -> str:
    return f"c{step}-{position}"


def call_arguments(step: int, position: int) -> dict[str, str]:
    return {"key": f"{step}-{position}"}


def database(tmp: Path, *words: object) -> Path:
    """A database file in ``tmp`` named for ``words`` (lower case: letters, digits and dots)."""
    return tmp / ("-".join(re.findall(r"[\w.]+", " ".join(map(str, words)).lower())) + ".db")


def question(turn: int) -> str:
    return f"question {turn}"


def script(
    tool_steps: int, calls: int, *, said: str = "", answer: str = ANSWER
) -> list[InferenceResponse]:
    """One run: ``tool_steps`` steps each calling ``lookup`` ``calls`` times (saying ``said``),
    then ``answer``."""
    asked = [
        [
            ToolCall(id=call_id(s, p), name=TOOL_NAME, arguments=call_arguments(s, p))
            for p in range(calls)
        ]
        for s in range(tool_steps)
    ]
    steps = [InferenceResponse(content=said, tool_calls=c, usage=USAGE) for c in asked]
    return [*steps, InferenceResponse(content=answer, usage=USAGE)]


def builder(llm: Any, recorder: Any = None) -> AgentBuilder:
    """An agent on ``llm`` with ``lookup``, recording in ``recorder`` (a ledger or any recorder;
    in memory when None)."""
    agent = AgentBuilder().with_llm(llm).with_tools([lookup])
    return agent if recorder is None else agent.with_ledger(recorder)


def turn_agent(recorder: Any = None) -> Agent:
    """The agent of one turn: a fresh script, the builder's defaults otherwise."""
    return builder(ScriptedLLM(script(TOOL_STEPS, 1)), recorder).build()


@dataclass(frozen=True)
class Sizes:
    """The run's mode (``quick``, ``default``, ``full``): each section picks its plan by name."""

    name: str


QUICK, DEFAULT, FULL = Sizes("quick"), Sizes("default"), Sizes("full")


@dataclass
class Samples:
    """Times in seconds, per system, from interleaved repetitions."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    def ratio(self, top: str, bottom: str) -> float:
        return self.median(top) / self.median(bottom)

    def paired(self, top: str, bottom: str) -> str:
        """The ratio of the medians [the interquartile range of the per-repetition ratios]."""
        pairs = [a / b for a, b in zip(self.times[top], self.times[bottom], strict=True)]
        q1, _, q3 = statistics.quantiles(pairs, n=4, method="inclusive")
        return f"{self.ratio(top, bottom):.2f}x [{q1:.2f}–{q3:.2f}]"


def interleaved(
    systems: Mapping[str, Callable[[], float]],
    reps: int,
    warm_up: int = 0,
    *,
    shuffled: bool = False,
) -> Samples:
    """Each system once per repetition, the order rotating, so drift in the machine's load
    (and any first-or-last position effect) hits every system alike, after ``warm_up`` untimed
    rounds (caches, first pages). ``shuffled``: a random order each time instead (a rotation of
    three or more keeps each behind the same neighbour, whose warm caches it inherits). Each
    callable does its own set-up and returns only the time of the work measured."""
    names, shuffle = list(systems), random.Random(20260521).shuffle
    samples = Samples({name: [] for name in names})
    for rep in range(-warm_up, reps):
        shift = rep % len(names)
        if shuffled:
            shuffle(names)
        for name in names if shuffled else names[shift:] + names[:shift]:
            seconds = systems[name]()
            if rep >= 0:
                samples.times[name].append(seconds)
    return samples


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def timing(function: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
    """``function``, each call's seconds appended to ``into``."""

    def timed_call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - started)

    return timed_call


class TimedRecorder:
    """A recorder forwarding every call to ``inner``, timing those named, into :attr:`times`."""

    def __init__(self, inner: Any, *names: str) -> None:
        self.inner = inner
        self.times: dict[str, list[float]] = {name: [] for name in names}

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        return timing(found, self.times[name]) if name in self.times else found


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank: the value 99% of the samples are at or under."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def x(ratio: float) -> str:
    return f"{ratio:.2f}x"


DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
"""A durable PostgreSQL server, as in production (the test harness's default is not)."""


@contextlib.contextmanager
def postgres(
    skipped: list[str], *, wanted: bool = True, **settings: str
) -> Iterator[Callable[[], str] | None]:
    """A throwaway durable PostgreSQL server (``tests/support/postgres.py``, loaded by its path)
    with ``settings``, stopped and removed afterwards: a function making a new database on it,
    its URL. None, the reason added to ``skipped``, when not ``wanted`` or none can start."""
    path, server, why = REPOSITORY / "tests" / "support" / "postgres.py", None, ""
    if not wanted:
        why = "not measured in this run"
    elif not path.is_file():
        why = f"skipped, no {path.relative_to(REPOSITORY)} next to bench/"
    else:
        spec = importlib.util.spec_from_file_location("bench_postgres_harness", path)
        assert spec is not None and spec.loader is not None
        harness = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(harness)
        try:
            server = harness.PostgresServer(settings=DURABLE | settings).start()
        except Exception as problem:
            why = f"{type(problem).__name__}: {' '.join(str(problem).split())[:200]}"
            why = f"skipped, no throwaway server could be started ({why})"
    if server is None:
        skipped.append(f"PostgreSQL: {why}.")
        yield None
        return
    try:
        yield lambda: str(server.create_database("agentledger_bench"))
    finally:
        server.stop()

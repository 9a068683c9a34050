"""What the benchmarks share: the turn they record, the run's mode, the interleaved timing loop
every comparison goes through, and the figures' formats.

Everything here, and in every module a worker process imports, uses only the names
``agentledger`` exports and ``agentledger.ledger``: the previous version (``--previous REF``)
runs the same code, and its private modules were laid out differently.
"""

from __future__ import annotations

import math
import operator
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentledger import Agent, AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall, Usage, tool

RESULT = "x" * 1024
"""Every tool result: about 1 KB."""
TOOL_NAME, ANSWER, MODEL = "lookup", "done", "scripted"
USAGE = Usage(input_tokens=100, output_tokens=20)
TOOL_STEPS = 3
"""A turn: a user message, three tool-calling steps of one ``lookup`` call each, an answer."""
STEPS_PER_TURN = TOOL_STEPS + 1
"""A turn's model calls: a step's cost is the turn's / this."""


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return RESULT


def call_id(step: int, position: int) -> str:
    return f"c{step}-{position}"


def call_arguments(step: int, position: int) -> dict[str, str]:
    return {"key": f"{step}-{position}"}


def question(turn: int) -> str:
    return f"question {turn}"


def script(tool_steps: int, calls_per_step: int) -> list[InferenceResponse]:
    """One run: ``tool_steps`` steps each calling ``lookup`` ``calls_per_step`` times, then
    an answer."""
    responses = [
        InferenceResponse(
            tool_calls=[
                ToolCall(id=call_id(s, p), name=TOOL_NAME, arguments=call_arguments(s, p))
                for p in range(calls_per_step)
            ],
            usage=USAGE,
        )
        for s in range(tool_steps)
    ]
    return [*responses, InferenceResponse(content=ANSWER, usage=USAGE)]


def turn_agent(recorder: Any) -> Agent:
    """The agent of one recorded turn: a fresh script, ``lookup``, the builder's defaults,
    recording in ``recorder`` (a ledger or any recorder)."""
    builder = AgentBuilder().with_llm(ScriptedLLM(script(TOOL_STEPS, 1))).with_tools([lookup])
    return builder.with_ledger(recorder).build()


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


def interleaved(systems: Mapping[str, Callable[[], float]], reps: int) -> Samples:
    """Each system once per repetition, the order rotating, so drift in the machine's load
    (and any first-or-last position effect) hits every system alike. Each callable does its
    own set-up and returns only the time of the work measured."""
    names = list(systems)
    samples = Samples({name: [] for name in names})
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            samples.times[name].append(systems[name]())
    return samples


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank: the value 99% of the samples are at or under."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


OPERATORS = {"<": operator.lt, "≤": operator.le, ">": operator.gt, "≥": operator.ge}


def judged(shown: str, value: float, target: str) -> str:
    """``shown``, and whether ``value`` meets ``target`` (``"≤ 3"``: a comparison and a bound
    in the value's unit)."""
    op, bound = target.split()
    return f"{shown}, {'met' if OPERATORS[op](value, float(bound)) else 'missed'}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def x(ratio: float) -> str:
    return f"{ratio:.2f}x"

"""What the benchmarks share: the tool, the scripted model's responses, the run sizes, and the
interleaved timing loop that every comparison goes through."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agentledger import ToolCall, Usage, tool
from agentledger.llm import InferenceResponse

RESULT = "x" * 1024
"""Every tool result: about 1 KB."""
TOOL_NAME = "lookup"
ANSWER = "done"
MODEL = "scripted"  # what ScriptedLLM reports as the model, stored on every step
USAGE = Usage(input_tokens=100, output_tokens=20)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return RESULT


def call_id(step: int, position: int) -> str:
    return f"c{step}-{position}"


def call_arguments(step: int, position: int) -> dict[str, str]:
    return {"key": f"{step}-{position}"}


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
    responses.append(InferenceResponse(content=ANSWER, usage=USAGE))
    return responses


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does; ``--quick``, the default and ``--full``."""

    name: str
    loop_turns: int
    loop_reps: int
    run_steps: int
    """Tool-calling steps per run in the per-step benchmark (the same in every mode, so its
    ratios compare across modes)."""
    step_reps: int
    history_small: int
    history_large: int
    turn_samples: int


QUICK = Sizes("quick", 20, 3, 25, 7, 50, 200, 15)
DEFAULT = Sizes("default", 100, 5, 25, 15, 50, 1000, 25)
FULL = Sizes("full", 400, 9, 25, 31, 50, 1000, 51)


@dataclass
class Samples:
    """Times in seconds, per system, from interleaved repetitions."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    def ratio(self, numerator: str, denominator: str) -> float:
        return self.median(numerator) / self.median(denominator)


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


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"

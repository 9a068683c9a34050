"""Async and streaming: many conversations in one process, cancels, ``arun`` against ``run``.

Section 13: ``conversations`` conversations at once on one event loop, in one process, on one
ledger (a SQLite file; then a throwaway PostgreSQL server when one can be started), each an
agent of its own consuming ``agent.astream(...)`` for ``turns`` turns. The model is
``ScriptedLLM`` streaming at about 50 tokens a second (deltas of 4 characters, 0.02 s apart);
a turn is 3 tool-calling steps (a short sentence, then one call of a trivial tool) and an
answer of 236 characters. Measured:

- turns per second (the turns done / the round's wall time);
- the event loop's lateness: a ticker task on the same loop sleeps 10 ms at a time, and each
  wake's lateness is its actual time less the time it was due;
- a step's end to its ``StepRecorded``: the step's end is the last ``TextDelta`` or
  ``ToolCallFinished`` of that step handed to the consumer (what a user saw last of it), and
  ``StepRecorded`` is emitted once the step's transaction committed;
- what the durability flushes cost: the same rounds with the default partial flush (0.5 s or
  2000 characters) and with one that never happens within a turn
  (``with_partial_flush(seconds=3600, characters=10**9)``), interleaved: the ratio of the
  median turn times, and the flush writes counted at the database driver's cursor
  (``before_cursor_execute``: an UPDATE of ``agent_runs`` setting exactly its partial-output
  columns);
- cancel to committed: in a round of one turn per conversation, ``cancels`` of the
  conversations call ``aclose()`` after reading 20 deltas of the answer (all within a few
  milliseconds of each other); the time ``aclose()`` takes, which returns once the run is
  recorded as interrupted (checked afterwards in SQL: the runs ``interrupted``, their answers
  flagged so).

Section 14: the same turn, not streamed, the scripted model without delay, one turn after
another, a new conversation each, through ``Agent.run`` and through ``await agent.arun`` on
one event loop, interleaved repetitions: the time per turn and the ratio async / sync.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentledger.ledger import Ledger

from ._common import Samples, Sizes, interleaved, ms
from ._report import Row, Section
from ._statement_runs import POSTGRES_SETTINGS
from ._streaming_runs import (
    CANCEL_AFTER,
    Observed,
    async_turns,
    concurrent_round,
    sync_turns,
)
from .statements import throwaway_postgres

TARGET_LATENESS = 0.020  # p99 of the event loop's lateness, seconds
TARGET_CANCEL = 0.200  # p99 of cancel to committed, seconds
TARGET_ASYNC = 1.2  # await agent.arun / Agent.run, per turn
DEFAULT = "default flush"
RARE = "no flush in a turn"


@dataclass(frozen=True)
class Plan:
    conversations: int
    turns: int
    """Turns each conversation takes in a round."""
    reps: int
    """Rounds of each flush setting (interleaved), and cancel rounds."""
    cancels: int
    sequential_turns: int
    sequential_reps: int


PLANS = {
    "quick": Plan(20, 1, 1, 5, 20, 3),
    "default": Plan(200, 2, 2, 50, 50, 5),
    "full": Plan(200, 3, 3, 50, 100, 9),
}


@dataclass
class Figures:
    """One backend's rounds."""

    rounds: dict[str, list[Observed]] = field(default_factory=lambda: {DEFAULT: [], RARE: []})
    cancel_rounds: list[Observed] = field(default_factory=list)
    sequential: Samples | None = None

    def pooled(self, variant: str, what: str) -> list[float]:
        return [x for observed in self.rounds[variant] for x in getattr(observed, what)]

    def turns_per_second(self, variant: str) -> float:
        return statistics.median(o.turns_done / o.wall for o in self.rounds[variant])

    def flushes_per_turn(self, variant: str) -> float:
        rounds = self.rounds[variant]
        return sum(o.flushes for o in rounds) / sum(o.turns_done for o in rounds)

    def turn_ratio(self) -> float:
        default = statistics.median(self.pooled(DEFAULT, "turn_times"))
        return default / statistics.median(self.pooled(RARE, "turn_times"))

    @property
    def cancels(self) -> list[float]:
        return [x for observed in self.cancel_rounds for x in observed.cancels]


@dataclass
class Measured:
    plan: Plan
    backends: dict[str, Figures] = field(default_factory=dict)
    """By backend title."""
    took: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank: the value 99% of the samples are at or under."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


# --- measuring -----------------------------------------------------------------------------------


def _check(observed: Observed, *, cancels: int = 0) -> None:
    """The round did what it should: every turn completed, every cancelled run committed as
    interrupted with its answer flagged."""
    completed = (observed.conversations - cancels) * observed.turns
    expected = {"completed": completed, "interrupted": cancels}
    if observed.statuses != {k: v for k, v in expected.items() if v}:
        raise RuntimeError(f"the round's runs ended {observed.statuses}, expected {expected}")
    if observed.interrupted_answers != cancels:
        raise RuntimeError(
            f"{observed.interrupted_answers} interrupted answers committed, expected {cancels}"
        )


def measure_backend(ledger: Ledger, plan: Plan) -> Figures:
    figures = Figures()
    for rep in range(plan.reps):
        order = [DEFAULT, RARE] if rep % 2 == 0 else [RARE, DEFAULT]
        for variant in order:
            observed = concurrent_round(
                ledger, plan.conversations, plan.turns, rare_flush=variant == RARE
            )
            _check(observed)
            figures.rounds[variant].append(observed)
        observed = concurrent_round(ledger, plan.conversations, 1, cancels=plan.cancels)
        _check(observed, cancels=plan.cancels)
        figures.cancel_rounds.append(observed)
    if figures.flushes_per_turn(RARE):
        raise RuntimeError("a partial-output flush was written with a flush interval of an hour")
    turns = plan.sequential_turns
    figures.sequential = interleaved(
        {
            "Agent.run": lambda: sync_turns(ledger, turns) / turns,
            "await agent.arun": lambda: async_turns(ledger, turns) / turns,
        },
        plan.sequential_reps,
    )
    return figures


@contextlib.contextmanager
def backends(tmp: Path, skipped: list[str], *, postgres: bool) -> Iterator[dict[str, str]]:
    """Backend titles and URLs: a SQLite file, and a database on a throwaway PostgreSQL server
    (stopped afterwards) when one can be started."""
    found = {"SQLite": f"sqlite:///{tmp / 'streaming.db'}"}
    if not postgres:
        skipped.append("PostgreSQL: not measured in this run.")
        yield found
        return
    with throwaway_postgres(POSTGRES_SETTINGS, skipped) as server:
        if server is not None:
            found["PostgreSQL"] = server.create_database("agentledger_bench")
        yield found


def measure(plan: Plan, tmp: Path, *, postgres: bool = True) -> Measured:
    measured = Measured(plan)
    with backends(tmp, measured.skipped, postgres=postgres) as found:
        for title, url in found.items():
            print(f"  {title} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            with Ledger.open(url) as ledger:
                measured.backends[title] = measure_backend(ledger, plan)
            measured.took[title] = time.perf_counter() - started
    return measured


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("async and streaming, many conversations ...", file=sys.stderr, flush=True)
    return report(measure(PLANS[sizes.name], tmp))


# --- the report ----------------------------------------------------------------------------------


def _verdict(what: str, value: str, met: bool, target: str) -> str:
    if met:
        return f"Target met: {what} is {value}, {target}."
    return f"Target missed: {what} is {value}, not {target}."


def _streaming_rows(title: str, figures: Figures) -> list[Row]:
    lateness = p99(figures.pooled(DEFAULT, "lateness"))
    lags = figures.pooled(DEFAULT, "step_lags")
    return [
        Row(f"{title}: turns per second", f"{figures.turns_per_second(DEFAULT):,.1f}"),
        Row(
            f"{title}: event loop lateness, p99 (target < {TARGET_LATENESS * 1e3:.0f} ms)",
            ms(lateness),
            headline=True,
        ),
        Row(f"{title}: a step's end → its StepRecorded, median", ms(statistics.median(lags))),
        Row(f"{title}: a step's end → its StepRecorded, p99", ms(p99(lags)), headline=True),
        Row(f"{title}: flush writes per turn", f"{figures.flushes_per_turn(DEFAULT):.2f}"),
        Row(
            f"{title}: turn time, default flush / no flush in a turn",
            "",
            f"{figures.turn_ratio():.2f}x",
            headline=True,
        ),
        Row(
            f"{title}: cancel → committed interrupted, p99 (target < {TARGET_CANCEL * 1e3:.0f} ms)",
            ms(p99(figures.cancels)),
            headline=True,
        ),
    ]


def _streaming_table(title: str, figures: Figures) -> list[str]:
    lines = [
        f"### {title}",
        "",
        "| flush | turns/s | turn, median | turn, p99 | loop lateness, median | "
        "loop lateness, p99 | step's end → StepRecorded, median | p99 | flush writes per turn |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in (DEFAULT, RARE):
        turns = figures.pooled(variant, "turn_times")
        late = figures.pooled(variant, "lateness")
        lags = figures.pooled(variant, "step_lags")
        lines.append(
            f"| {variant} | {figures.turns_per_second(variant):,.1f} | "
            f"{ms(statistics.median(turns))} | {ms(p99(turns))} | {ms(statistics.median(late))} "
            f"| {ms(p99(late))} | {ms(statistics.median(lags))} | {ms(p99(lags))} | "
            f"{figures.flushes_per_turn(variant):.2f} |"
        )
    cancels = figures.cancels
    late = [x for o in figures.cancel_rounds for x in o.lateness]
    lines += [
        "",
        f"Cancel rounds: {len(cancels)} cancels in all; cancel → committed median "
        f"{ms(statistics.median(cancels))}, p99 {ms(p99(cancels))}, max {ms(max(cancels))}; "
        f"loop lateness p99 during them {ms(p99(late))}.",
    ]
    return lines


def _streaming_notes(measured: Measured) -> list[str]:
    notes = list(measured.skipped)
    for title, figures in measured.backends.items():
        lateness = p99(figures.pooled(DEFAULT, "lateness"))
        cancel = p99(figures.cancels)
        notes.append(
            _verdict(
                f"{title}: the event loop's lateness, p99, default flush",
                ms(lateness),
                lateness < TARGET_LATENESS,
                f"< {TARGET_LATENESS * 1e3:.0f} ms",
            )
        )
        notes.append(
            _verdict(
                f"{title}: cancel → committed interrupted, p99",
                ms(cancel),
                cancel < TARGET_CANCEL,
                f"< {TARGET_CANCEL * 1e3:.0f} ms",
            )
        )
    took = ", ".join(f"{title} {seconds:.0f} s" for title, seconds in measured.took.items())
    notes.append(f"Measuring took (both sections): {took}.")
    return notes


def _sequential_rows(title: str, samples: Samples) -> list[Row]:
    ratio = samples.ratio("await agent.arun", "Agent.run")
    return [
        Row(f"{title}: Agent.run, per turn", ms(samples.median("Agent.run"))),
        Row(f"{title}: await agent.arun, per turn", ms(samples.median("await agent.arun"))),
        Row(
            f"{title}: arun / run, per turn (target ≤ {TARGET_ASYNC}x)",
            "",
            f"{ratio:.2f}x",
            headline=True,
        ),
    ]


def report(measured: Measured) -> list[Section]:
    plan = measured.plan
    streaming_rows: list[Row] = []
    details: list[str] = []
    sequential_rows: list[Row] = []
    sequential_notes: list[str] = []
    for title, figures in measured.backends.items():
        streaming_rows += _streaming_rows(title, figures)
        details += _streaming_table(title, figures)
        assert figures.sequential is not None
        sequential_rows += _sequential_rows(title, figures.sequential)
        ratio = figures.sequential.ratio("await agent.arun", "Agent.run")
        sequential_notes.append(
            _verdict(
                f"{title}: await agent.arun / Agent.run, per turn",
                f"{ratio:.2f}x",
                ratio <= TARGET_ASYNC,
                f"≤ {TARGET_ASYNC}x",
            )
        )
    streaming = Section(
        title="13. Async streaming: many conversations in one process",
        about=(
            f"{plan.conversations} conversations at once on one event loop, one ledger, each "
            f"an agent of its own consuming `agent.astream(...)`, {plan.turns} turns each; "
            "`ScriptedLLM` streaming at about 50 tokens a second (deltas of 4 characters, "
            "0.02 s apart); a turn is 3 tool-calling steps (a 29-character sentence, then one "
            "call of a trivial tool) and a 236-character answer. SQLite: a file at the "
            "ledger's defaults (WAL, synchronous=FULL); PostgreSQL: a throwaway server with "
            "fsync and synchronous_commit on. "
            f"{plan.reps} rounds with the default partial flush (0.5 s or 2000 characters) and "
            f"{plan.reps} with `with_partial_flush(seconds=3600, characters=10**9)` (no flush "
            "within a turn), interleaved; the figures pool the rounds. Loop lateness: a task "
            "on the same loop sleeps 10 ms at a time; lateness = actual wake − due wake. A "
            "step's end: the last `TextDelta` or `ToolCallFinished` of the step handed to the "
            "consumer; to its `StepRecorded`, emitted once the step's transaction committed. "
            "Flush writes: counted at the driver's cursor. Cancels: "
            f"{plan.reps} rounds of one turn per conversation in which {plan.cancels} "
            f"conversations call `aclose()` after {CANCEL_AFTER} deltas of the answer; "
            "the time `aclose()` takes, which returns once the run is recorded as "
            "interrupted (checked in SQL afterwards, with its answer flagged interrupted)."
        ),
        rows=streaming_rows,
        notes=_streaming_notes(measured),
        details=details,
    )
    sequential = Section(
        title="14. Async against sync: one turn after another",
        about=(
            "The same turn (3 tool-calling steps, an answer), not streamed, the scripted model "
            f"without delay, {plan.sequential_turns} turns one after another, a new "
            "conversation each, on the same ledgers as section 13: through `Agent.run`, and "
            "through `await agent.arun` on one event loop (its start and end left out); "
            f"{plan.sequential_reps} interleaved repetitions, medians."
        ),
        rows=sequential_rows,
        notes=list(measured.skipped) + sequential_notes,
    )
    return [streaming, sequential]


def main() -> None:
    """``python -m bench.streaming [--quick | --full]``: sections 13 and 14 alone, printed."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.streaming")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--full", action="store_true")
    args = parser.parse_args()
    plan = PLANS["quick" if args.quick else "full" if args.full else "default"]
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        sections = report(measure(plan, Path(tmp)))
    print("\n".join(line for section in sections for line in section.render()))


if __name__ == "__main__":
    main()

"""The ledger's cost per step, against plain ``sqlite3`` writing the same rows.

Through the library: one ``Agent.run`` with a scripted model making ``N`` tool-calling steps
of two tool calls each (~1 KB results), then an answer, on a SQLite file ledger. Every step is
one transaction: the step row, two tool rows, three execution-buffer rows (the tool-calling
message and the two results), plus the ledger's lease fence and heartbeat. The run's first
transaction (the conversation, the run, the user message) and its last (the answer, the buffer
flushed, the run closed) are in the time too, spread over the ``N`` steps.

Against :class:`bench._raw.RawLedger` writing the same rows in the same transactions, with
``synchronous=FULL`` and ``NORMAL``, and the same agent with no ledger (its in-memory
recorder), which tells the agent loop's part of the library's time from the ledger's.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from agentledger import AgentBuilder, ExecutionBudget
from agentledger.ledger import Ledger
from agentledger.ledger.schema import ddl
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM

from ._common import Samples, Sizes, interleaved, lookup, script, timed, us
from ._raw import RawLedger, check_same_rows
from ._report import Row, Section

CALLS_PER_STEP = 2
Mode = Literal["FULL", "NORMAL"]
MODES: tuple[Mode, ...] = ("FULL", "NORMAL")
LIBRARY, RAW, RAW_LEASES, IN_MEMORY = "agentledger", "raw", "raw + leases", "in-memory agent"


def _name(system: str, mode: Mode) -> str:
    return f"{system} {mode}"


def _library_run(ledger: Ledger | None, steps: int) -> Callable[[], float]:
    def run() -> float:
        builder = AgentBuilder().with_llm(ScriptedLLM(script(steps, CALLS_PER_STEP)))
        builder = builder.with_tools([lookup]).with_max_steps(None)
        agent = (builder.with_ledger(ledger) if ledger is not None else builder).build()
        return timed(lambda: agent.run("go"))

    return run


def _raw_run(raw: RawLedger, steps: int) -> Callable[[], float]:
    return lambda: timed(
        lambda: raw.run("go", None, tool_steps=steps, calls_per_step=CALLS_PER_STEP)
    )


LONG_RUN = 200
"""Tool-calling steps of the run whose steps are timed one by one."""
TENTH, LAST = slice(5, 15), slice(LONG_RUN - 10, LONG_RUN)
"""The steps compared: around the tenth, and the last ten."""
LIMITS = ExecutionBudget(max_tokens=10**12, max_cost_usd=1e9)
"""Limits never reached, so that ``token_limit`` and ``cost_limit`` are judged at every step."""


class _Clocked(ScriptedLLM):
    """A scripted model that notes when each step asks it: one step's time is the time
    between two requests (its tools, its record and the next step's begin included)."""

    def __init__(self, items: list[InferenceResponse]) -> None:
        super().__init__(items)
        self.asked: list[float] = []

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        self.asked.append(time.perf_counter())
        return super().complete(request)


def step_times(ledger: Ledger | None) -> list[float]:
    """Each step's time along one run of :data:`LONG_RUN` tool-calling steps with limits."""
    llm = _Clocked(script(LONG_RUN, CALLS_PER_STEP))
    builder = AgentBuilder().with_llm(llm).with_tools([lookup]).with_max_steps(None)
    builder = builder.with_budget(LIMITS)
    (builder.with_ledger(ledger) if ledger is not None else builder).build().run("go")
    return [later - earlier for earlier, later in zip(llm.asked, llm.asked[1:], strict=False)]


def long_run_rows(sizes: Sizes, tmp: Path) -> list[Row]:
    """A step around the tenth against the last steps of a 200-step run, in memory and on a
    SQLite ledger (NORMAL): flat means the run's length costs nothing per step."""
    rows: list[Row] = []
    with Ledger.open(tmp / "long-run.db", synchronous="NORMAL") as ledger:
        for name, target in (("in memory", None), ("on a SQLite ledger", ledger)):
            runs = [step_times(target) for _ in range(max(3, sizes.step_reps // 3))]
            tenth = statistics.median(t for times in runs for t in times[TENTH])
            last = statistics.median(t for times in runs for t in times[LAST])
            rows += [
                Row(f"{LONG_RUN}-step run {name}: a step around the tenth", us(tenth)),
                Row(f"{LONG_RUN}-step run {name}: one of the last ten steps", us(last)),
                Row(
                    f"{LONG_RUN}-step run {name}: last / tenth (target ≤ 1.2x)",
                    "",
                    f"{last / tenth:.2f}x",
                    headline=True,
                ),
            ]
    return rows


def measure(sizes: Sizes, tmp: Path) -> Samples:
    steps, schema = sizes.run_steps, ddl("sqlite")
    systems: dict[str, Callable[[], float]] = {}
    paths: dict[str, Path] = {}
    with ExitStack() as stack:
        for mode in MODES:
            paths[_name(LIBRARY, mode)] = path = tmp / f"steps-library-{mode}.db"
            ledger = stack.enter_context(Ledger.open(path, synchronous=mode))
            systems[_name(LIBRARY, mode)] = _library_run(ledger, steps)
            for system, leases in ((RAW, False), (RAW_LEASES, True)):
                tag = "raw-leases" if leases else "raw"
                paths[_name(system, mode)] = path = tmp / f"steps-{tag}-{mode}.db"
                raw = RawLedger(path, schema, mode, leases=leases)
                stack.callback(raw.close)
                systems[_name(system, mode)] = _raw_run(raw, steps)
        systems[IN_MEMORY] = _library_run(None, steps)
        for run in systems.values():  # warm-up: statement caches, imports, first pages
            run()
        samples = interleaved(systems, sizes.step_reps)
    for mode in MODES:
        for system in (RAW, RAW_LEASES):
            check_same_rows(paths[_name(LIBRARY, mode)], paths[_name(system, mode)])
    return samples


def run(sizes: Sizes, tmp: Path) -> Section:
    print(f"per-step cost: {sizes.step_reps} repetitions ...", file=sys.stderr, flush=True)
    samples = measure(sizes, tmp)
    steps = sizes.run_steps

    def per_step(name: str) -> float:
        return samples.median(name) / steps

    rows: list[Row] = []
    in_memory = per_step(IN_MEMORY)
    for mode in MODES:
        library, raw = per_step(_name(LIBRARY, mode)), per_step(_name(RAW, mode))
        leases = per_step(_name(RAW_LEASES, mode))
        rows += [
            Row(f"{mode}: agentledger (`Agent.run` on a ledger), per step", us(library)),
            Row(f"{mode}: raw sqlite3, same rows, per step", us(raw)),
            Row(f"{mode}: raw sqlite3 + the ledger's lease and heartbeat UPDATEs", us(leases)),
            Row(f"{mode}: agentledger / raw, per step", "", f"{library / raw:.2f}x", headline=True),
            Row(f"{mode}: agentledger / raw with the same UPDATEs", "", f"{library / leases:.2f}x"),
            Row(
                f"{mode}: ledger's own part (agentledger − in-memory agent) / raw",
                us(library - in_memory),
                f"{(library - in_memory) / raw:.2f}x",
            ),
        ]
    full, normal = per_step(_name(LIBRARY, "FULL")), per_step(_name(LIBRARY, "NORMAL"))
    rows += [
        Row("the same agent, no ledger (in-memory recorder), per step", us(in_memory)),
        Row("agentledger FULL / NORMAL", "", f"{full / normal:.2f}x"),
        Row(
            "raw FULL / NORMAL",
            "",
            f"{per_step(_name(RAW, 'FULL')) / per_step(_name(RAW, 'NORMAL')):.2f}x",
        ),
        *long_run_rows(sizes, tmp),
    ]
    return Section(
        title="2. The ledger's cost per step",
        about=(
            f"One `Agent.run` of {steps} tool-calling steps (2 tool calls each, ~1 KB results) "
            f"and an answer, on a SQLite file ledger (WAL), per tool-calling step (the run's "
            f"time / {steps}: its begin and commit transactions are included); "
            f"{sizes.step_reps} interleaved repetitions, a fresh conversation each. Raw: plain "
            "`sqlite3` on tables made from `schema.ddl('sqlite')`, the same pragmas, one "
            "`BEGIN IMMEDIATE` transaction per step, the same rows, columns and JSON payloads "
            "(checked: equal row counts and JSON lengths per table)."
        ),
        rows=rows,
        notes=[
            f"A step's cost does not grow with the run's length: the run's spend, which the "
            "limits (`token_limit`, `cost_limit`) judge at every step, is kept as the steps are "
            f"added instead of re-summed. The {LONG_RUN}-step rows time each step of one run "
            "(between two of its model calls) with both limits set, "
            f"{max(3, sizes.step_reps // 3)} runs each.",
        ],
    )

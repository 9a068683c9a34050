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

import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from agentledger import AgentBuilder
from agentledger.ledger import Ledger
from agentledger.ledger.schema import ddl
from agentledger.llm import ScriptedLLM

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
            f"{steps} steps in every mode, because a step's cost grows with the run's length: "
            "the continuation criteria (`token_limit`, `cost_limit`) re-sum the usage of all "
            "the run's steps at every step, so the agent loop is O(N) per step.",
        ],
    )

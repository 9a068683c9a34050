"""This version against the previous version (``--previous REF``), in one run, interleaved:
recording a turn, loading a conversation back, and the rows two reads return.

Each version runs in worker processes of its own: a fresh interpreter whose ``PYTHONPATH``
puts that version's ``src/`` first (the previous one exported from git into the run's
temporary directory; ``bench/_versions.py``), the same virtual environment, the same benchmark
code (``bench/_turns.py`` and ``bench/_reads.py`` work against both), each worker checked to
have imported its own version. Both versions' workers are started the same way, so neither
gains from a fork server's warm imports.

- Recording: one turn (as in section 6: a user message, 3 tool-calling steps, an answer) at
  each history length, through ``Agent.run`` and through the Recorder API alone, at
  ``synchronous=NORMAL`` and ``FULL``: one worker per version, way, setting and history length,
  each with its own database, the histories built in parallel (untimed), then one timed turn of
  each worker in turn, the order rotating. A second worker of this version (``Agent.run``,
  ``NORMAL``, the shortest history) is the control: this version against itself shows what
  the noise alone does to a ratio.
- Loading: the conversation of each version's ``Agent.run NORMAL`` worker at the longest
  history, loaded cold (a fresh handle each time) and warm (the same handle), each way and
  version in a worker of its own, interleaved.
- Reads: a ledger of run trees per version (``bench/_reads.py``), ``Ledger.runs()`` over all
  its runs and ``Ledger.run_tree()`` of one tree, interleaved.

The versions' databases differ (each version's own schema), so rows are compared by count:
the same messages, runs, steps and tool executions on both sides.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ._common import Samples, Sizes, interleaved, ms, us
from ._raw import row_profile
from ._reads import Reads, tree_size
from ._report import Row, Section
from ._turns import MESSAGES_PER_TURN, STEPS_PER_TURN, Loads, Turns
from ._versions import PREVIOUS, THIS, Version, this_version
from ._workers import Worker, broadcast, gather

WAYS = {"Agent.run": "agent", "recorder alone": "recorder"}
MODES = ("NORMAL", "FULL")
CONTROL = f"{THIS} (control)"
COLD, WARM = "cold", "warm"
TARGET = 1.10
"""No slowdown beyond noise: this version / the previous one at most this (a turn, a load)."""


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    trees: int
    fanout: tuple[int, ...]
    read_reps: int
    modes: tuple[str, ...] = MODES


PLANS = {
    "quick": Plan((50, 200), reps=15, trees=2, fanout=(6, 5, 4), read_reps=15, modes=("NORMAL",)),
    "default": Plan((50, 200, 1000), reps=41, trees=4, fanout=(10, 7, 6), read_reps=41),
    "full": Plan((50, 200, 1000), reps=81, trees=4, fanout=(10, 7, 6), read_reps=81),
}


@dataclass(frozen=True)
class System:
    """One way of recording at one ``synchronous`` setting, in one version."""

    version: str
    way: str
    mode: str

    @property
    def name(self) -> str:
        return f"{self.version}: {self.way} {self.mode}"


def key(system: System, turns: int) -> str:
    return f"{system.name} @ {turns}"


def systems(plan: Plan) -> list[System]:
    return [
        System(version, way, mode)
        for mode in plan.modes
        for way in WAYS
        for version in (THIS, PREVIOUS)
    ]


@dataclass
class Measured:
    plan: Plan
    versions: dict[str, Version]
    turns: Samples
    """Seconds per turn, by :func:`key` (and the control's, by ``CONTROL``)."""
    loads: Samples = field(default_factory=Samples)
    """Seconds per load, by ``"<version> <cold|warm>"``."""
    loaded_messages: int = 0
    reads: Samples = field(default_factory=Samples)
    """Seconds per read, by ``"<version> runs()"`` and ``"<version> run_tree()"``."""
    shapes: dict[str, dict[str, object]] = field(default_factory=dict)
    build_seconds: dict[str, float] = field(default_factory=dict)


def measure(plan: Plan, tmp: Path, previous: Version) -> Measured:
    versions = {THIS: this_version(), PREVIOUS: previous}
    with ExitStack() as stack:
        print("  starting the workers of both versions ...", file=sys.stderr, flush=True)
        turns, reads = _start(plan, tmp, versions, stack)
        _check_sources({**turns, **reads}, versions)
        print("  building the histories and the run trees in parallel ...", file=sys.stderr)
        built = _build(plan, turns, reads)
        _check_rows(plan, tmp, extra=0)
        print(f"  {plan.reps} timed turns on each ...", file=sys.stderr, flush=True)
        samples = interleaved(_callers(turns, "turn"), plan.reps)
        _check_rows(plan, tmp, extra=plan.reps)
        measured = Measured(plan, versions, samples, build_seconds=built)
        for worker in turns.values():
            worker.close()  # their memory back before the loads and reads
        _measure_loads(measured, tmp, stack)
        _measure_reads(measured, reads)
    return measured


def _path(tmp: Path, name: str) -> Path:
    slug = "-".join(name.lower().replace(":", " ").replace(".", " ").replace("@", " ").split())
    return tmp / f"versions-{slug}.db"


def _start(
    plan: Plan, tmp: Path, versions: dict[str, Version], stack: ExitStack
) -> tuple[dict[str, Worker], dict[str, Worker]]:
    turns: dict[str, Worker] = {}
    for count in sorted(plan.histories, reverse=True):  # the longest take longest to build
        for system in systems(plan):
            name = key(system, count)
            turns[name] = Worker(
                name,
                Turns,
                source=versions[system.version].source,
                path=str(_path(tmp, name)),
                kind=WAYS[system.way],
                synchronous=system.mode,
            )
    turns[CONTROL] = Worker(
        CONTROL,
        Turns,
        source=versions[THIS].source,
        path=str(_path(tmp, CONTROL)),
        kind="agent",
        synchronous="NORMAL",
    )
    reads = {
        label: Worker(
            f"{label} reads", Reads, source=version.source, path=str(_path(tmp, f"{label} reads"))
        )
        for label, version in versions.items()
    }
    for worker in [*turns.values(), *reads.values()]:
        stack.callback(worker.close)
    return turns, reads


def _version_of(name: str) -> str:
    return PREVIOUS if name.startswith(PREVIOUS) else THIS


def _check_sources(workers: dict[str, Worker], versions: dict[str, Version]) -> None:
    """Every worker imported its own version's agentledger."""
    for name, worker in workers.items():
        where = Path(worker.agentledger_file()).resolve()
        source = versions[_version_of(name)].source.resolve()
        if not where.is_relative_to(source):
            raise AssertionError(f"{name}: agentledger came from {where}, not from {source}")


def _build(plan: Plan, turns: dict[str, Worker], reads: dict[str, Worker]) -> dict[str, float]:
    """Every history and both ledgers of run trees, at once (untimed)."""
    for name, worker in turns.items():
        worker.send("grow", plan.histories[0] if name == CONTROL else _turns_of(name))
    for worker in reads.values():
        worker.send("build", plan.trees, plan.fanout)
    started = time.perf_counter()

    def arrived(name: str, seconds: float) -> None:
        print(
            f"    {name} built in {seconds:.1f} s ({time.perf_counter() - started:.0f} s since "
            "the start)",
            file=sys.stderr,
            flush=True,
        )

    built = {k: float(v) for k, v in gather({**turns, **reads}, arrived).items()}
    os.sync()  # the histories' dirty pages go to disk now, not during the timed turns
    return built


def _turns_of(name: str) -> int:
    return int(name.rsplit(" @ ", 1)[1])


COUNTED = ("agent_runs", "conversation_messages", "step_executions", "tool_executions")


def _check_rows(plan: Plan, tmp: Path, *, extra: int) -> None:
    """Both versions hold the same runs, messages, steps and tool executions, every way, every
    setting, every history length (their schemas differ: counts, not bytes)."""
    for count in plan.histories:
        for mode in plan.modes:
            for way in WAYS:
                found = {
                    version: _counts(_path(tmp, key(System(version, way, mode), count)))
                    for version in (THIS, PREVIOUS)
                }
                if found[THIS] != found[PREVIOUS]:
                    raise AssertionError(f"{way} {mode} @ {count}: the versions differ: {found}")
                messages = found[THIS]["conversation_messages"]
                if messages != MESSAGES_PER_TURN * (count + extra):
                    raise AssertionError(f"{way} {mode} @ {count}: {messages} messages")


def _counts(path: Path) -> dict[str, int]:
    profile = row_profile(path)
    return {table: int(profile[table][0]) for table in COUNTED}


def _callers(workers: dict[str, Worker], command: str) -> dict[str, Callable[[], float]]:
    return {name: _caller(worker, command) for name, worker in workers.items()}


def _caller(worker: Worker, command: str) -> Callable[[], float]:
    return lambda: float(worker.call(command))


def _measure_loads(measured: Measured, tmp: Path, stack: ExitStack) -> None:
    plan = measured.plan
    print(f"  loading the conversations, {plan.reps} times each ...", file=sys.stderr)
    loaders: dict[str, Worker] = {}
    for label, version in measured.versions.items():
        path = _path(tmp, key(System(label, "Agent.run", MODES[0]), plan.histories[-1]))
        conversation_id = _conversation_id(path)
        for kind in (COLD, WARM):
            name = f"{label} {kind}"
            loaders[name] = Worker(
                name,
                Loads,
                source=version.source,
                path=str(path),
                conversation_id=conversation_id,
                kind=kind,
            )
            stack.callback(loaders[name].close)
    counts = {name: int(n) for name, n in broadcast(loaders, "count").items()}
    expected = MESSAGES_PER_TURN * (plan.histories[-1] + plan.reps)
    if set(counts.values()) != {expected}:
        raise AssertionError(f"the loads read {counts} messages, not {expected} each")
    measured.loaded_messages = expected
    measured.loads = interleaved(_callers(loaders, "load"), plan.reps)


def _conversation_id(path: Path) -> str:
    """The one conversation of a worker's database."""
    conn = sqlite3.connect(path)
    try:
        (found,) = conn.execute("SELECT id FROM conversations").fetchall()
    finally:
        conn.close()
    return str(found[0])


def _measure_reads(measured: Measured, reads: dict[str, Worker]) -> None:
    plan = measured.plan
    measured.shapes = broadcast(reads, "shape")
    runs, tree = plan.trees * tree_size(plan.fanout), tree_size(plan.fanout)
    for label, shape in measured.shapes.items():
        if (shape["runs"], shape["tree"]) != (runs, tree):
            raise AssertionError(f"{label}: {shape}, not {runs} runs and a tree of {tree}")
    print(f"  reading runs and a run tree, {plan.read_reps} times each ...", file=sys.stderr)
    callers: dict[str, Callable[[], float]] = {}
    for label, worker in reads.items():
        callers[f"{label} runs()"] = _caller(worker, "runs")
        callers[f"{label} run_tree()"] = _caller(worker, "run_tree")
    measured.reads = interleaved(callers, plan.read_reps)


# -- the report ---------------------------------------------------------------------------------


def run(sizes: Sizes, tmp: Path, previous: Version | None) -> list[Section]:
    if previous is None:
        return [skipped()]
    plan = PLANS[sizes.name]
    print(f"{THIS} against {PREVIOUS} ({previous.described}) ...", file=sys.stderr, flush=True)
    return report(measure(plan, tmp, previous))


TITLE = "11. This version against the previous version: recording and loading"
READS_TITLE = "12. Rows returned by reads: this version against the previous version"


def skipped() -> Section:
    return Section(
        title=TITLE,
        about="Recording, loading and reading, this version against a previous one.",
        notes=[
            "Skipped: no previous version was given. `python -m bench --previous REF` (a git "
            "commit of this repository; `make bench BENCH_ARGS='--previous REF'`) runs it; "
            "sections 11 and 12 then compare this version with that one."
        ],
    )


def report(measured: Measured) -> list[Section]:
    return [turn_section(measured), reads_section(measured)]


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _paired(samples: Samples, top: str, bottom: str) -> list[float]:
    return [a / b for a, b in zip(samples.times[top], samples.times[bottom], strict=True)]


def _cell(samples: Samples, top: str, bottom: str) -> str:
    """The ratio of the medians, and the interquartile range of the per-repetition ratios."""
    q1, _, q3 = statistics.quantiles(_paired(samples, top, bottom), n=4, method="inclusive")
    return f"{samples.ratio(top, bottom):.2f}x [{q1:.2f}–{q3:.2f}]"


def _per_turn(seconds: float) -> str:
    return f"{ms(seconds)} a turn, {us(seconds / STEPS_PER_TURN)} a step"


def turn_section(measured: Measured) -> Section:
    plan, samples = measured.plan, measured.turns
    small, large = plan.histories[0], plan.histories[-1]
    rows: list[Row] = []
    for name, this, previous in _pairs(measured):
        way_mode, count = name.split(" @ ")
        rows += [
            Row(f"@ {count}: {this.split(' @ ')[0]}", _per_turn(samples.median(this))),
            Row(f"@ {count}: {previous.split(' @ ')[0]}", _per_turn(samples.median(previous))),
            Row(
                f"@ {count}, {way_mode}: {THIS} / {PREVIOUS}",
                "",
                _cell(samples, this, previous),
                headline=way_mode.endswith(MODES[0]) and int(count) in (small, large),
            ),
        ]
    control = key(System(THIS, "Agent.run", MODES[0]), small)
    rows.append(
        Row(
            f"control: @ {small}, Agent.run {MODES[0]}: {THIS} / {THIS} (a second worker)",
            "",
            _cell(samples, CONTROL, control),
        )
    )
    rows += _load_rows(measured)
    return Section(
        title=TITLE,
        about=(
            f"{THIS.capitalize()} (the working tree) against {PREVIOUS} "
            f"({measured.versions[PREVIOUS].described}), each in worker processes of its own "
            "(fresh interpreters, the version's `src/` first on `PYTHONPATH`, the same virtual "
            "environment; checked: each imported its own). A turn as in section 6, at "
            f"{', '.join(map(str, plan.histories))} turns of history, through `Agent.run` and "
            "through the Recorder API alone (the calls an in-memory run of the same agent made, "
            "replayed: `record_step(before, after)` in the previous version, "
            "`record_step(run_id, execution, filed)` in this one), at "
            f"{' and '.join(f'`synchronous={m}`' for m in plan.modes)}; one turn of each "
            f"worker in turn, the order rotating, {plan.reps} "
            "repetitions, medians. Ratio cells: the ratio of the medians [the interquartile "
            "range of the per-repetition ratios]. Checked before and after the timed turns: "
            "both versions hold the same number of runs, messages, steps and tool executions. "
            "Then the conversation of each version's `Agent.run NORMAL` worker at "
            f"{large} turns (+{plan.reps}: {measured.loaded_messages:,} messages), loaded cold "
            "(`load_conversation` on a fresh handle each time) and warm (the same handle), "
            f"{plan.reps} times each, interleaved, each in a worker of its own."
        ),
        rows=rows,
        notes=_turn_notes(measured),
    )


def _load_rows(measured: Measured) -> list[Row]:
    loads = measured.loads
    rows: list[Row] = []
    for kind in (COLD, WARM):
        this, previous = f"{THIS} {kind}", f"{PREVIOUS} {kind}"
        rows += [
            Row(f"{this} load_conversation", ms(loads.median(this))),
            Row(f"{previous} load_conversation", ms(loads.median(previous))),
            Row(f"{kind} load: {THIS} / {PREVIOUS}", "", _cell(loads, this, previous), True),
        ]
    return rows


def _turn_notes(measured: Measured) -> list[str]:
    samples, loads = measured.turns, measured.loads
    ratios = {name: samples.ratio(this, previous) for name, this, previous in _pairs(measured)}
    ratios.update(
        {
            f"{kind} load": loads.ratio(f"{THIS} {kind}", f"{PREVIOUS} {kind}")
            for kind in (COLD, WARM)
        }
    )
    turns = [r for name, r in ratios.items() if "@" in name]
    control = key(System(THIS, "Agent.run", MODES[0]), measured.plan.histories[0])
    twins = samples.ratio(CONTROL, control)
    q1, _, q3 = statistics.quantiles(_paired(samples, CONTROL, control), n=4, method="inclusive")
    return [
        _verdict(ratios, noise=max(twins, 1 / twins)),
        f"The turns' ratios run from {min(turns):.2f}x to {max(turns):.2f}x (geometric mean "
        f"{statistics.geometric_mean(turns):.2f}x); the loads' are {ratios['cold load']:.2f}x "
        f"cold and {ratios['warm load']:.2f}x warm.",
        "The noise: the control, a second worker of this version (the same way, setting and "
        f"history), gives {twins:.2f}x [{q1:.2f}–{q3:.2f}] against the first: two identical "
        f"systems' medians differ by a factor of {max(twins, 1 / twins):.2f} in this run. The "
        "interquartile ranges in the ratio cells are the spread of single turns.",
        _built_note(measured),
    ]


def _verdict(ratios: dict[str, float], *, noise: float) -> str:
    """Met when this version is at most :data:`TARGET` times the previous everywhere; within
    the noise when the worst case is no further off than the control's two identical workers
    are from each other."""
    worst = max(ratios, key=ratios.__getitem__)
    found = f"{ratios[worst]:.2f}x at worst ({worst})"
    if ratios[worst] <= TARGET:
        return f"Target met: no slowdown ({THIS} / {PREVIOUS} ≤ {TARGET:.2f}x everywhere): {found}."
    if ratios[worst] <= noise:
        return (
            f"Target met within the noise: {found}, over {TARGET:.2f}x but no further off than "
            f"two identical workers of this version are from each other in this run (a factor "
            f"of {noise:.2f}, the control)."
        )
    return (
        f"Target missed: {found}, over {TARGET:.2f}x and beyond the noise (the control: a "
        f"factor of {noise:.2f})."
    )


def _pairs(measured: Measured) -> list[tuple[str, str, str]]:
    """Each recording comparison: its name, this version's key, the previous version's."""
    return [
        (
            f"{way} {mode} @ {count}",
            key(System(THIS, way, mode), count),
            key(System(PREVIOUS, way, mode), count),
        )
        for count in measured.plan.histories
        for mode in measured.plan.modes
        for way in WAYS
    ]


def _built_note(measured: Measured) -> str:
    large = measured.plan.histories[-1]
    built = ", ".join(
        f"{system.name} {measured.build_seconds[key(system, large)]:.1f} s"
        for system in systems(measured.plan)
        if system.way == "Agent.run"
    )
    return f"Building the histories (untimed, all workers at once), at {large} turns: {built}."


def reads_section(measured: Measured) -> Section:
    reads, plan = measured.reads, measured.plan
    shapes = measured.shapes
    rows: list[Row] = []
    per_row: dict[str, float] = {}
    for read, count in (("runs()", shapes[THIS]["runs"]), ("run_tree()", shapes[THIS]["tree"])):
        this, previous = f"{THIS} {read}", f"{PREVIOUS} {read}"
        n = int(count)  # type: ignore[call-overload]
        extra = (reads.median(this) - reads.median(previous)) / n
        per_row[read] = extra
        rows += [
            Row(
                f"{this}: {n:,} runs",
                f"{ms(reads.median(this))}, {us(reads.median(this) / n)} a run",
            ),
            Row(
                f"{previous}: {n:,} runs",
                f"{ms(reads.median(previous))}, {us(reads.median(previous) / n)} a run",
            ),
            Row(f"{read}: {THIS} / {PREVIOUS}", "", _cell(reads, this, previous), headline=True),
            Row(f"{read}: {THIS} − {PREVIOUS}, per run", f"{extra * 1e6:+,.1f} µs"),
        ]
    return Section(
        title=READS_TITLE,
        about=(
            f"A ledger per version of {plan.trees} run trees of {tree_size(plan.fanout)} runs "
            f"({plan.trees * tree_size(plan.fanout):,} runs: the root spawns "
            f"{' × '.join(map(str, plan.fanout))} subagents down {len(plan.fanout)} levels, "
            "through `Agent.run`, a model that spawns then answers, two steps a run), in a "
            "worker of its own; `Ledger.runs()` (every run of the ledger) and "
            "`Ledger.run_tree(root)` (one whole tree, with each run's usage summed from its "
            f"steps) on an open handle, {plan.read_reps} times each, interleaved, medians. "
            f"A run is returned as {shapes[THIS]['row']} in this version and as "
            f"{shapes[PREVIOUS]['row']} in the previous one."
        ),
        rows=rows,
        notes=_reads_notes(measured, per_row),
    )


WHY_ROWS = (
    "Why (profiled when this section was written): about half of a run's cost in `runs()` is "
    "checking its row against its checksum, the same in both versions. The difference is "
    "building the object: this version makes an `AgentRun` (a SQLModel table instance) "
    "without validating it, through SQLAlchemy's `new_instance` and a Python copy of the row "
    "(`RowMapping.items()`, `metadata` renamed `metadata_`), which takes a few µs more than "
    "pydantic-core's compiled validation of the previous version's `RunRecord`."
)


def _reads_notes(measured: Measured, per_row: dict[str, float]) -> list[str]:
    reads = measured.reads
    shapes = measured.shapes
    notes = []
    for read, extra in per_row.items():
        ratio = reads.ratio(f"{THIS} {read}", f"{PREVIOUS} {read}")
        if ratio > TARGET:
            notes.append(
                f"`{read}` is slower in this version: {ratio:.2f}x, {extra * 1e6:,.1f} µs more "
                f"a run returned ({shapes[THIS]['row']} against {shapes[PREVIOUS]['row']})."
            )
            if shapes[THIS]["row"] == "AgentRun" and read == "runs()":
                notes.append(WHY_ROWS)
        else:
            notes.append(f"`{read}`: no slowdown beyond noise ({ratio:.2f}x).")
    return notes

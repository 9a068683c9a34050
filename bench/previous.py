"""Sections 11 and 12: this version against the previous one (``--previous REF``), in one run,
interleaved: recording a turn, loading a conversation back, and the rows two reads return.

Each version runs in worker processes of its own, its ``src/`` first on the path (checked), the
same benchmark code and virtual environment; what the workers run (``bench/recording.py``'s
``Turns``, :class:`Reads` here) uses only the names both versions export. A second worker of
this version, the control, shows what noise alone does to a ratio.
"""

from __future__ import annotations

import gc
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentledger import AgentBuilder, InferenceResponse, SubagentPolicy, SubagentSpec, ToolCall
from agentledger.ledger import Ledger

from ._common import ANSWER, MODEL, USAGE, Samples, Sizes, database, interleaved, ms, us, x
from ._report import Row, Section
from ._versions import PREVIOUS, THIS, Version, this_version
from ._workers import Worker, broadcast
from .recording import per_turn, timed_loads, timed_turns

WAYS = {"Agent.run": "agent", "recorder alone": "recorder"}
READS = ("runs", "run_tree")
CONTROL = f"{THIS} (control)"
TARGET = 1.10
"""No slowdown beyond noise: this version / the previous one at most this."""


class Spawner:
    """A model that spawns ``spawns`` subagents named ``subagent`` in one step, and answers
    once their results are in (at once when ``spawns`` is 0): it decides from the request
    alone, so one instance serves every run of a level."""

    def __init__(self, spawns: int, subagent: str | None) -> None:
        self.spawns, self.subagent = spawns, subagent

    def complete(self, request: Any) -> InferenceResponse:
        last = request.messages.root[-1]
        if self.spawns and getattr(last.role, "value", last.role) != "tool":
            calls = [
                ToolCall(
                    id=f"spawn-{n}",
                    name="spawn_subagent",
                    arguments={"subagent": self.subagent, "task": f"part {n}"},
                )
                for n in range(self.spawns)
            ]
            return InferenceResponse(tool_calls=calls, usage=USAGE, model=MODEL)
        return InferenceResponse(content=ANSWER, usage=USAGE, model=MODEL)


def tree_size(fanout: tuple[int, ...]) -> int:
    """The runs of one tree: 1 + f0 + f0*f1 + ..."""
    size, level = 1, 1
    for spawns in fanout:
        level *= spawns
        size += level
    return size


def _spec(fanout: tuple[int, ...], depth: int) -> SubagentSpec:
    """The subagent at ``depth`` (1: the root's children), with those below it."""
    spawns = fanout[depth] if depth < len(fanout) else 0
    return SubagentSpec(
        name=f"level{depth}",
        description=f"the subagent at depth {depth}",
        llm=Spawner(spawns, f"level{depth + 1}" if spawns else None),
        subagents=(_spec(fanout, depth + 1),) if spawns else (),
    )


class Reads:
    """One ledger of run trees (built through ``Agent.run`` with subagents), its reads timed."""

    def __init__(self, path: str) -> None:
        self.ledger = Ledger.open(Path(path), synchronous="NORMAL")
        self.roots: list[str] = []

    def build(self, trees: int, fanout: tuple[int, ...]) -> None:
        builder = AgentBuilder().with_llm(Spawner(fanout[0], "level1")).with_max_steps(None)
        policy = SubagentPolicy(max_depth=len(fanout))
        builder = builder.with_subagents([_spec(fanout, 1)], policy=policy)
        for n in range(trees):
            self.roots.append(builder.with_ledger(self.ledger).build().run(f"tree {n}").run_id)

    def shape(self) -> tuple[int, int]:
        """How many runs ``runs()`` returns, and ``run_tree()``."""
        return len(self.ledger.runs()), sum(1 for _ in self.ledger.run_tree(self.roots[0]).walk())

    def _timed(self, read: Any) -> float:
        gc.collect()
        started = time.perf_counter()
        read()
        return time.perf_counter() - started

    def runs(self) -> float:
        return self._timed(self.ledger.runs)

    def run_tree(self) -> float:
        return self._timed(lambda: self.ledger.run_tree(self.roots[0]))

    def close(self) -> None:
        self.ledger.close()


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    trees: int
    fanout: tuple[int, ...]
    modes: tuple[str, ...] = ("NORMAL", "FULL")


PLANS = {
    "quick": Plan((50, 200), reps=15, trees=2, fanout=(6, 5, 4), modes=("NORMAL",)),
    "default": Plan((50, 200, 1000), reps=41, trees=4, fanout=(10, 7, 6)),
    "full": Plan((50, 200, 1000), reps=81, trees=4, fanout=(10, 7, 6)),
}


@dataclass
class Measured:
    plan: Plan
    versions: dict[str, Version]
    turns: Samples = field(default_factory=Samples)
    """Seconds per turn, by ``"<version>: <way> <mode> @ <turns>"`` (and ``CONTROL``)."""
    loads: Samples = field(default_factory=Samples)
    """Seconds per load, by ``"<version> <cold|warm|raw>"``."""
    loaded: int = 0
    reads: Samples = field(default_factory=Samples)
    """Seconds per read, by ``"<version> runs()"`` and ``"<version> run_tree()"``."""
    shape: tuple[int, int] = (0, 0)


def key(version: str, way: str, mode: str, turns: int) -> str:
    return f"{version}: {way} {mode} @ {turns}"


def measure(plan: Plan, tmp: Path, previous: Version) -> Measured:
    measured = Measured(plan, {THIS: this_version(), PREVIOUS: previous})
    source = {v: version.source for v, version in measured.versions.items()}
    chosen = {
        key(v, way, mode, n): (source[v], kind, mode, n)
        for n in sorted(plan.histories, reverse=True)  # the longest take longest to build
        for mode in plan.modes
        for way, kind in WAYS.items()
        for v in source
    }
    chosen[CONTROL] = (source[THIS], "agent", "NORMAL", plan.histories[0])
    with ExitStack() as stack:
        reads = {}
        for v in source:
            path = str(database(tmp, "reads", v))
            reads[v] = Worker(f"{v} reads", Reads, source=source[v], path=path)
            stack.callback(reads[v].close)
            reads[v].send("build", plan.trees, plan.fanout)
        workers, measured.turns = timed_turns(stack, tmp, chosen, plan.reps, reads)
        longest = {v: key(v, "Agent.run", plan.modes[0], plan.histories[-1]) for v in source}
        loaded = {v: workers.pop(name) for v, name in longest.items()}
        for worker in workers.values():
            worker.close()  # their memory back before the loads and reads
        measured.loads, measured.loaded = timed_loads(loaded, plan.reps)
        shapes = set(broadcast(reads, "shape").values())
        measured.shape = (plan.trees * tree_size(plan.fanout), tree_size(plan.fanout))
        if shapes != {measured.shape}:
            raise AssertionError(f"the reads returned {shapes}, not {measured.shape}")
        calls = {f"{v} {r}()": w.caller(r) for v, w in reads.items() for r in READS}
        measured.reads = interleaved(calls, plan.reps)
    return measured


def run(sizes: Sizes, tmp: Path, previous: Version | None) -> list[Section]:
    if previous is None:
        return [
            Section(
                "11. This version against the previous version: recording and loading",
                "Skipped: no previous version was given. `python -m bench --previous REF` (a git "
                "commit of this repository; `make bench BENCH_ARGS='--previous REF'`) runs "
                "sections 11 and 12.",
            )
        ]
    print(f"{THIS} against {PREVIOUS} ({previous.described}) ...", file=sys.stderr, flush=True)
    measured = measure(PLANS[sizes.name], tmp, previous)
    return [turn_section(measured), reads_section(measured)]


def _versus(
    samples: Samples, what: str, names: tuple[str, str], label: Any, shown: Any, headline: bool
) -> list[Row]:
    """Each version's median (its row named by ``label``, its time shown by ``shown``), then
    this version's over the previous version's."""
    rows = [Row(label(name), shown(samples.median(name))) for name in names]
    paired = samples.paired(*names)
    return [*rows, Row(f"{what}: {THIS} / {PREVIOUS}", ratio=paired, headline=headline)]


def turn_section(measured: Measured) -> Section:
    plan, turns, loads = measured.plan, measured.turns, measured.loads
    edges, rows = (plan.histories[0], plan.histories[-1]), []
    ratios: dict[str, float] = {}
    for n in plan.histories:
        for mode in plan.modes:
            for way in WAYS:
                names = (key(THIS, way, mode, n), key(PREVIOUS, way, mode, n))
                ratios[f"{way} {mode} @ {n}"] = turns.ratio(*names)
                label = lambda name, n=n: f"@ {n}: {name.split(' @ ')[0]}"  # noqa: E731
                headline = mode == plan.modes[0] and n in edges
                rows += _versus(turns, f"@ {n}, {way} {mode}", names, label, per_turn, headline)
    control = key(THIS, "Agent.run", "NORMAL", plan.histories[0])
    rows.append(
        Row(
            f"control: @ {plan.histories[0]}, Agent.run NORMAL: {THIS} / {THIS} (a second worker)",
            ratio=turns.paired(CONTROL, control),
        )
    )
    for kind in ("cold", "warm", "raw"):
        names = (f"{THIS} {kind}", f"{PREVIOUS} {kind}")
        if kind != "raw":  # plain sqlite3 in both: a control
            ratios[f"{kind} load"] = loads.ratio(*names)
        rows += _versus(loads, f"{kind} load", names, "{} load".format, ms, kind != "raw")
    noise = turns.ratio(CONTROL, control)
    return Section(
        "11. This version against the previous version: recording and loading",
        f"{THIS.capitalize()} (the working tree) against {PREVIOUS} "
        f"({measured.versions[PREVIOUS].described}), each in worker processes of its own (the "
        "version's `src/` first on the path; checked: each imported its own). A turn as in "
        f"section 6 at {', '.join(map(str, plan.histories))} turns of history, through "
        "`Agent.run` and through the Recorder API alone (the calls an in-memory run of the same "
        f"agent made, replayed), at {' and '.join(plan.modes)}; one turn of each worker in turn, "
        f"the order rotating, {plan.reps} repetitions (checked before and after: both versions "
        "hold every message). Ratio cells: the ratio of the medians [the interquartile range of "
        f"the per-repetition ratios]. Then each version's `Agent.run {plan.modes[0]}` "
        f"conversation ({measured.loaded:,} messages) loaded cold (a fresh handle each time), "
        "warm (the worker's handle) and raw (plain sqlite3, the same code in both: a control), "
        f"{plan.reps} times each, interleaved.",
        rows,
        [_verdict(ratios, max(noise, 1 / noise))],
    )


def _verdict(ratios: dict[str, float], noise: float) -> str:
    """Met when this version is at most :data:`TARGET` times the previous everywhere; within
    the noise when the worst case is no further off than the control's two identical workers
    are from each other."""
    worst = max(ratios, key=ratios.__getitem__)
    found = f"{x(ratios[worst])} at worst ({worst})"
    found += f"; two identical workers differ by {noise:.2f}" if noise > 1 else ""
    if ratios[worst] <= TARGET:
        return f"Target met: no slowdown ({THIS} / {PREVIOUS} ≤ {TARGET:.2f}x everywhere): {found}."
    met = "met within the noise" if ratios[worst] <= noise else "missed"
    return f"Target {met}: {found} (target ≤ {TARGET:.2f}x)."


def reads_section(measured: Measured) -> Section:
    reads, plan, rows = measured.reads, measured.plan, []
    ratios = {f"{r}()": reads.ratio(f"{THIS} {r}()", f"{PREVIOUS} {r}()") for r in READS}
    for read, count in zip(ratios, measured.shape, strict=True):
        label = lambda name, count=count: f"{name}: {count:,} runs"  # noqa: E731
        shown = lambda t, count=count: f"{ms(t)}, {us(t / count)} a run"  # noqa: E731
        names = (f"{THIS} {read}", f"{PREVIOUS} {read}")
        rows += _versus(reads, read, names, label, shown, headline=True)
    return Section(
        "12. Rows returned by reads: this version against the previous version",
        f"A ledger per version of {plan.trees} run trees of {tree_size(plan.fanout)} runs (the "
        f"root spawns {' × '.join(map(str, plan.fanout))} subagents down {len(plan.fanout)} "
        "levels through `Agent.run`, two steps a run), in a worker of its own; `Ledger.runs()` "
        "(every run) and `Ledger.run_tree(root)` (one whole tree, each run's usage summed from its "
        f"steps) on an open handle, {plan.reps} times each, interleaved, medians.",
        rows,
        [_verdict(ratios, 1.0)],
    )

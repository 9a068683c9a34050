"""Many writers: turns per second as writer processes are added, agentledger against its peers.

Section 15: ``writers`` processes write one database at once (a SQLite file; then a database
on a throwaway PostgreSQL server), each running ``conversations`` conversations of ``turns``
turns (``bench/_writer_systems.py``): every turn a user message, three tool steps and an
answer, from a scripted model, no sleeps. All writers of a round start at one instant (the
parent gives them a start time once all have prepared the round), and the round's wall time
is the last writer's end less that instant. Measured, at 1, 2, 4 and 16 writers (the curve):

- turns per second in total (all writers' turns / the round's wall time), median of the rounds;
- a step's commit, p50 and p99 over every step of the rounds: for agentledger the recorder's
  ``record_step`` (a step's end to its transaction committed, lease check and lock waits
  included), for the SDK's sessions an ``add_items`` call, for LangGraph a checkpoint ``put``;
- lock retries per thousand transactions: the ledger counts both (:attr:`Ledger.lock_retries`,
  :attr:`Ledger.transactions`); the peers count neither;
- rows stored per turn, counted in the database afterwards.

The systems: agentledger's ``Agent.run``; on SQLite the OpenAI Agents SDK's ``SQLiteSession``
and LangGraph's ``SqliteSaver``; on PostgreSQL the SDK's ``SQLAlchemySession`` (asyncpg) and
LangGraph's ``PostgresSaver``. The rounds of the systems are interleaved (one system works at
a time, the order rotating), each system in its own database.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text

from agentledger.ledger import Ledger

from . import _peers
from ._common import Sizes, ms
from ._report import Row, Section
from ._statement_runs import POSTGRES_SETTINGS
from ._turns import STEPS_PER_TURN
from ._versions import Version, export
from ._workers import Worker, WorkerError, broadcast
from ._writer_systems import GraphWriter, LedgerWriter, SessionWriter
from .statements import throwaway_postgres

AGENTLEDGER = "agentledger Agent.run"
PREVIOUS = "agentledger Agent.run, previous version"
SQLITE_SESSION, SQLITE_GRAPH = _peers.SESSION, _peers.LANGGRAPH
ALCHEMY_SESSION, POSTGRES_GRAPH = _peers.POSTGRES_SESSION, _peers.POSTGRES_LANGGRAPH
SYSTEMS = {
    "SQLite": (AGENTLEDGER, SQLITE_SESSION, SQLITE_GRAPH),
    "PostgreSQL": (AGENTLEDGER, ALCHEMY_SESSION, POSTGRES_GRAPH),
}
SERVER_SETTINGS = {**POSTGRES_SETTINGS, "max_connections": "400"}
"""A durable server, with room for every writer's connections (three systems at 16 writers)."""
START_MARGIN = 0.25
"""Seconds between the parent's go and the round's start: time for every writer to hear it."""


@dataclass(frozen=True)
class Plan:
    writers: tuple[int, ...]
    conversations: int
    """Conversations per writer in a round."""
    turns: int
    """Turns of each conversation in a round."""
    reps: int


PLANS = {
    "quick": Plan((1, 2, 4), conversations=5, turns=2, reps=1),
    "default": Plan((1, 2, 4, 16), conversations=25, turns=4, reps=3),
    "full": Plan((1, 2, 4, 16), conversations=25, turns=4, reps=5),
}


@dataclass
class Point:
    """One system at one number of writers: its rounds."""

    rates: list[float] = field(default_factory=list)
    """Turns per second, per round."""
    commits: list[float] = field(default_factory=list)
    transactions: int | None = None
    retries: int | None = None
    turns: int = 0
    rows_per_turn: float | None = None
    failed: str | None = None

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    def add(self, start_at: float, answers: list[dict[str, Any]]) -> None:
        wall = max(a["end"] for a in answers) - start_at
        turns = sum(a["turns"] for a in answers)
        self.rates.append(turns / wall)
        self.turns += turns
        self.commits += [c for a in answers for c in a["commits"]]
        counted = [a for a in answers if a.get("transactions") is not None]
        if counted:
            self.transactions = (self.transactions or 0) + sum(a["transactions"] for a in counted)
            self.retries = (self.retries or 0) + sum(a["retries"] for a in counted)


@dataclass
class Measured:
    plan: Plan
    points: dict[str, dict[str, dict[int, Point]]] = field(default_factory=dict)
    """By backend, system and number of writers."""
    skipped: list[str] = field(default_factory=list)
    took: dict[str, float] = field(default_factory=dict)


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


# --- measuring -----------------------------------------------------------------------------------


class Databases:
    """A new database per system and number of writers: a file in ``tmp``, or a database on
    the throwaway server."""

    def __init__(self, tmp: Path, server: Any = None) -> None:
        self.tmp, self.server = tmp, server

    def new(self, system: str, writers: int) -> str:
        if self.server is not None:
            return str(self.server.create_database("agentledger_writers"))
        slug = "-".join(system.lower().replace(".", " ").split())
        return str(self.tmp / f"writers-{slug}-{writers}.db")


def _writer(
    system: str, url: str, plan: Plan, writer: int, previous: Version | None = None
) -> Worker:
    name = f"{system} writer {writer}"
    sizes = {"conversations": plan.conversations, "turns": plan.turns}
    if system == AGENTLEDGER:
        return Worker(name, LedgerWriter, url=url, **sizes)
    if system == PREVIOUS:
        assert previous is not None
        return Worker(name, LedgerWriter, source=previous.source, url=url, **sizes)
    factory = SessionWriter if system in (SQLITE_SESSION, ALCHEMY_SESSION) else GraphWriter
    return Worker(name, factory, url=url, writer=writer, **sizes)


def _start(
    system: str,
    url: str,
    plan: Plan,
    writers: int,
    stack: ExitStack,
    previous: Version | None = None,
) -> list[Worker]:
    """``writers`` workers on a database set up for ``system`` (its schema created once)."""
    if system in (AGENTLEDGER, PREVIOUS):
        Ledger.open(url).close()  # migrated here, once
    started = []
    for n in range(writers):
        worker = _writer(system, url, plan, n, previous)
        stack.callback(worker.close)
        started.append(worker)
        if n == 0:
            worker.call("setup")
    return started


def _round(workers: list[Worker]) -> tuple[float, list[dict[str, Any]]]:
    named = {str(n): w for n, w in enumerate(workers)}
    broadcast(named, "prepare")
    start_at = time.time() + START_MARGIN
    answers = broadcast(named, "round", start_at)
    return start_at, list(answers.values())


def _rows_per_turn(url: str, turns: int) -> float:
    """Every row of the database's tables (not the migration's bookkeeping nor a full-text
    index's shadow tables), per turn."""
    sqlalchemy_url = url if "://" in url else f"sqlite:///{url}"
    if sqlalchemy_url.startswith("postgresql://"):
        sqlalchemy_url = "postgresql+psycopg://" + url.split("://", 1)[1]
    engine = create_engine(sqlalchemy_url)
    try:
        with engine.connect() as conn:
            tables = [
                t
                for t in inspect(conn).get_table_names()
                if "migration" not in t and "alembic" not in t and "fts" not in t
            ]
            count = 'SELECT count(*) FROM "{}"'
            counts = [conn.execute(text(count.format(t))).scalar_one() for t in tables]
    finally:
        engine.dispose()
    return sum(counts) / turns


def measure_point(
    systems: list[str],
    databases: Databases,
    plan: Plan,
    writers: int,
    previous: Version | None = None,
) -> dict[str, Point]:
    points = {system: Point() for system in systems}
    with ExitStack() as stack:
        workers: dict[str, list[Worker]] = {}
        urls: dict[str, str] = {}
        for system in systems:
            urls[system] = databases.new(system, writers)
            try:
                workers[system] = _start(system, urls[system], plan, writers, stack, previous)
            except WorkerError as exc:
                if system == AGENTLEDGER:
                    raise
                points[system].failed = _last_line(exc)
        for rep in range(plan.reps):
            live = [s for s in systems if s in workers and points[s].failed is None]
            shift = rep % max(len(live), 1)
            for system in live[shift:] + live[:shift]:
                try:
                    start_at, answers = _round(workers[system])
                except WorkerError as exc:
                    if system == AGENTLEDGER:
                        raise
                    points[system].failed = _last_line(exc)
                    continue
                points[system].add(start_at, answers)
        for system, point in points.items():
            if point.turns and point.failed is None:
                point.rows_per_turn = _rows_per_turn(urls[system], point.turns)
    return points


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(exc).__name__


def _systems(backend: str, skipped: list[str]) -> list[str]:
    chosen = []
    for system in SYSTEMS[backend]:
        gone = _peers.missing(system) if system in _peers.REQUIREMENTS else []
        if gone:
            skipped.append(
                f"{backend}: {system} skipped, not installed ({', '.join(gone)}): "
                "`pip install -e '.[bench]'` (`make bench` does)."
            )
        else:
            chosen.append(system)
    return chosen


def measure_backend(
    measured: Measured,
    backend: str,
    databases: Databases,
    writers: tuple[int, ...],
    only: tuple[str, ...] | None = None,
    previous: Version | None = None,
) -> None:
    started = time.perf_counter()
    systems = [s for s in _systems(backend, measured.skipped) if only is None or s in only]
    if previous is not None:
        systems.insert(1, PREVIOUS)
    curve: dict[str, dict[int, Point]] = {system: {} for system in systems}
    for count in writers:
        print(f"  {backend}, {count} writers ...", file=sys.stderr, flush=True)
        points = measure_point(systems, databases, measured.plan, count, previous)
        for system, point in points.items():
            curve[system][count] = point
    measured.points[backend] = curve
    measured.took[backend] = time.perf_counter() - started


def measure(
    plan: Plan,
    tmp: Path,
    *,
    backends: tuple[str, ...] = ("SQLite", "PostgreSQL"),
    writers: tuple[int, ...] | None = None,
    only: tuple[str, ...] | None = None,
    previous: Version | None = None,
) -> Measured:
    """The curve on each backend; ``writers`` instead of the plan's points, ``only`` these
    systems, and ``previous`` (a version exported from git) measured beside this one."""
    measured = Measured(plan)
    counts = writers or plan.writers
    if "SQLite" in backends:
        measure_backend(measured, "SQLite", Databases(tmp), counts, only, previous)
    if "PostgreSQL" in backends:
        with throwaway_postgres(SERVER_SETTINGS, measured.skipped) as server:
            if server is not None:
                databases = Databases(tmp, server)
                measure_backend(measured, "PostgreSQL", databases, counts, only, previous)
    return measured


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("many writers, one database ...", file=sys.stderr, flush=True)
    return [report(measure(PLANS[sizes.name], tmp))]


# --- the report ----------------------------------------------------------------------------------


def _best_peer(curve: dict[str, dict[int, Point]], writers: int) -> tuple[str, float] | None:
    rates = [
        (system, points[writers].rate)
        for system, points in curve.items()
        if system not in (AGENTLEDGER, PREVIOUS) and writers in points and points[writers].rates
    ]
    return max(rates, key=lambda pair: pair[1]) if rates else None


def _retries(point: Point) -> str:
    if point.transactions is None or point.retries is None:
        return "—"
    return f"{1000 * point.retries / point.transactions:.1f}"


def _per_turn(point: Point) -> str:
    if point.transactions is None or not point.turns:
        return "—"
    return f"{point.transactions / point.turns:.2f}"


def _table(backend: str, curve: dict[str, dict[int, Point]]) -> list[str]:
    lines = [
        f"### {backend}",
        "",
        "| writers | system | turns/s | / best peer | step commit p50 | step commit p99 | "
        "lock retries per 1000 tx | transactions per turn | rows per turn |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    counts = sorted({n for points in curve.values() for n in points})
    for writers in counts:
        best = _best_peer(curve, writers)
        for system, points in curve.items():
            point = points.get(writers)
            if point is None:
                continue
            if point.failed is not None or not point.rates:
                lines.append(f"| {writers} | {system} | failed: {point.failed} | | | | | | |")
                continue
            ours = system in (AGENTLEDGER, PREVIOUS)
            ratio = f"{point.rate / best[1]:.2f}x" if best and ours else ""
            rows = f"{point.rows_per_turn:.1f}" if point.rows_per_turn is not None else "—"
            lines.append(
                f"| {writers} | {system} | {point.rate:,.1f} | {ratio} | "
                f"{ms(statistics.median(point.commits))} | {ms(p99(point.commits))} | "
                f"{_retries(point)} | {_per_turn(point)} | {rows} |"
            )
    return [*lines, ""]


def _rows(backend: str, curve: dict[str, dict[int, Point]]) -> list[Row]:
    rows = []
    for writers, point in sorted(curve.get(AGENTLEDGER, {}).items()):
        best = _best_peer(curve, writers)
        ratio = f"{point.rate / best[1]:.2f}x" if best else ""
        rows.append(
            Row(
                f"{backend}, {writers} writers: agentledger turns/s (ratio: / the best peer"
                + (f", {best[0]}" if best else "")
                + ")",
                f"{point.rate:,.1f}",
                ratio,
                headline=writers in (1, max(curve[AGENTLEDGER])),
            )
        )
    return rows


def _verdicts(measured: Measured) -> list[str]:
    notes = []
    for backend, curve in measured.points.items():
        ours = curve.get(AGENTLEDGER, {})
        behind = [
            f"{writers} writers ({point.rate:,.1f} against {best[1]:,.1f}, {best[0]})"
            for writers, point in sorted(ours.items())
            if (best := _best_peer(curve, writers)) is not None and point.rate < best[1]
        ]
        if behind:
            notes.append(
                f"Target missed on {backend}: agentledger's turns per second fall behind the "
                f"best peer's at {'; '.join(behind)}."
            )
        else:
            notes.append(
                f"Target met on {backend}: agentledger's turns per second are at least the "
                "best peer's at every point of the curve."
            )
        failed = [
            f"{system} at {writers} writers: {point.failed}"
            for system, points in curve.items()
            for writers, point in points.items()
            if point.failed
        ]
        notes += [f"{backend}: {failure}." for failure in failed]
    return notes + _bounds(measured)


def _change(points: dict[int, Point]) -> str:
    """How a system's rate changed from the fewest writers to the most, as a percentage."""
    first, last = points[min(points)].rate, points[max(points)].rate
    return f"{first:,.1f} → {last:,.1f} turns/s ({(last / first - 1) * 100:+.0f}%)"


def _bounds(measured: Measured) -> list[str]:
    """What bounds the curve, on each backend measured."""
    notes = []
    sqlite = measured.points.get("SQLite", {})
    if sqlite.get(AGENTLEDGER) and sqlite.get(SQLITE_SESSION):
        notes.append(
            "What bounds SQLite: one writer at a time. A write transaction holds SQLite's write "
            "lock from `BEGIN IMMEDIATE` to its commit (an fsync at synchronous=FULL), so all "
            "the writers together complete at most one turn per the time a turn holds the lock; "
            "more writers only queue for it (a step commit's p99 grows with them, while the lock "
            "retries stay near zero: the busy handler waits instead of failing, and no "
            '"database is locked" reached a caller). agentledger writes a turn in 6 write '
            "transactions (the run's begin, each of its 4 steps as it ends, so that a crash "
            "loses no finished step, and the commit), with the lease and heartbeat updates and a "
            "checksum on each row; the session writes its 8 items in 5 `add_items` transactions "
            "(JSON blobs: no steps, usage, lease or checksum). The Python of a turn (the loop, "
            "the rows, the checksums) runs outside the lock, and on 2 CPUs the writer processes "
            f"share it too. From the fewest writers to the most: agentledger "
            f"{_change(sqlite[AGENTLEDGER])}, {SQLITE_SESSION} {_change(sqlite[SQLITE_SESSION])}. "
            "Matching the session would take fewer, larger transactions per turn (the steps "
            "recorded only when the run commits), giving up what a crash keeps, so it was not "
            "done."
        )
    postgres = measured.points.get("PostgreSQL", {})
    if postgres.get(AGENTLEDGER):
        notes.append(
            "What bounds PostgreSQL: writers of different conversations do not wait on each "
            "other (row locks only), so the curve rises from one writer to two; beyond that the "
            "server and the writer processes share the machine's CPUs. agentledger "
            f"{_change(postgres[AGENTLEDGER])}."
        )
    return notes


def report(measured: Measured) -> Section:
    plan = measured.plan
    rows: list[Row] = []
    details: list[str] = []
    for backend, curve in measured.points.items():
        rows += _rows(backend, curve)
        details += _table(backend, curve)
    took = ", ".join(f"{backend} {seconds:.0f} s" for backend, seconds in measured.took.items())
    return Section(
        title="15. Many writers: turns per second as writer processes are added",
        about=(
            f"{', '.join(map(str, plan.writers))} writer processes on one database (a SQLite "
            "file at the ledger's defaults: WAL, synchronous=FULL; a throwaway PostgreSQL "
            "server with fsync and synchronous_commit on), each running "
            f"{plan.conversations} conversations of {plan.turns} turns (turn 1 of each, then "
            f"turn 2 ...); a turn is a user message, {STEPS_PER_TURN - 1} tool steps and an "
            "answer from a scripted model, no sleeps. All writers of a round start at one "
            "instant; turns/s = the round's turns / (the last writer's end − that instant), "
            f"median of {plan.reps} rounds, the systems' rounds interleaved, each system in a "
            "database of its own. A step's commit: agentledger's `record_step` (the step's end "
            "to its transaction committed), the SDK's `add_items`, LangGraph's checkpoint "
            "`put`; p50 and p99 over every step of the rounds. Lock retries and transactions: "
            "counted by the ledger (`Ledger.lock_retries`, `Ledger.transactions`); the peers "
            "count neither. Rows per turn: every row of the system's tables afterwards, per "
            f"turn (what each records of a turn: agentledger {STEPS_PER_TURN} step rows with "
            "their model, usage and timings, the tool executions, the run and its two "
            f"messages; the sessions their {_peers.ITEMS_PER_TURN} items; LangGraph a "
            "checkpoint per super-step and its writes)."
        ),
        rows=rows,
        notes=[*measured.skipped, *_verdicts(measured), f"Measuring took: {took}."],
        details=details,
    )


def main() -> None:
    """``python -m bench.writers [--quick | --full] [--sqlite-only | --postgresql-only]
    [--writers 1,2,4]``: section 15 alone, printed."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.writers")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--full", action="store_true")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--sqlite-only", action="store_true")
    only.add_argument("--postgresql-only", action="store_true")
    parser.add_argument("--writers", default=None, help="the curve's points, e.g. 1,2,4")
    parser.add_argument(
        "--previous", metavar="REF", default=None, help="a git commit to measure beside this one"
    )
    parser.add_argument(
        "--ours-only", action="store_true", help="agentledger alone (and --previous), no peer"
    )
    args = parser.parse_args()
    plan = PLANS["quick" if args.quick else "full" if args.full else "default"]
    backends = (
        ("SQLite",)
        if args.sqlite_only
        else ("PostgreSQL",)
        if args.postgresql_only
        else ("SQLite", "PostgreSQL")
    )
    writers = tuple(int(n) for n in args.writers.split(",")) if args.writers else None
    only = (AGENTLEDGER,) if args.ours_only else None
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        previous = export(args.previous, Path(tmp)) if args.previous else None
        measured = measure(
            plan, Path(tmp), backends=backends, writers=writers, only=only, previous=previous
        )
        section = report(measured)
    print("\n".join(section.render()))


if __name__ == "__main__":
    main()

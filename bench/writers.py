"""Section 15: many writer processes on one database, against the peers.

Each writer runs its conversations' turns in rounds (turn 1 of each, then turn 2, as a server
serves many conversations); all writers of a round start at one instant, given by the parent
once all have prepared, and the round's wall time is the last writer's end less that instant.
A step's commit is timed where each system makes it durable: agentledger's ``record_step``, the
SDK's ``add_items``, LangGraph's ``put``. The systems' rounds are interleaved, each system in a
database of its own.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import create_engine, inspect, text

from agentledger import Agent
from agentledger.ledger import Ledger

from . import peers
from ._common import (
    STEPS_PER_TURN,
    Sizes,
    TimedRecorder,
    database,
    ms,
    p99,
    postgres,
    question,
    turn_agent,
)
from ._replay import ReplayWriter
from ._report import Row, Section, table
from ._versions import Version
from ._workers import Worker, broadcast

AGENTLEDGER = "agentledger Agent.run"
BEFORE = "agentledger Agent.run, the previous version"
OWN_FILES = "agentledger Agent.run, each writer on a file of its own"
"""The machine's ceiling for the scaling targets: the same writers sharing no lock and no file,
their commits' syncs queueing at the one disk alone."""
SYSTEMS = {
    "SQLite": (AGENTLEDGER, peers.RUNNER, peers.SQLITE_GRAPH),
    "PostgreSQL": (AGENTLEDGER, peers.ALCHEMY_RUNNER, peers.POSTGRES_GRAPH),
}
UNSYNCED = "agentledger Agent.run, each writer on a file of its own, synchronous=NORMAL"
"""The cores' ceiling: the same writers on files of their own, committing without waiting for
the disk (``synchronous="NORMAL"``), at one writer and at every count the scaling targets name;
against :data:`OWN_FILES`, what waiting for the disk's syncs costs the scaling."""
REPLAYED = "agentledger's transactions replayed by sqlite3 alone, on one file"
"""SQLite's ceiling for the ledger's own writes: each writer's transactions, recorded through
the ledger, replayed on the shared file by the ``sqlite3`` module behind the same gate and
synced the same way, the ledger's Python between them a busy loop as long (:mod:`._replay`)."""
OURS = (AGENTLEDGER, BEFORE)
OWN_FILE_CEILINGS = (OWN_FILES, UNSYNCED)
CEILINGS = (*OWN_FILE_CEILINGS, REPLAYED)
NOT_PEERS = (*OURS, *CEILINGS)
SCALING = {2: (1, 1.6), 4: (2, 1.0)}
"""On SQLite, turns per second at N writers: at least this times M writers' (2 writers 1.6x
one writer's; 4 writers as many as 2)."""
START_MARGIN = 0.25
"""Seconds between the parent's go and the round's start: time for every writer to hear it."""


@dataclass(frozen=True)
class Plan:
    writers: tuple[int, ...]
    conversations: int
    turns: int
    reps: int


PLANS = {
    "quick": Plan((1, 2, 4), conversations=5, turns=2, reps=1),
    "default": Plan((1, 2, 4, 16), conversations=25, turns=4, reps=3),
    "full": Plan((1, 2, 4, 16), conversations=25, turns=4, reps=5),
}


def time_the_lock(times: list[float]) -> None:
    """Put in ``times`` how long each write transaction of this process's ledgers holds the
    write lock: what the ledger keeps (``Ledger.write_lock_times``, from ``BEGIN`` to
    ``COMMIT``, the sync after it), or, in a version that keeps none, from its ``BEGIN
    IMMEDIATE`` returned to its ``COMMIT`` returned (which synced under the lock)."""
    from agentledger.ledger import _engine

    original = _engine.Connections.transaction

    @contextlib.contextmanager
    def timed(self: Any, *, write: bool) -> Iterator[Any]:
        with original(self, write=write) as conn:
            begun = time.perf_counter()
            yield conn
        if write:
            kept = getattr(self, "hold_times", None)
            times.append(kept[-1] if kept else time.perf_counter() - begun)

    _engine.Connections.transaction = timed  # type: ignore[method-assign]


class LedgerWriter:
    """``Agent.run`` on a ledger; a step's commit is the recorder's ``record_step``, timed, and
    each write transaction's hold of the lock."""

    def __init__(self, url: str, writer: int) -> None:
        self.lock_times: list[float] = []
        time_the_lock(self.lock_times)
        self.ledger = self.opened(url, writer)
        self.recorder = TimedRecorder(self.ledger.recorder, "record_step")
        self.commits = self.recorder.times["record_step"]
        self.agents: list[list[Agent]] = []
        self.ids: list[str | None] = []

    @staticmethod
    def opened(url: str, writer: int) -> Ledger:
        return Ledger.open(url, migrate=False)  # the parent migrated it

    def setup(self) -> None:
        """Nothing: the parent migrated the database."""

    def prepare(self, round: int, conversations: int, turns: int) -> None:
        """An agent per turn, its script fresh, built before the clock starts."""
        self.agents = [
            [turn_agent(self.recorder) for _ in range(conversations)] for _ in range(turns)
        ]
        self.ids = [None] * conversations

    def turn(self, conversation: int, turn: int) -> None:
        result = self.agents[turn][conversation].run(question(turn), self.ids[conversation])
        if result.status != "completed":
            raise RuntimeError(f"a turn ended {result.status}: {result.error}")
        self.ids[conversation] = result.conversation_id

    def counts(self) -> tuple[int, int]:
        return self.ledger.transactions, self.ledger.lock_retries

    def close(self) -> None:
        self.ledger.close()


class OwnFileWriter(LedgerWriter):
    """:class:`LedgerWriter` on a ledger file of this writer's own, beside ``url``'s, at the
    class's ``synchronous``."""

    synchronous: Literal["FULL", "NORMAL"] = "FULL"

    @classmethod
    def opened(cls, url: str, writer: int) -> Ledger:
        return Ledger.open(own_file(url, writer), synchronous=cls.synchronous)


class UnsyncedWriter(OwnFileWriter):
    """:class:`OwnFileWriter` with ``synchronous="NORMAL"``."""

    synchronous = "NORMAL"


def own_file(url: str, writer: int) -> str:
    """The ledger file of writer ``writer`` of :data:`CEILINGS`' systems, beside ``url``'s."""
    path = Path(url)
    return str(path.with_name(f"{path.stem}-writer{writer}{path.suffix}"))


FACTORIES: dict[str, Any] = {AGENTLEDGER: LedgerWriter, BEFORE: LedgerWriter}
FACTORIES |= {OWN_FILES: OwnFileWriter, UNSYNCED: UnsyncedWriter, REPLAYED: ReplayWriter}
FACTORIES |= {peers.RUNNER: peers.RunnerWriter, peers.ALCHEMY_RUNNER: peers.RunnerWriter}
FACTORIES |= {peers.SQLITE_GRAPH: peers.GraphWriter, peers.POSTGRES_GRAPH: peers.GraphWriter}


class Writer:
    """One writer process: its conversations' turns in rounds, through one system."""

    def __init__(self, system: str, url: str, writer: int, conversations: int, turns: int) -> None:
        self.system = FACTORIES[system](url, writer)
        self.conversations, self.turns, self.rounds = conversations, turns, 0
        # The ledger's transactions and lock retries (the peers count neither).
        self.counts: Callable[[], tuple[int, int] | None] = getattr(
            self.system, "counts", lambda: None
        )

    def setup(self) -> None:
        self.system.setup()

    def prepare(self) -> None:
        self.rounds += 1
        self.system.prepare(self.rounds, self.conversations, self.turns)

    def round(self, start_at: float) -> dict[str, Any]:
        """The round's turns from ``start_at`` (``time.time()``) on: when the last ended, how
        many, each step's commit, and the transactions and lock retries if counted."""
        before = self.counts()
        self.system.commits.clear()
        held = getattr(self.system, "lock_times", None)
        if held is not None:
            held.clear()
        gc.collect()
        while (left := start_at - time.time()) > 0:
            time.sleep(min(left, 0.05))
        for turn in range(self.turns):
            for conversation in range(self.conversations):
                self.system.turn(conversation, turn)
        end, after = time.time(), self.counts()
        counted = None
        if before is not None and after is not None:
            counted = [b - a for a, b in zip(before, after, strict=True)]
        turns, commits = self.turns * self.conversations, list(self.system.commits)
        held = list(held) if held is not None else None
        return {"end": end, "turns": turns, "commits": commits, "counted": counted, "held": held}

    def close(self) -> None:
        self.system.close()


@dataclass
class Point:
    """One system at one number of writers: its rounds."""

    rates: list[float] = field(default_factory=list)
    commits: list[float] = field(default_factory=list)
    turns: int = 0
    counted: list[int] | None = None
    """The ledger's transactions and lock retries, over every round."""
    rows: float = 0.0
    """Rows stored per turn."""
    held: list[float] | None = None
    """How long each write transaction held the write lock (the ledger's; None: not known)."""

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    def add(self, start_at: float, answers: list[dict[str, Any]]) -> None:
        turns = sum(a["turns"] for a in answers)
        self.rates.append(turns / (max(a["end"] for a in answers) - start_at))
        self.turns += turns
        self.commits += [c for a in answers for c in a["commits"]]
        for held in (a["held"] for a in answers if a["held"] is not None):
            self.held = (self.held or []) + held
        for counted in (a["counted"] for a in answers if a["counted"] is not None):
            self.counted = [a + b for a, b in zip(self.counted or [0, 0], counted, strict=True)]


Curve = dict[str, dict[int, Point]]
"""A backend's points, by system and number of writers."""


@dataclass
class Measured:
    plan: Plan
    curves: dict[str, Curve] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    took: dict[str, float] = field(default_factory=dict)


def _rows_per_turn(url: str, turns: int) -> float:
    """Every row of the system's tables (not a migration's bookkeeping nor a full-text
    index's shadow tables), per turn."""
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    engine = create_engine(url if "://" in url else f"sqlite:///{url}")
    try:
        with engine.connect() as conn:
            names = inspect(conn).get_table_names()
            tables = [t for t in names if not any(w in t for w in ("migration", "alembic", "fts"))]
            counts = [
                conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one() for t in tables
            ]
            return sum(int(count) for count in counts) / turns
    finally:
        engine.dispose()


def measure_point(
    plan: Plan, urls: dict[str, str], writers: int, before: Version | None = None
) -> dict[str, Point]:
    """Each system's rounds at ``writers`` writers, on its database at ``urls[system]`` (the
    previous version's from its ``before.source``)."""
    points, systems = {system: Point() for system in urls}, list(urls)
    with ExitStack() as stack:
        workers: dict[str, dict[str, Worker]] = {}
        for system, url in urls.items():
            if system in (*OURS, REPLAYED):
                Ledger.open(url).close()  # migrated here, once
            sizes = {"conversations": plan.conversations, "turns": plan.turns}
            source = before.source if system == BEFORE and before is not None else None
            workers[system] = {
                str(n): Worker(
                    f"{system} {n}",
                    Writer,
                    source=source,
                    system=system,
                    url=url,
                    writer=n,
                    **sizes,
                )
                for n in range(writers)
            }
            for worker in workers[system].values():
                stack.callback(worker.close)
            workers[system]["0"].call("setup")
        for rep in range(plan.reps):
            for system in systems[rep % len(systems) :] + systems[: rep % len(systems)]:
                broadcast(workers[system], "prepare")
                start_at = time.time() + START_MARGIN
                answers = broadcast(workers[system], "round", start_at)
                points[system].add(start_at, list(answers.values()))
    for system, point in points.items():
        files = [urls[system]]
        if system in OWN_FILE_CEILINGS:
            files = [own_file(urls[system], n) for n in range(writers)]
        point.rows = sum(_rows_per_turn(file, point.turns) for file in files)
    return points


def _curve(
    measured: Measured,
    backend: str,
    url: Callable[[str, int], str],
    only: Any,
    before: Version | None = None,
) -> None:
    """Every point of ``backend``'s curve, each system on a database ``url(system, writers)``;
    the previous version's too when ``before`` is given (on SQLite)."""
    started, systems = time.perf_counter(), []
    ours_before = (BEFORE,) if before is not None and backend == "SQLite" else ()
    ceilings = CEILINGS if backend == "SQLite" else ()
    for system in (*SYSTEMS[backend][:1], *ours_before, *ceilings, *SYSTEMS[backend][1:]):
        why = peers.skipped(system) if system in peers.REQUIREMENTS else []
        measured.skipped += [f"{backend}: {system} skipped, {reason}." for reason in why]
        if not why and (only is None or system in only):
            systems.append(system)
    curve: Curve = {system: {} for system in systems}
    for count in measured.plan.writers:
        print(f"  {backend}, {count} writers ...", file=sys.stderr, flush=True)
        urls = {
            system: url(system, count)
            for system in systems
            if system not in CEILINGS or count in _ceiling_counts(system)
        }
        for system, point in measure_point(measured.plan, urls, count, before).items():
            curve[system][count] = point
    measured.curves[backend] = curve
    measured.took[backend] = time.perf_counter() - started


def _ceiling_counts(system: str) -> set[int]:
    """The writer counts a ceiling is measured at: those the scaling targets name (the
    files-of-their-own one is held against the shared file's one writer, the same thing), and
    the counts they are held against for the unsynced one and the replayed one, which have
    their own one writer."""
    counts = set(SCALING)
    if system in (UNSYNCED, REPLAYED):
        counts |= {against for against, _ in SCALING.values()}
    return counts


def measure(
    plan: Plan,
    tmp: Path,
    *,
    backends: tuple[str, ...] = ("SQLite", "PostgreSQL"),
    only: tuple[str, ...] | None = None,
    before: Version | None = None,
) -> Measured:
    """The curve on each backend, with ``only`` these systems (default: all installed), and
    on SQLite the ``before`` version's when given."""
    measured = Measured(plan)
    if "SQLite" in backends:
        path = lambda s, n: str(database(tmp, "writers", s, n))  # noqa: E731
        _curve(measured, "SQLite", path, only, before)
    wanted = "PostgreSQL" in backends
    with postgres(measured.skipped, wanted=wanted, max_connections="400") as new_database:
        if new_database is not None:  # room for every writer's connections: 3 systems at 16
            _curve(measured, "PostgreSQL", lambda s, n: new_database(), only)
    return measured


def run(sizes: Sizes, tmp: Path, before: Version | None = None) -> list[Section]:
    print("many writers, one database ...", file=sys.stderr, flush=True)
    return [report(measure(PLANS[sizes.name], tmp, before=before))]


def _best_peer(curve: Curve, writers: int) -> tuple[str, float] | None:
    rates = [(s, p[writers].rate) for s, p in curve.items() if s not in NOT_PEERS and writers in p]
    return max(rates, key=lambda pair: pair[1]) if rates else None


def _held(point: Point) -> list[str]:
    if not point.held:
        return ["—", "—"]
    return [ms(statistics.median(point.held)), ms(p99(point.held))]


def _details(backend: str, curve: Curve) -> list[str]:
    cells = []
    for writers in sorted({n for points in curve.values() for n in points}):
        best = _best_peer(curve, writers)
        for system, points in curve.items():
            if writers not in points:
                continue
            point = points[writers]
            ratio = f"{point.rate / best[1]:.2f}x" if best and system == AGENTLEDGER else ""
            retries, per_turn = "—", "—"
            if point.counted is not None:
                transactions, retried = point.counted
                retries = f"{1000 * retried / transactions:.1f}"
                per_turn = f"{transactions / point.turns:.2f}"
            commits = [ms(statistics.median(point.commits)), ms(p99(point.commits))]
            rate, rows = f"{point.rate:,.1f}", f"{point.rows:.1f}"
            cells.append(
                [
                    str(writers),
                    system,
                    rate,
                    ratio,
                    *_held(point),
                    *commits,
                    retries,
                    per_turn,
                    rows,
                ]
            )
    header = ["writers", "system", "turns/s", "/ best peer", "lock held p50", "lock held p99"]
    header += ["step commit p50", "step commit p99", "lock retries per 1000 tx"]
    header += ["transactions per turn", "rows per turn"]
    return [f"### {backend}", "", *table(header, cells, "rl" + "r" * 9)]


def _rows(backend: str, curve: Curve) -> list[Row]:
    rows, ours = [], curve.get(AGENTLEDGER, {})
    for writers, point in sorted(ours.items()):
        best = _best_peer(curve, writers)
        peer = f", {best[0]}" if best else ""
        rows.append(
            Row(
                f"{backend}, {writers} writers: agentledger turns/s (ratio: / the best peer{peer})",
                f"{point.rate:,.1f}",
                f"{point.rate / best[1]:.2f}x" if best else "",
                headline=writers in (min(ours), max(ours)),
            )
        )
    return rows


def _scaling(backend: str, curve: Curve) -> str:
    """Whether agentledger's turns per second grow with its writers as :data:`SCALING` asks
    (of SQLite: on PostgreSQL the same figures are given, with no target, as the server takes
    its share of the same cores)."""
    ours, targeted = curve.get(AGENTLEDGER, {}), backend == "SQLite"
    said, missed = [], False
    for writers, (against, target) in SCALING.items():
        if writers in ours and against in ours:
            ratio = ours[writers].rate / ours[against].rate
            missed |= ratio < target
            whose = "writer's" if against == 1 else "writers'"
            ceiling = ""
            for system, what in (
                (OWN_FILES, "each on a file of its own"),
                (UNSYNCED, "and unsynced"),
                (REPLAYED, "the ledger's transactions replayed by sqlite3 alone"),
            ):
                own = curve.get(system, {})
                if writers in own:
                    alone = (own if against in own else ours)[against].rate
                    ceiling += f"; {what}: {own[writers].rate / alone:.2f}x"
            aimed = f"target {target:.1f}x" if targeted else "no target"
            said.append(f"{writers} writers {ratio:.2f}x {against} {whose} ({aimed}{ceiling})")
    if not said:
        return ""
    verdict = ("missed" if missed else "met") if targeted else "(the server shares the cores)"
    return f"Scaling on {backend} {verdict}: {'; '.join(said)}."


def _verdict(backend: str, curve: Curve) -> str:
    behind = [
        f"{writers} writers ({point.rate:,.1f} against {best[1]:,.1f}, {best[0]})"
        for writers, point in sorted(curve.get(AGENTLEDGER, {}).items())
        if (best := _best_peer(curve, writers)) is not None and point.rate < best[1]
    ]
    if behind:
        return (
            f"Target missed on {backend}: agentledger behind the best peer at {'; '.join(behind)}."
        )
    return f"Target met on {backend}: agentledger at least the best peer's turns/s at every point."


def report(measured: Measured) -> Section:
    plan, curves = measured.plan, measured.curves
    took = ", ".join(f"{backend} {seconds:.0f} s" for backend, seconds in measured.took.items())
    return Section(
        "15. Many writers: turns per second as writer processes are added",
        f"{', '.join(map(str, plan.writers))} writer processes on one database (a SQLite file at "
        "the ledger's defaults: WAL, synchronous=FULL; a throwaway PostgreSQL server with fsync, "
        f"synchronous_commit and full_page_writes on), each running {plan.conversations} "
        f"conversations of {plan.turns} turns (a user message, {STEPS_PER_TURN - 1} tool "
        "steps, an answer; scripted, no sleeps). All writers of a round start at one instant; "
        "turns/s = the round's turns / (the last writer's end − that instant), median of "
        f"{plan.reps} rounds, "
        "the systems' rounds interleaved, each in a database of its own. The machine's "
        "ceilings, beside them: the same writers each on a ledger file of its own (no lock "
        "shared, only the disk), and those again at synchronous=NORMAL (no wait for the disk's "
        "syncs: what the cores allow); and each writer's own transactions, recorded through "
        "the ledger before the round, replayed on one file by sqlite3 alone behind the same "
        "gate and synced the same way, the ledger's Python between them a busy loop as long "
        "(what SQLite and the disk allow the ledger's writes). A step's commit: "
        "agentledger's `record_step`, the SDK's `add_items`, LangGraph's `put`; p50 and p99 "
        "over every step. Lock retries and transactions: `Ledger.lock_retries`, "
        "`Ledger.transactions`. Rows per turn: every row of the system's tables afterwards.",
        [row for backend, curve in curves.items() for row in _rows(backend, curve)],
        [
            *measured.skipped,
            *(_verdict(b, c) for b, c in curves.items()),
            *(said for b, c in curves.items() if (said := _scaling(b, c))),
            f"Measuring took: {took}.",
        ],
        [line for backend, curve in curves.items() for line in _details(backend, curve)],
    )

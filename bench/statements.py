"""The cost of sending the ledger's statements: its own path against SQLAlchemy Core's.

Recording a turn is a few short write transactions (``begin_run``, one ``record_step`` per step,
``commit_run``) of a handful of small statements each. The ledger compiles each statement once
per engine and sends its SQL text on the transaction's DBAPI cursor, or with
``Connection.exec_driver_sql`` when SQLAlchemy's logging or a listener of its cursor events or
errors watches. This benchmark measures what that saves against ``Connection.execute`` of the
same statements, the same rows:

``A``  the ledger as it is.
``B``  the same ledger, its compiled statements replaced by ``conn.execute(statement, row)``
       (``conn.execute(insert, rows)`` for several rows): SQLAlchemy's compiled cache and
       memoized cache keys doing their job on statements built once.

Two handles on one database, one each way, record the same turns through ``Agent.run`` (a
scripted model: ``TOOL_STEPS`` tool-calling steps of ``CALLS_PER_STEP`` calls with ~1 KB
results, then an answer), each on a conversation of its own, the turns interleaved in a random
order each time. Each turn is timed whole (``Agent.run``), by recorder call (through a recorder
that forwards to the ledger's and times its calls), and its statements alone. Ratios are
paired: B's time over A's for the same repetition; the tables give the median and the
interquartile range of those ratios. At the end both handles hold as many rows of each table,
and ``Ledger.verify()`` finds nothing wrong.

Backends: a SQLite file (WAL) with ``synchronous=FULL`` and ``NORMAL``; PostgreSQL (psycopg 3)
when ``tests/support/postgres.py`` can start a throwaway server (``fsync=on``,
``synchronous_commit`` ``on`` and ``off``), skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ._common import Sizes, us
from ._report import Row, Section
from ._statement_runs import (
    CALLS_PER_STEP,
    POSTGRES_SETTINGS,
    REPS,
    TOOL_STEPS,
    WAYS,
    Turn,
    Way,
    measure_backend,
    median,
    ratios,
)
from ._versions import REPOSITORY

# --- backends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    title: str
    url: str
    synchronous: str = "FULL"


def postgres_harness() -> tuple[ModuleType | None, str]:
    """``tests/support/postgres.py`` of the repository ``bench/`` sits in, loaded by its path
    (it imports nothing but the standard library, and psycopg when used); or None, and why."""
    path = REPOSITORY / "tests" / "support" / "postgres.py"
    if not path.is_file():
        return None, f"no {path.relative_to(REPOSITORY)} next to bench/"
    spec = importlib.util.spec_from_file_location("bench_postgres_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, ""


@contextlib.contextmanager
def throwaway_postgres(settings: Mapping[str, str], skipped: list[str]) -> Iterator[Any]:
    """A throwaway PostgreSQL server with ``settings``, stopped and removed afterwards; or
    None, with the reason in ``skipped``, when none can start (no binaries, no permission)."""
    harness, why = postgres_harness()
    server = None
    if harness is not None:
        try:
            server = harness.PostgresServer(settings=settings).start()
        except Exception as problem:
            why = f"{type(problem).__name__}: {' '.join(str(problem).split())[:200]}"
    if server is None:
        skipped.append(f"PostgreSQL: skipped, no throwaway server could be started ({why}).")
        yield None
        return
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def postgres_backends(skipped: list[str]) -> Iterator[list[Backend]]:
    """Two databases on a throwaway server (``synchronous_commit`` on and off); none when no
    server can start."""
    with throwaway_postgres(POSTGRES_SETTINGS, skipped) as server:
        if server is None:
            yield []
            return
        backends = []
        for commit in ("on", "off"):
            url = server.create_database("agentledger_bench")
            url += f"?options=-csynchronous_commit%3D{commit}"
            backends.append(Backend(f"PostgreSQL, fsync=on, synchronous_commit={commit}", url))
        yield backends


@dataclass
class Measured:
    reps: int
    ways: dict[str, list[Way]] = field(default_factory=dict)
    """By backend title: A, then B."""
    took: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def measure(reps: int, tmp: Path, *, postgres: bool = True) -> Measured:
    measured = Measured(reps)
    backends = [
        Backend(f"SQLite, synchronous={mode}", f"sqlite:///{tmp / f'statements-{mode}.db'}", mode)
        for mode in ("FULL", "NORMAL")
    ]
    with contextlib.ExitStack() as stack:
        if postgres:
            backends += stack.enter_context(postgres_backends(measured.skipped))
        else:
            measured.skipped.append("PostgreSQL: not measured in this run.")
        for backend in backends:
            print(f"  {backend.title}: {reps} turns each way ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            measured.ways[backend.title] = measure_backend(backend.url, backend.synchronous, reps)
            measured.took[backend.title] = time.perf_counter() - started
    return measured


# --- the report ----------------------------------------------------------------------------------


def run(sizes: Sizes, tmp: Path) -> Section:
    print("the ledger's statements against SQLAlchemy Core's ...", file=sys.stderr, flush=True)
    return report(measure(REPS[sizes.name], tmp))


PARTS: dict[str, Callable[[Turn], float]] = {
    "a turn through `Agent.run`": lambda turn: turn.whole,
    "its `begin_run`": lambda turn: turn.calls["begin_run"],
    f"its {TOOL_STEPS + 1} `record_step`s": lambda turn: turn.calls["record_step"],
    "its `commit_run`": lambda turn: turn.calls["commit_run"],
    "its statements alone": lambda turn: turn.statements,
}
HEADLINE = "a turn through `Agent.run`"


def _iqr(values: Sequence[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q2:.2f}x [{q1:.2f}–{q3:.2f}]"


def report(measured: Measured) -> Section:
    rows: list[Row] = []
    for title, ways in measured.ways.items():
        for part, of in PARTS.items():
            rows.append(Row(f"{title}: {part}, A", us(median(ways[0], of))))
            rows.append(
                Row(f"{title}: {part}, B/A", "", _iqr(ratios(ways, of)), headline=part == HEADLINE)
            )
    took = ", ".join(f"{title} {seconds:.1f} s" for title, seconds in measured.took.items())
    return Section(
        title="10. The ledger's statements: compiled once and sent as text, against Core",
        about=(
            f"The same turns ({TOOL_STEPS} tool-calling steps of {CALLS_PER_STEP} calls with "
            "~1 KB results, then the answer) recorded through `Agent.run` by two handles on one "
            f"database, {measured.reps} each, interleaved in a random order each time, each on "
            "a conversation of its own (checked: as many rows of each table, and "
            "`Ledger.verify()` finds nothing). Ratios: the median of the paired ratios B/A (same "
            "repetition) [interquartile range]. "
            + " ".join(f"{name}: {about}." for name, about in WAYS.items())
        ),
        rows=rows,
        notes=[*measured.skipped, f"The timed turns took: {took}."],
    )

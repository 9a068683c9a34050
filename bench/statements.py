"""The cost of sending the ledger's statements: its compiled path against SQLAlchemy's own.

Recording a run is a sequence of short write transactions (``begin_run``, one ``record_step``
per step, ``commit_run``) of a handful of small statements each. The ledger compiles each
statement once per dialect and runs it on the driver's cursor of the SQLAlchemy ``Connection``
(``agentledger.ledger._statements``: ``statements_for(dialect)``, ``run_on_cursor``), doing by
hand what ``Connection.execute`` does around the cursor (the cursor listeners, statement
logging, ``handle_error``). This benchmark measures what that saves against SQLAlchemy's own
paths, each variant sending the same statements with the same parameters:

``A``  the ledger's path: ``Statements.execute / execute_many / select`` (``run_on_cursor``).
``B``  SQLAlchemy Core: ``conn.execute(statement, row)``, ``conn.execute(insert, rows)``
       (executemany), the statements being the ledger's own module-level constants, built
       once (SQLAlchemy's compiled cache and memoized cache keys doing their job).
``C``  ``conn.exec_driver_sql(sql, params)``: the SQL text compiled once and the parameters
       bound by the ledger's ``Compiled``; SQLAlchemy does events, logging, errors and the
       result, but no compilation.
``D``  SQLAlchemy's private raw-cursor helper, ``Connection._cursor_execute`` (events,
       logging, ``handle_error``; no execution context, no result object) for single
       statements; it has no executemany form, so ``execute_many`` goes through
       ``exec_driver_sql``. What ``A`` would be if it leant on that helper.

The rows are real: one ``Agent.run`` (a scripted model, ``TOOL_STEPS`` tool-calling steps of
``CALLS_PER_STEP`` calls with ~1 KB results, then an answer) is recorded on the ledger, and every
statement its write transactions send through the compiled statements is captured with its
parameters. Each repetition replays that run (begin, steps, answer step, commit) on a
conversation of each variant's own, with fresh ids, positions moved on and checksums sealed
again, so that every variant writes the same rows; at the end ``Ledger.verify()`` must find
nothing wrong and the variants' rows must be equal but for ids.

Timing: the variants are interleaved at the level of the transaction (transaction ``t`` of
repetition ``r`` runs for every variant in turn, in a random order each time: a rotation would
keep every variant behind the same neighbour, whose warm caches it would inherit), through the
ledger's own ``Connections.write()``. For each transaction: the whole of it (connection taken,
BEGIN ... COMMIT, connection given back), the statements alone, and each statement call. Ratios
are paired: a variant's time over ``A``'s in the same repetition and transaction; the tables
give the median and the interquartile range of those ratios.

Backends: a SQLite file (WAL) with ``synchronous=FULL`` and ``NORMAL``; PostgreSQL (psycopg 3)
when ``tests/support/postgres.py`` can start a throwaway server (``fsync=on``,
``synchronous_commit`` ``on`` and ``off``), skipped with the reason otherwise.

Visibility, for every variant: do ``echo=True`` and a handler on the ``sqlalchemy.engine``
logger at INFO show every statement sent, also when the logger is set after the ledger's first
transaction (SQLite keeps that connection open); is ``BEGIN IMMEDIATE`` logged; does a
``handle_error`` listener see a failing statement (a primary key violation), and what is raised;
do ``before/after_cursor_execute`` fire. On PostgreSQL, also a lost connection (its backend
terminated between two statements): is it invalidated, does ``handle_error`` say so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from agentledger.ledger import Ledger
from agentledger.ledger._engine import EngineSettings

from ._common import Sizes, us
from ._report import Row, Section
from ._statement_runs import (
    POSTGRES_SETTINGS,
    REPS,
    VARIANTS,
    Timings,
    capture,
    check_same_rows,
    measure_backend,
)
from ._statement_visibility import (
    Seen,
    visibility,
)
from ._versions import REPOSITORY

# --- backends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    title: str
    url: str
    synchronous: str = "FULL"
    visibility: bool = False
    """Whether the visibility experiments run here: they depend on the database, not on its
    durability setting, so once per database is enough."""

    @property
    def database(self) -> str:
        return "PostgreSQL" if self.url.startswith("postgresql") else "SQLite"


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
            title = f"PostgreSQL, fsync=on, synchronous_commit={commit}"
            backends.append(Backend(title, url, visibility=commit == "on"))
        yield backends


def _check_server(ledger: Ledger, backend: Backend) -> None:
    """The server runs with the settings the title says."""
    with ledger.engine.connect() as conn:
        commit = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
        fsync = conn.exec_driver_sql("SHOW fsync").scalar()
    assert f"synchronous_commit={commit}" in backend.title, (backend.title, commit)
    assert f"fsync={fsync}" in backend.title, (backend.title, fsync)


@dataclass
class Measured:
    reps: int
    timings: dict[str, Timings] = field(default_factory=dict)
    """By backend title."""
    took: dict[str, float] = field(default_factory=dict)
    seen: dict[str, dict[str, Seen]] = field(default_factory=dict)
    """By database (SQLite, PostgreSQL), then by variant."""
    skipped: list[str] = field(default_factory=list)


def measure_one(backend: Backend, reps: int, measured: Measured) -> None:
    print(f"  {backend.title}: {reps} repetitions ...", file=sys.stderr, flush=True)
    synchronous = backend.synchronous
    with Ledger.open(backend.url, synchronous=synchronous) as ledger:  # type: ignore[arg-type]
        if backend.database == "PostgreSQL":
            _check_server(ledger, backend)
        template = capture(ledger)
        started = time.perf_counter()
        timings = measure_backend(ledger, template, reps)
        measured.took[backend.title] = time.perf_counter() - started
        check_same_rows(ledger, list(timings.times))
    measured.timings[backend.title] = timings
    if backend.visibility:
        settings = EngineSettings(synchronous=synchronous)  # type: ignore[arg-type]
        measured.seen[backend.database] = {
            cls.name: visibility(backend.url, settings, template, cls) for cls in VARIANTS
        }


def measure(reps: int, tmp: Path, *, postgres: bool = True) -> Measured:
    measured = Measured(reps)
    backends = [
        Backend(
            f"SQLite, synchronous={mode}",
            f"sqlite:///{tmp / f'statements-{mode.lower()}.db'}",
            mode,
            visibility=mode == "FULL",
        )
        for mode in ("FULL", "NORMAL")
    ]
    with contextlib.ExitStack() as stack:
        if postgres:
            backends += stack.enter_context(postgres_backends(measured.skipped))
        else:
            measured.skipped.append("PostgreSQL: not measured in this run.")
        for backend in backends:
            measure_one(backend, reps, measured)
    return measured


# --- the report ----------------------------------------------------------------------------------


def run(sizes: Sizes, tmp: Path) -> Section:
    reps = REPS[sizes.name]
    print("the ledger's statements against SQLAlchemy's paths ...", file=sys.stderr, flush=True)
    return report(measure(reps, tmp))


def _iqr(values: Sequence[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q2:.2f}x [{q1:.2f}–{q3:.2f}]"


OTHERS = ("B", "C", "D")
GROUPS = ("step", "begin", "commit", "answer step")
SHORT = {"B": "Core `execute`", "C": "`exec_driver_sql`", "D": "`_cursor_execute`"}


def report(measured: Measured) -> Section:
    rows: list[Row] = []
    for title, timings in measured.timings.items():
        rows.append(Row(f"{title}: a step transaction, A (whole)", us(timings.median("step"))))
        rows += [
            Row(
                f"{title}: a step transaction, {name}/A ({SHORT[name]})",
                "",
                _iqr(timings.ratios(name, "step")),
                headline=name == "B",
            )
            for name in OTHERS
        ]
        rows.append(
            Row(
                f"{title}: a step's statements alone, B/A",
                "",
                _iqr(timings.ratios("B", "step", "statements")),
            )
        )
    details: list[str] = []
    for title, timings in measured.timings.items():
        details += _backend_details(title, timings, measured)
    if measured.seen:
        details += _visibility_table(measured.seen)
    return Section(
        title="10. The ledger's statements: the compiled path against SQLAlchemy's",
        about=(
            "The statements of one recorded run (begin, 3 tool-calling steps of 2 calls with "
            "~1 KB results, the answer step, commit), captured with their parameters, replayed "
            f"{measured.reps} times by each way of sending them, on a conversation of each "
            "variant's own (fresh ids, checksums sealed again; checked: `Ledger.verify()` finds "
            "nothing and the variants wrote equal rows). Interleaved per transaction, in a "
            "random order each time, through the ledger's own `Connections.write()`. Ratios: "
            "the median of the paired ratios to A (same repetition and transaction) "
            "[interquartile range]. Whole = connection taken, BEGIN ... COMMIT, connection "
            "given back. " + " ".join(f"{cls.name}: {cls.about}." for cls in VARIANTS)
        ),
        rows=rows,
        notes=_notes(measured),
        details=details,
    )


def _notes(measured: Measured) -> list[str]:
    notes = list(measured.skipped)
    took = ", ".join(f"{title} {seconds:.1f} s" for title, seconds in measured.took.items())
    notes.append(f"The timed replays took: {took}.")
    shown = [db for db, by_variant in measured.seen.items() if by_variant["A"].shows_everything()]
    hidden = [db for db in measured.seen if db not in shown]
    if shown:
        notes.append(
            f"Visibility ({' and '.join(shown)}): A shows everything that B, SQLAlchemy's own "
            "`execute`, shows: every statement to `echo=True` and to the `sqlalchemy.engine` "
            "logger at INFO (also when the logger is set after the handle's first transaction), "
            "`BEGIN IMMEDIATE` on SQLite, a failing statement to `handle_error` (with no "
            "execution context, as `_cursor_execute` gives it), every cursor event, and on "
            "PostgreSQL a lost connection invalidated with `handle_error` told it is a "
            "disconnect: the table below."
        )
    if hidden:
        notes.append(
            f"Visibility ({' and '.join(hidden)}): A does NOT show everything: see the table."
        )
    return notes


def _backend_details(title: str, timings: Timings, measured: Measured) -> list[str]:
    lines = [f"### {title}", ""]
    lines += ["| transaction | part | A median | " + " | ".join(f"{n}/A" for n in OTHERS) + " |"]
    lines.append("|---|---|---:|" + "---:|" * len(OTHERS))
    for group in GROUPS:
        for part in ("whole", "statements"):
            cells = [_iqr(timings.ratios(n, group, part)) for n in OTHERS]
            lines.append(
                f"| {group} | {part} | {us(timings.median(group, part))} | "
                + " | ".join(cells)
                + " |"
            )
        whole = timings.median(group)
        share = timings.median(group, "statements") / whole
        extra = [
            statistics.median(
                timings.times[n][k].whole - timings.times["A"][k].whole for k in timings.keys(group)
            )
            for n in OTHERS
        ]
        lines.append(
            f"| {group} | statements / whole (A); the others: time added | {share:.0%} | "
            + " | ".join(f"{e * 1e6:+,.0f} µs ({e / whole:+.0%})" for e in extra)
            + " |"
        )
    lines += ["", "Per statement call (inside the transaction):", ""]
    lines += ["| statement | n | A median | " + " | ".join(f"{n}/A" for n in OTHERS) + " |"]
    lines.append("|---|---:|---:|" + "---:|" * len(OTHERS))
    base = timings.times["A"]
    labelled: dict[str, list[tuple[tuple[int, int], int]]] = {}
    for key in base:
        for position, label in enumerate(timings.labels[key[1]]):
            labelled.setdefault(label, []).append((key, position))
    for label, where in labelled.items():
        if label.endswith(" x0"):
            continue  # an executemany of no rows sends nothing
        a = [base[k].calls[p] for k, p in where]
        cells = [
            _iqr([timings.times[n][k].calls[p] / base[k].calls[p] for k, p in where])
            for n in OTHERS
        ]
        lines.append(
            f"| {label} | {len(where)} | {us(statistics.median(a))} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    return lines


def _visibility_table(seen: Mapping[str, Mapping[str, Seen]]) -> list[str]:
    lines = [
        "### Visibility",
        "",
        "| database | variant | echo=True: statements shown | sqlalchemy.engine logger at INFO | "
        "logger at INFO set after the first transaction | BEGIN IMMEDIATE logged | "
        "handle_error on a PK violation | raised | before/after_cursor_execute | "
        "lost connection (PostgreSQL) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for database, by_variant in seen.items():
        for name, s in by_variant.items():
            lines.append(
                f"| {database} | {name} | {s.echo} | {s.logger} | {s.late} | {s.begin_logged} "
                f"| {s.handle_error} | {s.raised} | {s.cursor_events} "
                f"| {s.lost_connection or 'n/a'} |"
            )
    return lines

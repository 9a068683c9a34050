"""Analytics at scale: DuckDB's ``run_rollup`` and ``tool_stats`` against SQLite alone.

A synthetic ledger of 1,000,000 steps in 100,000 runs (``--quick``: ten times fewer), run trees
up to depth 5, is built once per benchmark run in the temporary directory
(``bench/_synthetic.py``). Then the same two questions, interleaved, several repetitions,
medians:

- DuckDB: :class:`agentledger.analytics.Analytics` over the file (the ``sqlite_scanner``
  extension, read-only, as many threads as the machine has cores: DuckDB's default),
  ``SELECT * FROM run_rollup`` and ``SELECT * FROM tool_stats`` materialized in full as Arrow
  tables (``to_arrow_table()``);
- SQLite alone: one query each on the same file, :data:`SQLITE_RUN_ROLLUP` (a recursive CTE for
  the tree, one for the ancestor closure of each run, then inclusive sums) and
  :data:`SQLITE_TOOL_STATS` (percentiles from ``row_number()`` and ``count()`` windows, as
  DuckDB's ``quantile_cont`` interpolates them), every row fetched (``fetchall()``).

Both answers are compared, every run and every tool, before anything is timed.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from agentledger.analytics import Analytics

from ._common import DEFAULT, FULL, QUICK, Samples, Sizes, interleaved, ms, timed
from ._report import Row, Section
from ._synthetic import Built, append, build

# -- sizes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """The synthetic ledger's size and the repetitions, per mode."""

    steps: int
    runs: int
    reps: int
    sqlite_reps: int
    """SQLite's repetitions, at most ``reps``: its queries take far longer than DuckDB's."""


SCALES = {
    "quick": Scale(steps=100_000, runs=10_000, reps=3, sqlite_reps=3),
    "default": Scale(steps=1_000_000, runs=100_000, reps=5, sqlite_reps=5),
    "full": Scale(steps=1_000_000, runs=100_000, reps=9, sqlite_reps=5),
}
TARGET_RATIO = 10.0
"""The DuckDB rollup should be at least this many times faster than SQLite's ..."""
TARGET_SECONDS = 2.0
"""... and take less than this, at 1,000,000 steps on a 2-core machine."""


# -- SQLite alone -------------------------------------------------------------------------------

_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_TOKENS += ("reasoning_tokens", "cache_write_1h_tokens")
_SUMS = ("steps", *_TOKENS, "cost_usd", "unpriced_steps", "tool_calls", "tool_errors")
"""What ``run_rollup`` sums, per run (``exclusive_*``) and per subtree (``inclusive_*``)."""


def _lines(template: str, names: Sequence[str]) -> str:
    return ",\n".join(template.format(name=name) for name in names)


SQLITE_RUN_ROLLUP = f"""
WITH RECURSIVE
tree(run_id, root_run_id, depth, path, agent_path) AS (
    SELECT id, id, 0, id, agent_name FROM agent_runs WHERE parent_run_id IS NULL
    UNION ALL
    SELECT r.id, t.root_run_id, t.depth + 1, t.path || ',' || r.id,
           t.agent_path || ' > ' || r.agent_name
    FROM agent_runs AS r JOIN tree AS t ON r.parent_run_id = t.run_id
),
closure(ancestor_id, run_id) AS (
    SELECT id, id FROM agent_runs
    UNION ALL
    SELECT c.ancestor_id, r.id FROM agent_runs AS r JOIN closure AS c ON r.parent_run_id = c.run_id
),
own_steps AS (
    SELECT run_id, count(*) AS steps,
{_lines("        sum({name}) AS {name}", _TOKENS)},
        sum(cost_usd) AS cost_usd,
        sum(message_id IS NOT NULL AND cost_usd IS NULL) AS unpriced_steps,
        sum(duration_ms) AS step_ms
    FROM step_executions GROUP BY run_id
),
own_tools AS (
    SELECT run_id, count(*) AS tool_calls, sum(is_error) AS tool_errors
    FROM tool_executions GROUP BY run_id
),
own AS MATERIALIZED (
    SELECT r.id AS run_id,
{_lines("        coalesce(s.{name}, 0) AS {name}", ("steps", *_TOKENS))},
        s.cost_usd,
        coalesce(s.unpriced_steps, 0) AS unpriced_steps,
        coalesce(t.tool_calls, 0) AS tool_calls,
        coalesce(t.tool_errors, 0) AS tool_errors,
        coalesce(s.step_ms, 0) AS step_ms
    FROM agent_runs AS r
    LEFT JOIN own_steps AS s ON s.run_id = r.id
    LEFT JOIN own_tools AS t ON t.run_id = r.id
),
inclusive AS (
    SELECT c.ancestor_id AS run_id, count(*) AS runs,
{_lines("        sum(o.{name}) AS {name}", _SUMS)}
    FROM closure AS c JOIN own AS o ON o.run_id = c.run_id
    GROUP BY c.ancestor_id
)
SELECT
    t.run_id, t.root_run_id, r.parent_run_id, t.depth, t.path, t.agent_path,
    r.conversation_id, r.agent_name, r.model, r.status, r.started_at, r.finished_at,
    (julianday(r.finished_at) - julianday(r.started_at)) * 86400000.0 AS wall_ms,
    o.step_ms AS own_step_ms,
{_lines("    o.{name} AS exclusive_{name}", _SUMS)},
    i.runs AS inclusive_runs,
{_lines("    i.{name} AS inclusive_{name}", _SUMS)}
FROM tree AS t
JOIN agent_runs AS r ON r.id = t.run_id
JOIN own AS o ON o.run_id = t.run_id
JOIN inclusive AS i ON i.run_id = t.run_id
"""
"""``run_rollup`` in SQLite alone, the view's columns in its order (``path`` as the ids joined
by commas, ``wall_ms`` from ``julianday``)."""

QUANTILES = {"p50_ms": 0.50, "p95_ms": 0.95, "p99_ms": 0.99}


def _quantile(q: float) -> str:
    """DuckDB's ``quantile_cont``: at ``h = (n - 1) * q`` in the tool's durations in order,
    between the values at ``floor(h)`` and ``floor(h) + 1`` (0-based), linearly."""
    h = f"((n - 1) * {q})"
    low = f"CAST({h} AS INTEGER)"
    return (
        f"sum(CASE WHEN pos = {low} THEN duration_ms * (1 - ({h} - {low})) "
        f"WHEN pos = {low} + 1 THEN duration_ms * ({h} - {low}) ELSE 0 END)"
    )


SQLITE_TOOL_STATS = f"""
WITH ranked AS (
    SELECT tool_name, is_error, duration_ms,
        row_number() OVER (PARTITION BY tool_name ORDER BY duration_ms) - 1 AS pos,
        count(*) OVER (PARTITION BY tool_name) AS n
    FROM tool_executions
)
SELECT
    tool_name,
    count(*) AS calls,
    sum(is_error) AS errors,
    sum(is_error) * 1.0 / count(*) AS error_rate,
    avg(duration_ms) AS mean_ms,
{_lines("    {name}", [f"{_quantile(q)} AS {name}" for name, q in QUANTILES.items()])},
    max(duration_ms) AS max_ms
FROM ranked
GROUP BY tool_name
"""
"""``tool_stats`` in SQLite alone, the view's columns in its order: SQLite has no percentile
function, so the percentiles come from ``row_number()`` and ``count()`` windows."""


def sqlite_connect(path: Path) -> sqlite3.Connection:
    """A read-only connection, SQLite's default settings otherwise (a 256 MiB page cache and
    in-memory temporary B-trees did not make its queries faster)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def sqlite_run_rollup(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(SQLITE_RUN_ROLLUP).fetchall()


def sqlite_tool_stats(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(SQLITE_TOOL_STATS).fetchall()


# -- both answers compared ----------------------------------------------------------------------

TOLERANCES = {"wall_ms": 1.5}
"""Absolute tolerances: DuckDB's ``epoch_ms`` counts whole milliseconds, SQLite's
``julianday`` is a float of days."""


def _normal(column: str, value: Any) -> Any:
    """A SQLite value as DuckDB returns it: ``path`` a list, timestamps datetimes."""
    if value is None or not isinstance(value, str):
        return value
    if column == "path":
        return value.split(",")
    if column.endswith("_at"):
        return datetime.fromisoformat(value)
    return value


def _same(column: str, ours: Any, theirs: Any) -> bool:
    if isinstance(ours, float) or isinstance(theirs, float):
        if ours is None or theirs is None:
            return ours is theirs
        return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=TOLERANCES.get(column, 1e-9))
    return bool(ours == theirs)


def differences(
    columns: Sequence[str],
    duckdb_rows: Sequence[Sequence[Any]],
    sqlite_rows: Sequence[Sequence[Any]],
) -> list[str]:
    """Where two answers with the same ``columns`` disagree, rows matched on the first column;
    floats within a relative 1e-9."""
    duck = {row[0]: row for row in duckdb_rows}
    lite = {row[0]: row for row in sqlite_rows}
    found = [f"only in DuckDB: {key}" for key in duck.keys() - lite.keys()]
    found += [f"only in SQLite: {key}" for key in lite.keys() - duck.keys()]
    for key in duck.keys() & lite.keys():
        for column, ours, theirs in zip(columns, duck[key], lite[key], strict=True):
            if not _same(column, ours, _normal(column, theirs)):
                found.append(f"{key}, {column}: DuckDB {ours!r}, SQLite {theirs!r}")
    return sorted(found)


def check_same_answers(analytics: Analytics, conn: sqlite3.Connection) -> None:
    """Fail loudly when DuckDB's views and the SQLite queries stopped answering alike."""
    for view, query in (("run_rollup", SQLITE_RUN_ROLLUP), ("tool_stats", SQLITE_TOOL_STATS)):
        cursor = conn.execute(query)
        columns = [d[0] for d in cursor.description]
        relation = analytics.sql(f"SELECT * FROM {view}")
        if relation.columns != columns:
            raise AssertionError(f"{view}: DuckDB has {relation.columns}, SQLite {columns}")
        found = differences(columns, relation.fetchall(), cursor.fetchall())
        if found:
            raise AssertionError(
                f"{view}: SQLite alone no longer answers as DuckDB does ({len(found)} "
                f"differences, first {found[:5]}); update bench/analytics.py"
            )


# -- the benchmark ------------------------------------------------------------------------------

DUCK_ROLLUP, DUCK_ROLLUP_TUPLES = "duckdb run_rollup", "duckdb run_rollup tuples"
DUCK_TREE, DUCK_OWN, DUCK_TOOLS = "duckdb run_tree", "duckdb run_own_usage", "duckdb tool_stats"
LITE_ROLLUP, LITE_TOOLS = "sqlite run_rollup", "sqlite tool_stats"
CACHE_ROLLUP, CACHE_TOOLS = "cache run_rollup", "cache tool_stats"
CACHE_TARGET_SECONDS, CACHE_ROLLUP_RATIO, CACHE_TOOLS_RATIO = 0.3, 10.0, 30.0
"""The cache's rollup: under 300 ms, at least 10x SQLite alone; its tool_stats at least 30x."""
SYNC_TARGET_SECONDS, FULL_SYNC_TARGET = 1.0, 10.0
"""An incremental sync after ``ADDED_STEPS`` new steps: under a second; the first full sync:
under ten direct-attach rollups."""
ADDED_STEPS = 10_000
VERSIONED = ("duckdb", "duckdb-extension-sqlite-scanner", "pyarrow")


@dataclass(frozen=True)
class Measured:
    built: Built
    samples: Samples
    threads: int
    sqlite_reps: int
    load: tuple[float, float]
    """The machine's 1-minute load average when the timing began and when it ended."""
    full_sync: float
    """The first sync of the cache: every table copied."""
    incremental_sync: float
    """The sync after ``added_steps`` new steps."""
    added_steps: int


def _arrow(analytics: Analytics, view: str) -> Any:
    return analytics.sql(f"SELECT * FROM {view}").to_arrow_table()


def measure(scale: Scale, tmp: Path) -> Measured:
    print(f"  building {scale.steps:,} steps in {scale.runs:,} runs ...", file=sys.stderr)
    built = build(tmp / "analytics.db", runs=scale.runs, steps=scale.steps)
    cache_file = tmp / "analytics.duckdb"
    cache_file.unlink(missing_ok=True)
    print("  the first sync of the cache ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    cached = Analytics.open(built.path, cache=cache_file)
    full_sync = time.perf_counter() - started
    with (
        cached,
        Analytics.open(built.path) as analytics,
        closing(sqlite_connect(built.path)) as conn,
    ):
        print("  comparing the answers ...", file=sys.stderr, flush=True)
        check_same_answers(analytics, conn)  # which warms both up, too
        check_same_answers(cached, conn)
        threads = int(analytics.sql("SELECT current_setting('threads')").fetchone()[0])
        duckdb_systems = {
            DUCK_ROLLUP: lambda: timed(lambda: _arrow(analytics, "run_rollup")),
            DUCK_ROLLUP_TUPLES: lambda: timed(lambda: analytics.run_rollup().fetchall()),
            DUCK_TREE: lambda: timed(lambda: _arrow(analytics, "run_tree")),
            DUCK_OWN: lambda: timed(lambda: _arrow(analytics, "run_own_usage")),
            DUCK_TOOLS: lambda: timed(lambda: _arrow(analytics, "tool_stats")),
            CACHE_ROLLUP: lambda: timed(lambda: _arrow(cached, "run_rollup")),
            CACHE_TOOLS: lambda: timed(lambda: _arrow(cached, "tool_stats")),
        }
        sqlite_systems = {
            LITE_ROLLUP: lambda: timed(lambda: sqlite_run_rollup(conn)),
            LITE_TOOLS: lambda: timed(lambda: sqlite_tool_stats(conn)),
        }
        print(f"  {scale.reps} repetitions ...", file=sys.stderr, flush=True)
        load = os.getloadavg()[0]
        samples = interleaved({**duckdb_systems, **sqlite_systems}, scale.sqlite_reps)
        more = interleaved(duckdb_systems, scale.reps - scale.sqlite_reps)
        for name, times in more.times.items():
            samples.times[name] += times
        ended = os.getloadavg()[0]
        print(f"  {ADDED_STEPS:,} more steps, then a sync ...", file=sys.stderr, flush=True)
        added = append(
            built.path, runs=ADDED_STEPS // 10, steps=ADDED_STEPS, seed=7, first_id=1 << 40
        )
        started = time.perf_counter()
        synced = cached.sync()
        incremental = time.perf_counter() - started
        if synced.full or synced.rows["step_executions"] != added:
            raise AssertionError(f"the sync after {added:,} new steps read {synced}")
    return Measured(
        built,
        samples,
        threads,
        scale.sqlite_reps,
        (load, ended),
        full_sync,
        incremental,
        added,
    )


def _target_notes(rollup: float, ratio: float, *, scaled: bool) -> list[str]:
    speed = f"SQLite alone / DuckDB for the rollup is {ratio:.2f}x"
    if ratio >= TARGET_RATIO:
        notes = [f"Target met: {speed} (≥ {TARGET_RATIO:.0f}x)."]
    else:
        short = TARGET_RATIO / ratio
        notes = [f"Target missed: {speed}, not ≥ {TARGET_RATIO:.0f}x ({short:.1f} times short)."]
    took = f"the DuckDB rollup takes {rollup:.2f} s"
    if rollup < TARGET_SECONDS:
        notes.append(f"Target met: {took} (< {TARGET_SECONDS:.0f} s).")
    else:
        over = rollup - TARGET_SECONDS
        notes.append(
            f"Target missed: {took}, {over:.2f} s ({over / TARGET_SECONDS:.0%}) over "
            f"{TARGET_SECONDS:.0f} s."
        )
    if scaled:
        notes.append("The targets are for 1,000,000 steps: run without --quick to check them.")
    return notes


def _cache_notes(measured: Measured) -> list[str]:
    """Each of the cache's targets, met or missed, with this run's figure."""
    samples = measured.samples
    rollup = samples.median(CACHE_ROLLUP)
    rollup_ratio = samples.ratio(LITE_ROLLUP, CACHE_ROLLUP)
    tools_ratio = samples.ratio(LITE_TOOLS, CACHE_TOOLS)
    checks = [
        (
            f"the cache's rollup takes {ms(rollup)}",
            rollup < CACHE_TARGET_SECONDS,
            f"< {ms(CACHE_TARGET_SECONDS)}",
        ),
        (
            f"SQLite alone / the cache's rollup is {rollup_ratio:.2f}x",
            rollup_ratio >= CACHE_ROLLUP_RATIO,
            f"≥ {CACHE_ROLLUP_RATIO:.0f}x",
        ),
        (
            f"SQLite alone / the cache's tool_stats is {tools_ratio:.2f}x",
            tools_ratio >= CACHE_TOOLS_RATIO,
            f"≥ {CACHE_TOOLS_RATIO:.0f}x",
        ),
        (
            f"the first full sync is {measured.full_sync / samples.median(DUCK_ROLLUP):.2f} "
            "direct rollups",
            measured.full_sync < FULL_SYNC_TARGET * samples.median(DUCK_ROLLUP),
            f"< {FULL_SYNC_TARGET:.0f}",
        ),
        (
            f"the sync after {measured.added_steps:,} new steps takes "
            f"{ms(measured.incremental_sync)}",
            measured.incremental_sync < SYNC_TARGET_SECONDS,
            f"< {SYNC_TARGET_SECONDS:.0f} s",
        ),
    ]
    notes = [
        f"Target {'met' if ok else 'missed'}: {what} ({target})." for what, ok, target in checks
    ]
    if not checks[3][1]:
        notes.append(WHY_FULL_SYNC)
    return notes


WHY_FULL_SYNC = (
    "Why the first full sync takes about ten direct rollups: it reads every column of every "
    "table through the SQLite scanner (a rollup reads only the columns it sums), writes them "
    "in DuckDB's compressed columns and computes the kept rollup once, all in one transaction; "
    "it is timed once, so the run's noise decides which side of ten it lands. Later syncs read "
    "only what changed."
)


def _versions() -> str:
    return ", ".join(f"{p} {_version(p)}" for p in VERSIONED)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _why(*, rollup: float, tree: float, own: float) -> str:
    """Why the rollup takes what it takes, read from DuckDB's profile of the views, with this
    run's figures."""
    return (
        "Why: `run_rollup` computes the run tree and each run's own usage once (materialized "
        f"CTEs): {ms(tree)} and {ms(own)} alone here, {(tree + own) / rollup:.0%} of the "
        "rollup's time. Most of it is reading the million step rows and the tool rows through "
        "`sqlite_scanner`, which decodes SQLite's records row by row as SQLite itself does, "
        "so a query over the attached file cannot be much more than a few times faster than "
        "SQLite's own, which answers from its indexes (`(run_id, step_index)`, `run_id`, "
        "`parent_run_id`). Reaching 10x needs the rows in DuckDB's columnar storage: export "
        "them (`agentledger export parquet`) and query the files, or copy the tables into a "
        "DuckDB database once for repeated questions."
    )


def _facts(scale: Scale, measured: Measured) -> list[str]:
    built, rows = measured.built, measured.built.rows
    capped = " (capped: its queries take seconds each)" if measured.sqlite_reps < scale.reps else ""
    return [
        f"DuckDB: {scale.reps} repetitions; SQLite: {measured.sqlite_reps}{capped}. DuckDB ran "
        f"with {measured.threads} threads, its default: the machine's cores. The machine's "
        f"load average was {measured.load[0]:.1f} when the timing began and "
        f"{measured.load[1]:.1f} when it ended (other work on a shared machine counts too).",
        "Checked before timing: both sides give the same answer for every run (all of "
        "`run_rollup`'s columns) and every tool (calls, errors, mean and percentiles within "
        "a relative 1e-9).",
        f"The synthetic ledger: {rows['conversations']:,} conversations, {rows['agent_runs']:,} "
        f"runs in {built.trees:,} trees (depth ≤ {built.max_depth}), "
        f"{rows['step_executions']:,} steps, {rows['tool_executions']:,} tool calls; "
        f"{built.path.stat().st_size / 1e6:,.0f} MB.",
        f"Versions: {_versions()}.",
    ]


def _rows(measured: Measured) -> list[Row]:
    built, samples = measured.built, measured.samples

    def median(name: str) -> str:
        return ms(samples.median(name))

    def ratio(numerator: str, denominator: str) -> str:
        return f"{samples.ratio(numerator, denominator):.2f}x"

    return [
        Row(
            f"building the ledger: {built.total_rows:,} rows "
            f"({built.total_rows / built.seconds:,.0f} rows/s)",
            f"{built.seconds:,.1f} s",
        ),
        Row("DuckDB: run_rollup, as Arrow (target < 2 s)", median(DUCK_ROLLUP), headline=True),
        Row("SQLite alone: run_rollup, fetchall()", median(LITE_ROLLUP)),
        Row(
            "run_rollup: SQLite / DuckDB (target ≥ 10x)",
            "",
            ratio(LITE_ROLLUP, DUCK_ROLLUP),
            headline=True,
        ),
        Row(
            "DuckDB: run_rollup, fetchall() (Python tuples, as SQLite's); SQLite / it",
            median(DUCK_ROLLUP_TUPLES),
            ratio(LITE_ROLLUP, DUCK_ROLLUP_TUPLES),
        ),
        Row("DuckDB: run_tree alone, as Arrow", median(DUCK_TREE)),
        Row("DuckDB: run_own_usage alone, as Arrow", median(DUCK_OWN)),
        Row("DuckDB: tool_stats, as Arrow", median(DUCK_TOOLS)),
        Row("SQLite alone: tool_stats, fetchall()", median(LITE_TOOLS)),
        Row("tool_stats: SQLite / DuckDB", "", ratio(LITE_TOOLS, DUCK_TOOLS), headline=True),
        Row(
            "cache: first full sync of the ledger; / one direct rollup (target < 10x)",
            ms(measured.full_sync),
            f"{measured.full_sync / samples.median(DUCK_ROLLUP):.2f}x",
            headline=True,
        ),
        Row("cache: run_rollup, as Arrow (target < 300 ms)", median(CACHE_ROLLUP), headline=True),
        Row(
            "run_rollup: SQLite / cache (target ≥ 10x); direct attach / cache",
            "",
            f"{ratio(LITE_ROLLUP, CACHE_ROLLUP)}; {ratio(DUCK_ROLLUP, CACHE_ROLLUP)}",
            headline=True,
        ),
        Row("cache: tool_stats, as Arrow", median(CACHE_TOOLS)),
        Row(
            "tool_stats: SQLite / cache (target ≥ 30x)",
            "",
            ratio(LITE_TOOLS, CACHE_TOOLS),
            headline=True,
        ),
        Row(
            f"cache: sync after {measured.added_steps:,} new steps (target < 1 s)",
            ms(measured.incremental_sync),
            headline=True,
        ),
    ]


def run(sizes: Sizes, tmp: Path) -> Section:
    scale = SCALES[sizes.name]
    print("analytics: DuckDB against SQLite alone ...", file=sys.stderr, flush=True)
    measured = measure(scale, tmp)
    samples = measured.samples
    rollup, tree, own = (samples.median(n) for n in (DUCK_ROLLUP, DUCK_TREE, DUCK_OWN))
    ratio = samples.ratio(LITE_ROLLUP, DUCK_ROLLUP)
    notes = _target_notes(rollup, ratio, scaled=scale.steps < 1_000_000)
    if ratio < TARGET_RATIO or rollup >= TARGET_SECONDS:
        notes.append(_why(rollup=rollup, tree=tree, own=own))
    notes += _cache_notes(measured)
    return Section(
        title="5. Analytics: DuckDB against SQLite alone",
        about=(
            f"A synthetic ledger of {scale.steps:,} steps in {scale.runs:,} runs (run trees up "
            "to depth 5, about ten steps a run, five tools and `spawn_subagent`), built once by "
            "bulk inserts on the real schema. DuckDB: `Analytics.open(path)` (the file attached "
            "read-only through `sqlite_scanner`), `SELECT * FROM run_rollup` and "
            "`SELECT * FROM tool_stats` materialized in full as Arrow tables "
            "(`to_arrow_table()`). SQLite alone: one query for each, the same columns, on the "
            "same file: recursive CTEs for the run tree and the ancestor closure, then inclusive "
            "sums; percentiles from `row_number()` and `count()` windows (`fetchall()`). "
            "The cache: `Analytics.open(path, cache=...)`, a copy of the tables in a DuckDB "
            "file, which also keeps `run_rollup`'s rows, brought up to date at each sync "
            "(its `run_rollup` and `run_tree` read them; its other views are the same SQL over "
            "the copy): its first sync timed once, then its queries interleaved with the "
            "others; then 10,000 more steps written and one incremental `sync()` timed. "
            "Interleaved repetitions, medians."
        ),
        rows=_rows(measured),
        notes=notes + _facts(scale, measured),
    )


def main() -> None:
    """``python -m bench.analytics [--quick | --full]``: section 5 alone, printed."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.analytics")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a ledger ten times smaller")
    size.add_argument("--full", action="store_true", help="more repetitions")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL if args.full else DEFAULT
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        section = run(sizes, Path(tmp))
    print("\n".join(section.render()))


if __name__ == "__main__":
    main()

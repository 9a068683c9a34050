"""Section 5: DuckDB's ``run_rollup`` and ``tool_stats`` against SQLite alone, directly and
through the analytics cache, on a synthetic ledger of a million steps (``bench/_synthetic.py``).

SQLite alone answers each view with one query of the same columns (:data:`SQLITE_RUN_ROLLUP`,
:data:`SQLITE_TOOL_STATS`); both answers are compared, every run and every tool, before
anything is timed.
"""

from __future__ import annotations

import math
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

from agentledger import Analytics

from ._common import Samples, Sizes, interleaved, ms, timed, x
from ._report import Row, Section, judged, ratio, seconds
from ._synthetic import append, build


class Scale(NamedTuple):
    """The synthetic ledger's size and the repetitions, per mode (SQLite's at most ``reps``:
    its queries take far longer than DuckDB's)."""

    steps: int
    runs: int
    reps: int
    sqlite_reps: int


SCALES = {
    "quick": Scale(100_000, 10_000, reps=3, sqlite_reps=3),
    "default": Scale(1_000_000, 100_000, reps=5, sqlite_reps=5),
    "full": Scale(1_000_000, 100_000, reps=9, sqlite_reps=5),
}
_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
)
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


TOLERANCES = {"wall_ms": 1.5}
"""Absolute tolerances: DuckDB's ``epoch_ms`` counts whole milliseconds, SQLite's
``julianday`` is a float of days."""


def _same(column: str, ours: Any, theirs: Any) -> bool:
    """Whether DuckDB's value is SQLite's (``path`` a list there, timestamps datetimes), floats
    within a relative 1e-9."""
    if isinstance(theirs, str) and column == "path":
        theirs = theirs.split(",")
    elif isinstance(theirs, str) and column.endswith("_at"):
        theirs = datetime.fromisoformat(theirs)
    if None in (ours, theirs) or (not isinstance(ours, float) and not isinstance(theirs, float)):
        return bool(ours == theirs)
    return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=TOLERANCES.get(column, 1e-9))


def differences(columns: Sequence[str], duckdb_rows: Any, sqlite_rows: Any) -> list[str]:
    """Where two answers with the same ``columns`` disagree, rows matched on the first column."""
    duck, lite = ({row[0]: row for row in rows} for rows in (duckdb_rows, sqlite_rows))
    found = [f"only in DuckDB: {key}" for key in duck.keys() - lite.keys()]
    found += [f"only in SQLite: {key}" for key in lite.keys() - duck.keys()]
    for key in duck.keys() & lite.keys():
        for column, ours, theirs in zip(columns, duck[key], lite[key], strict=True):
            if not _same(column, ours, theirs):
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
        if found := differences(columns, relation.fetchall(), cursor.fetchall()):
            raise AssertionError(
                f"{view}: SQLite alone no longer answers as DuckDB does ({len(found)} "
                f"differences, first {found[:5]}); update bench/analytics.py"
            )


ADDED_STEPS = 10_000
DUCK = {  # what is timed of DuckDB, on the attached file (and the cache's, "cache ...")
    "duckdb run_rollup": "SELECT * FROM run_rollup",
    "duckdb run_tree": "SELECT * FROM run_tree",
    "duckdb run_own_usage": "SELECT * FROM run_own_usage",
    "duckdb tool_stats": "SELECT * FROM tool_stats",
}
CACHED = ("duckdb run_rollup", "duckdb tool_stats")
LITE = {"sqlite run_rollup": SQLITE_RUN_ROLLUP, "sqlite tool_stats": SQLITE_TOOL_STATS}


@dataclass(frozen=True)
class Measured:
    scale: Scale
    rows: dict[str, int]
    """The synthetic ledger's rows per table."""
    build_seconds: float
    samples: Samples
    syncs: tuple[float, float]
    """The first sync of the cache (every table copied), and one after :data:`ADDED_STEPS`."""
    facts: str


def _timed_reads(direct: Analytics, cached: Analytics, conn: sqlite3.Connection) -> dict[str, Any]:
    """Each view read whole as Arrow (and ``run_rollup`` as Python tuples), on the attached
    file and in the cache; each SQLite query with ``fetchall()``: their timed callables."""
    views = [(n, direct, sql) for n, sql in DUCK.items()]
    views += [(n.replace("duckdb", "cache"), cached, DUCK[n]) for n in CACHED]
    reads: dict[str, Callable[[], float]] = {n: _arrow(a, q) for n, a, q in views}
    reads["duckdb tuples"] = lambda: timed(lambda: direct.run_rollup().fetchall())
    return reads | {n: _fetched(conn, q) for n, q in LITE.items()}


def _arrow(analytics: Analytics, sql: str) -> Callable[[], float]:
    return lambda: timed(lambda: analytics.sql(sql).to_arrow_table())


def _fetched(conn: sqlite3.Connection, sql: str) -> Callable[[], float]:
    return lambda: timed(lambda: conn.execute(sql).fetchall())


def measure(scale: Scale, tmp: Path) -> Measured:
    print(f"  building {scale.steps:,} steps in {scale.runs:,} runs ...", file=sys.stderr)
    built = build(tmp / "analytics.db", runs=scale.runs, steps=scale.steps)
    print("  the first sync of the cache ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    cached = Analytics.open(built.path, cache=tmp / "analytics.duckdb")
    full_sync = time.perf_counter() - started
    with cached, Analytics.open(built.path) as direct, closing(sqlite_connect(built.path)) as conn:
        print("  comparing the answers ...", file=sys.stderr, flush=True)
        check_same_answers(direct, conn)  # which warms both up, too
        check_same_answers(cached, conn)
        (threads,) = direct.sql("SELECT current_setting('threads')").fetchall()[0]
        reads = _timed_reads(direct, cached, conn)
        duck = {name: read for name, read in reads.items() if name not in LITE}
        print(f"  {scale.reps} repetitions ...", file=sys.stderr, flush=True)
        load = os.getloadavg()[0]
        samples = interleaved(reads, scale.sqlite_reps)
        for name, times in interleaved(duck, scale.reps - scale.sqlite_reps).times.items():
            samples.times[name] += times
        load_after = os.getloadavg()[0]
        print(f"  {ADDED_STEPS:,} more steps, then a sync ...", file=sys.stderr, flush=True)
        more = {"runs": ADDED_STEPS // 10, "steps": ADDED_STEPS, "seed": 7, "first_id": 1 << 40}
        added = append(built.path, **more)
        started = time.perf_counter()
        synced = cached.sync()
        incremental = time.perf_counter() - started
        if synced.full or synced.rows["step_executions"] != added:
            raise AssertionError(f"the sync after {added:,} new steps read {synced}")
    rows, packages = built.rows, ("duckdb", "duckdb-extension-sqlite-scanner", "pyarrow")
    facts = (
        f"DuckDB: {scale.reps} repetitions, SQLite: {scale.sqlite_reps}; DuckDB ran with {threads} "
        f"threads, its default: the machine's cores; the load average was {load:.1f} when the "
        f"timing began and {load_after:.1f} when it ended. The ledger: {rows['conversations']:,} "
        f"conversations, {rows['agent_runs']:,} runs in {built.trees:,} trees (depth ≤ "
        f"{built.max_depth}), {rows['step_executions']:,} steps, {rows['tool_executions']:,} tool "
        f"calls; {built.path.stat().st_size / 1e6:,.0f} MB. Versions: "
        + ", ".join(f"{p} {version(p)}" for p in packages)
        + "."
    )
    return Measured(scale, rows, built.seconds, samples, (full_sync, incremental), facts)


def report(measured: Measured) -> Section:
    samples, (full, later), built = measured.samples, measured.syncs, measured.build_seconds
    median, rate = samples.median, samples.ratio
    rollup, cache = median("duckdb run_rollup"), median("cache run_rollup")
    lite_over_cache = rate("sqlite run_rollup", "cache run_rollup")

    def over(name: str, top: str, bottom: str, target: str = "") -> Row:
        return ratio(name, rate(f"sqlite {top}", f"{bottom} {top}"), target, headline=True)

    rows = [
        Row(f"building the ledger: {sum(measured.rows.values()):,} rows", f"{built:,.1f} s"),
        seconds("DuckDB: run_rollup, as Arrow", rollup, "< 2 s", headline=True),
        seconds("SQLite alone: run_rollup, fetchall()", median("sqlite run_rollup")),
        over("run_rollup: SQLite / DuckDB", "run_rollup", "duckdb", "≥ 10x"),
        Row(
            "DuckDB: run_rollup, fetchall() (Python tuples, as SQLite's); SQLite / it",
            ms(median("duckdb tuples")),
            x(rate("sqlite run_rollup", "duckdb tuples")),
        ),
        seconds("DuckDB: run_tree alone, as Arrow", median("duckdb run_tree")),
        seconds("DuckDB: run_own_usage alone, as Arrow", median("duckdb run_own_usage")),
        seconds("DuckDB: tool_stats, as Arrow", median("duckdb tool_stats")),
        seconds("SQLite alone: tool_stats, fetchall()", median("sqlite tool_stats")),
        over("tool_stats: SQLite / DuckDB", "tool_stats", "duckdb"),
        Row(
            "cache: first full sync of the ledger; / one direct rollup (target < 10x)",
            ms(full),
            judged(x(full / rollup), full / rollup, "< 10x"),
            True,
        ),
        seconds("cache: run_rollup, as Arrow", cache, "< 300 ms", headline=True),
        Row(
            "run_rollup: SQLite / cache (target ≥ 10x); direct attach / cache",
            ratio=f"{judged(x(lite_over_cache), lite_over_cache, '≥ 10x')}; {x(rollup / cache)}",
            headline=True,
        ),
        seconds("cache: tool_stats, as Arrow", median("cache tool_stats")),
        over("tool_stats: SQLite / cache", "tool_stats", "cache", "≥ 30x"),
        seconds(f"cache: sync after {ADDED_STEPS:,} new steps", later, "< 1 s", headline=True),
    ]
    notes = [measured.facts]
    if measured.scale.steps < 1_000_000:
        notes.append("The targets are for 1,000,000 steps: run without --quick to check them.")
    return Section(
        "5. Analytics: DuckDB against SQLite alone",
        f"A synthetic ledger of {measured.scale.steps:,} steps in {measured.scale.runs:,} runs "
        "(run trees up to depth 5, about ten steps a run, five tools and `spawn_subagent`), "
        "built once by bulk inserts on the real schema. DuckDB: `Analytics.open(path)` (the "
        "file attached through `sqlite_scanner`), each view read whole as Arrow. SQLite alone: "
        "one query a view, the same columns (recursive CTEs, window functions), `fetchall()`. "
        "The cache: `Analytics.open(path, cache=...)`: its first sync timed once, its queries "
        f"interleaved with the others; then {ADDED_STEPS:,} more steps and one `sync()` timed. "
        "Checked before timing: both sides give the same answer for every run and tool.",
        rows,
        notes,
    )


def run(sizes: Sizes, tmp: Path) -> Section:
    print("analytics: DuckDB against SQLite alone ...", file=sys.stderr, flush=True)
    return report(measure(SCALES[sizes.name], tmp))

"""The analytics benchmark (``bench/analytics.py``) compares like with like: on a tiny synthetic
ledger, SQLite alone gives DuckDB's answers for every run and every tool, and the ledger itself
reads the synthetic rows. Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import duckdb
import pytest

from agentledger.analytics import Analytics
from agentledger.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import _synthetic, analytics  # noqa: E402 (after the path above)

RUNS, STEPS = 20, 200
SUMS = ["steps", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"]
SUMS += ["reasoning_tokens", "cost_usd", "unpriced_steps", "tool_calls", "tool_errors"]
ROLLUP_NUMBERS = ["depth", "own_step_ms", "inclusive_runs"]
ROLLUP_NUMBERS += [f"{side}_{name}" for side in ("exclusive", "inclusive") for name in SUMS]
TOOL_NUMBERS = ["calls", "errors", "error_rate", "mean_ms", "p50_ms", "p95_ms", "p99_ms"]
TOOL_NUMBERS += ["max_ms"]
LEDGER_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> _synthetic.Built:
    path = tmp_path_factory.mktemp("bench-analytics") / "ledger.db"
    return _synthetic.build(path, runs=RUNS, steps=STEPS)


def by_first_column(
    relation: duckdb.DuckDBPyRelation | sqlite3.Cursor, columns: list[str]
) -> dict[str, dict[str, object]]:
    names = [d[0] for d in relation.description]
    rows = relation.fetchall()
    return {row[0]: {c: row[names.index(c)] for c in columns} for row in rows}


def duckdb_answer(path: Path, view: str, columns: list[str]) -> dict[str, dict[str, object]]:
    with Analytics.open(path) as analytics:
        return by_first_column(analytics.sql(f"SELECT * FROM {view}"), columns)


def sqlite_answer(path: Path, query: str, columns: list[str]) -> dict[str, dict[str, object]]:
    conn = analytics.sqlite_connect(path)
    try:
        return by_first_column(conn.execute(query), columns)
    finally:
        conn.close()


def close(ours: object, theirs: object) -> bool:
    """Equal numbers, floats within a relative 1e-9; ``None`` (a cost nobody knows) only
    equals ``None``."""
    if ours is None or theirs is None:
        return ours is theirs
    return ours == pytest.approx(theirs, rel=1e-9)


def damaged_rows(ours: dict[str, object], theirs: dict[str, object]) -> dict[str, tuple]:
    return {c: (ours[c], theirs[c]) for c in ours if not close(ours[c], theirs[c])}


def test_the_builder_makes_the_steps_and_runs_asked_for_in_trees_down_to_depth_5(built):
    assert built.rows["step_executions"] == STEPS
    assert built.rows["agent_runs"] == RUNS
    assert built.max_depth == _synthetic.MAX_DEPTH
    assert built.rows["tool_executions"] > STEPS - RUNS  # a call or more per tool-calling step


def test_every_run_sits_one_level_below_its_parent_in_its_parents_tree(built):
    with sqlite3.connect(built.path) as conn:
        wrong = conn.execute(
            "SELECT c.id FROM agent_runs AS c JOIN agent_runs AS p ON p.id = c.parent_run_id "
            "WHERE c.depth <> p.depth + 1 OR c.root_run_id <> p.root_run_id"
        ).fetchall()
        roots = conn.execute(
            "SELECT count(*) FROM agent_runs WHERE parent_run_id IS NULL "
            "AND (root_run_id <> id OR depth <> 0)"
        ).fetchone()[0]
        spawned = conn.execute(
            "SELECT count(*) FROM tool_executions AS t JOIN agent_runs AS c "
            "ON c.id = t.child_run_id AND c.parent_run_id = t.run_id"
        ).fetchone()[0]
    assert (wrong, roots) == ([], 0)
    assert spawned == RUNS - built.trees  # every subagent run started by its parent's call


def test_the_synthetic_rows_keep_the_ledgers_formats_and_foreign_keys(built):
    with sqlite3.connect(built.path) as conn:
        stamps = conn.execute(
            "SELECT started_at FROM agent_runs UNION ALL SELECT finished_at FROM step_executions "
            "UNION ALL SELECT started_at FROM tool_executions"
        ).fetchall()
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        costs = conn.execute(
            "SELECT count(*) FILTER (WHERE cost_usd IS NULL AND message_id IS NOT NULL), "
            "count(*) FILTER (WHERE cost_usd IS NOT NULL) FROM step_executions"
        ).fetchone()
    assert all(LEDGER_TIME.fullmatch(stamp) for (stamp,) in stamps)
    assert all(costs), "some steps priced and some not"


def test_the_same_seed_builds_the_same_ledger(built, tmp_path):
    again = _synthetic.build(tmp_path / "again.db", runs=RUNS, steps=STEPS)
    query = "SELECT * FROM step_executions ORDER BY id"
    with sqlite3.connect(built.path) as first, sqlite3.connect(again.path) as second:
        assert first.execute(query).fetchall() == second.execute(query).fetchall()


def test_sqlite_alone_gives_duckdbs_run_rollup_for_every_run(built):
    duck = duckdb_answer(built.path, "run_rollup", ROLLUP_NUMBERS)
    lite = sqlite_answer(built.path, analytics.SQLITE_RUN_ROLLUP, ROLLUP_NUMBERS)
    assert duck.keys() == lite.keys()
    assert len(duck) == RUNS
    for run_id, numbers in duck.items():
        assert damaged_rows(lite[run_id], numbers) == {}, run_id
    assert any(row["inclusive_cost_usd"] is None for row in duck.values())
    assert any(row["inclusive_unpriced_steps"] for row in duck.values())


def test_sqlite_alone_gives_duckdbs_run_tree_columns(built):
    columns = ["root_run_id", "parent_run_id", "path", "agent_path", "wall_ms"]
    duck = duckdb_answer(built.path, "run_rollup", columns)
    lite = sqlite_answer(built.path, analytics.SQLITE_RUN_ROLLUP, columns)
    for run_id, row in duck.items():
        theirs = lite[run_id]
        assert theirs["path"].split(",") == row["path"]
        assert (theirs["root_run_id"], theirs["parent_run_id"], theirs["agent_path"]) == (
            row["root_run_id"],
            row["parent_run_id"],
            row["agent_path"],
        )
        if row["wall_ms"] is None:  # still running
            assert theirs["wall_ms"] is None
        else:  # DuckDB's epoch_ms counts whole milliseconds
            assert theirs["wall_ms"] == pytest.approx(row["wall_ms"], abs=1.5)


def test_sqlite_alone_gives_duckdbs_tool_stats_for_every_tool(built):
    duck = duckdb_answer(built.path, "tool_stats", TOOL_NUMBERS)
    lite = sqlite_answer(built.path, analytics.SQLITE_TOOL_STATS, TOOL_NUMBERS)
    assert duck.keys() == {tool.name for tool in _synthetic.TOOLS} | {_synthetic.SPAWN}
    assert lite.keys() == duck.keys()
    for tool, numbers in duck.items():
        assert damaged_rows(lite[tool], numbers) == {}, tool


def test_the_ledger_reads_the_same_inclusive_usage_from_the_synthetic_rows(built):
    rollup = duckdb_answer(
        built.path,
        "run_rollup",
        ["inclusive_input_tokens", "inclusive_output_tokens", "inclusive_cost_usd", "depth"],
    )
    with Ledger.open(built.path, migrate=False) as ledger:
        for run_id, row in rollup.items():
            spend = ledger.run_tree(run_id).inclusive
            assert spend.usage.input_tokens == row["inclusive_input_tokens"]
            assert spend.usage.output_tokens == row["inclusive_output_tokens"]
            assert close(spend.cost_usd, row["inclusive_cost_usd"]), run_id


@pytest.mark.parametrize(
    "durations",
    [
        [7.0],
        [1.0, 2.0],
        [3.0, 1.0, 2.0],
        [5.0, 5.0, 5.0, 1.0],
        [float(n * n % 17) for n in range(1, 101)],
        [0.5 * n for n in range(1, 1001)],
    ],
    ids=["one", "two", "three", "ties", "hundred", "thousand"],
)
def test_the_sqlite_percentiles_interpolate_as_duckdbs_quantile_cont(durations):
    sqlite = sqlite3.connect(":memory:")
    sqlite.execute("CREATE TABLE tool_executions (tool_name, is_error, duration_ms)")
    sqlite.executemany(
        "INSERT INTO tool_executions VALUES ('t', ?, ?)",
        [(n % 3 == 0, d) for n, d in enumerate(durations)],
    )
    names = [d[0] for d in sqlite.execute(analytics.SQLITE_TOOL_STATS).description]
    ours = dict(zip(names, sqlite.execute(analytics.SQLITE_TOOL_STATS).fetchone(), strict=True))
    expected = duckdb.sql(
        "SELECT quantile_cont(d, 0.5), quantile_cont(d, 0.95), quantile_cont(d, 0.99) "
        "FROM (SELECT unnest($durations) AS d)",
        params={"durations": durations},
    ).fetchone()
    assert (ours["p50_ms"], ours["p95_ms"], ours["p99_ms"]) == pytest.approx(expected, rel=1e-12)


def test_the_benchmarks_own_check_finds_a_wrong_answer():
    columns = ["run_id", "inclusive_cost_usd", "path"]
    same = analytics.differences(columns, [("r", 0.1 + 0.2, ["r"])], [("r", 0.3, "r")])
    wrong = analytics.differences(columns, [("r", 0.3, ["r"])], [("r", 0.31, "r")])
    missing = analytics.differences(columns, [("r", 0.3, ["r"])], [])
    assert (same, len(wrong), missing) == ([], 1, ["only in DuckDB: r"])


def test_the_cache_answers_as_sqlite_alone_and_a_sync_reads_exactly_the_appended_steps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    _synthetic.build(path, runs=RUNS, steps=STEPS)
    cache = tmp_path / "ledger.duckdb"
    with Analytics.open(path, cache=cache) as cached:
        added = _synthetic.append(path, runs=5, steps=50, seed=7, first_id=1 << 40)
        synced = cached.sync()
        assert not synced.full and synced.rows["step_executions"] == added == 50
        with closing(sqlite3.connect(path)) as conn:
            analytics.check_same_answers(cached, conn)

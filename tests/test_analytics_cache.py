"""The analytics cache: a DuckDB copy of the ledger, synced from the ledger's change stamps.

After every kind of change (new runs, random subagent trees, failed, running and interrupted
runs, compactions, rows deleted with SQL; runs re-parented, renamed, cut loose or deleted and
steps moved between runs with SQL) the views over the copy give exactly what the views over the
ledger itself give, and the copied tables hold the ledger's rows; on SQLite and PostgreSQL.
The cache's ``run_rollup`` and ``run_tree`` read the rollup's rows kept at each sync. A sync
that fails or dies midway leaves the previous copy, and the next completes it. A cache of
another ledger, an older revision or an older layout is rebuilt; a newer one, a file that is
not DuckDB's, and a cache another process holds are clear errors.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from agentledger import AgentBuilder, AgentStatus
from agentledger.analytics import Analytics, SyncResult
from agentledger.analytics._analytics import view_files
from agentledger.analytics._cache import STAMPED
from agentledger.analytics._rollup import TABLE as KEPT_ROLLUP
from agentledger.cli import cli
from agentledger.errors import LedgerBusyError, LedgerOpenError, SchemaVersionError
from agentledger.ledger import Ledger
from agentledger.ledger.migrate import head
from support.databases import SQLITE_UNLESS_SOAK
from support.interrupted import agent_on, begin, step, stream_shown, tool_step_then_answer
from support.sizes import SOAK, size
from support.subagents import Database, Router, Script, prompt
from test_analytics import Node, check, record_compacted, record_team, spec_and_scripts, trees

VIEWS = sorted(
    {name for _, sql in view_files() for name in re.findall(r"CREATE OR REPLACE VIEW (\w+)", sql)}
)
TABLES = (*STAMPED, "execution_buffer_rows", "forget_log")
ALL_VIEWS = (*VIEWS, "usage_over_time('hour')")
KEPT_VIEWS = ("run_tree", "run_rollup")
"""The views a cache answers from rows it keeps (:data:`KEPT_ROLLUP`): every other view is the
same SQL over the tables, so with the tables equal and these two equal, every view is."""


def _rows(analytics: Analytics, query: str) -> list[tuple[Any, ...]]:
    return sorted(analytics.sql(query).fetchall(), key=repr)


def _summed(value: Any) -> Any:
    """``value`` with its floats to 12 significant digits: DuckDB sums floats in whatever
    order its threads meet the rows, so the last bits of a sum differ from query to query."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, list | tuple):
        return [_summed(v) for v in value]
    if isinstance(value, dict):
        return {k: _summed(v) for k, v in value.items()}
    return value


def _view(analytics: Analytics, query: str) -> list[Any]:
    return sorted((_summed(row) for row in analytics.sql(query).fetchall()), key=repr)


def assert_same(url: str, cache: Path, views: Sequence[str] = ALL_VIEWS) -> SyncResult:
    """Open the cache (which syncs it), then compare every table of it and ``views`` (every
    view unless told) with the ledger itself (:func:`compare`)."""
    with Analytics.open(url) as direct, Analytics.open(url, cache=cache) as cached:
        return compare(direct, cached, views)


def compare(direct: Analytics, cached: Analytics, views: Sequence[str] = ALL_VIEWS) -> SyncResult:
    """Every table of the cache and ``views`` (every view unless told) against the ledger itself:
    the tables exactly, the views up to the order floats are summed in; the cache's last sync."""
    for view in views:
        query = f"SELECT * FROM {view}"
        assert _view(cached, query) == _view(direct, query), view
    for table in TABLES:
        query = f"SELECT CAST(COLUMNS(*) AS VARCHAR) FROM ledger.{table}"
        assert _rows(cached, query) == _rows(direct, query), table
    assert cached.last_sync is not None
    return cached.last_sync


class Mirror:
    """A ledger read directly and through a cache, both kept open as a long-lived process keeps
    them: each :meth:`check` syncs the cache, then compares the two (the tables and the
    :data:`KEPT_VIEWS`; :meth:`check_all`, every view too)."""

    def __init__(self, url: str, cache: Path) -> None:
        self.direct = Analytics.open(url)
        self.cached = Analytics.open(url, cache=cache)

    def check(self) -> SyncResult:
        self.cached.sync()
        return compare(self.direct, self.cached, KEPT_VIEWS)

    def check_all(self) -> SyncResult:
        self.cached.sync()
        return compare(self.direct, self.cached)

    def close(self) -> None:
        self.cached.close()
        self.direct.close()


def _agent(ledger: Ledger) -> Any:
    return agent_on(ledger, tool_step_then_answer())


# --- every kind of change ---------------------------------------------------------------------


@SQLITE_UNLESS_SOAK  # the sync of each kind of change on PostgreSQL: the tests below
def test_the_copy_gives_the_same_views_as_the_ledger_after_every_kind_of_change(
    db_url: str, tmp_path: Path
) -> None:
    record_team(db_url)  # subagent trees, tools, unpriced steps, over two days
    first = assert_same(db_url, tmp_path / "ledger.duckdb", KEPT_VIEWS)  # opening it syncs it
    assert first.full and first.reason == "a new cache"
    mirror = Mirror(db_url, tmp_path / "ledger.duckdb")  # then kept open, synced after each
    try:
        changed_every_way(db_url, mirror)
        mirror.check_all()
    finally:
        mirror.close()


def changed_every_way(db_url: str, mirror: Mirror) -> None:
    """The ledger changed in every way it can change, the cache synced and compared after each."""
    assert mirror.check().rows["step_executions"] == 0  # nothing changed: none read

    with Ledger.open(db_url) as ledger:
        # a run begun and stepped: running, with buffer rows and a partial answer shown
        agent = _agent(ledger)
        running = step(agent, ledger.recorder, begin(agent, ledger.recorder))
        stream_shown(ledger.recorder, running)
        update = mirror.check()
        assert not update.full and update.rows["step_executions"] == 1
        # it fails: its status, error and totals change; its buffer stays
        ledger.recorder.fail_run(running, "the model went away")
        mirror.check()
        # a new run that finishes: its buffer flushed, the conversation's version raised
        assert _agent(ledger).run("And tomorrow?").status is AgentStatus.COMPLETED
        mirror.check()
        # a run whose process died mid-answer, then marked interrupted by recovery
        agent = _agent(ledger)
        cut = step(agent, ledger.recorder, begin(agent, ledger.recorder))
        stream_shown(ledger.recorder, cut)
    with Ledger.open(db_url) as ledger:
        ledger.recover(stale_after=0)
    mirror.check()

    record_compacted(db_url)  # masking, summaries (one failed), messages taken out of context
    mirror.check()

    with Database(db_url) as db, db.engine.begin() as conn:  # rows deleted with SQL go too
        conn.execute(text("DELETE FROM context_compactions WHERE status = 'failed'"))
        conn.execute(text("DELETE FROM tool_executions WHERE is_error"))
    deleted = mirror.check()
    assert deleted.deleted["context_compactions"] >= 1 and deleted.deleted["tool_executions"] >= 1

    with Database(db_url) as db, db.engine.begin() as conn:  # runs moved with SQL
        parent, child = conn.execute(
            text("SELECT parent_run_id, id FROM agent_runs WHERE depth = 1 ORDER BY id")
        ).first() or pytest.fail("no subagent run")
        other = conn.execute(
            text("SELECT id FROM agent_runs WHERE parent_run_id IS NULL AND id <> :parent"),
            {"parent": parent},
        ).scalar()
        conn.execute(text(EDITS["re-parent"][0]), {"run": child, "other": other})
        conn.execute(text(EDITS["rename"][0]), {"run": other})
    mirror.check()
    if db_url.startswith("sqlite"):  # a run deleted from above its subagent runs
        with Database(db_url) as db, db.engine.begin() as conn:
            conn.execute(text(EDITS["delete a run"][0]), {"run": other})
        assert mirror.check().deleted["agent_runs"] == 1


# --- random subagent trees ---------------------------------------------------------------------


@pytest.fixture
def growing(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Ledger, Mirror]]:
    """One ledger the examples add to, and its cache kept open and synced after each."""
    with Ledger.open(db_url, synchronous="NORMAL") as ledger:
        mirror = Mirror(db_url, tmp_path / "trees.duckdb")
        try:
            yield db_url, ledger, mirror
            mirror.check_all()  # after the last example: every view
        finally:
            mirror.close()


EDITS = {
    # a run moved under another run (its subtree with it; under one of its own descendants or
    # itself it leaves every tree, as a cycle of parents is in none)
    "re-parent": ["UPDATE agent_runs SET parent_run_id = :other WHERE id = :run"],
    "cut loose": ["UPDATE agent_runs SET parent_run_id = NULL WHERE id = :run"],
    "rename": ["UPDATE agent_runs SET agent_name = agent_name || ' renamed' WHERE id = :run"],
    "move a step": [
        "UPDATE step_executions SET run_id = CAST(:other AS VARCHAR), step_index = 1 + (SELECT "
        "coalesce(max(step_index), 0) FROM step_executions WHERE run_id = CAST(:other AS VARCHAR)) "
        "WHERE id = :step"
    ],
    "drop tool calls": ["DELETE FROM tool_executions WHERE run_id = :run"],
    # its children keep a parent row that is gone, and root trees of their own (SQLite only:
    # PostgreSQL enforces the foreign key, as SQLite does for the ledger's own connections)
    "delete a run": ["DELETE FROM agent_runs WHERE id = :run"],
}
edits = st.lists(
    st.tuples(st.sampled_from(sorted(EDITS)), st.integers(0, 10**6), st.integers(0, 10**6)),
    max_size=3,
)


def edit(url: str, picked: list[tuple[str, int, int]]) -> None:
    """Apply the ``picked`` edits with SQL, each on runs and a step chosen by the integers."""
    with Database(url) as db, db.engine.begin() as conn:
        for name, one, other in picked:
            if name == "delete a run" and db.engine.dialect.name != "sqlite":
                continue
            runs = list(conn.execute(text("SELECT id FROM agent_runs ORDER BY id")).scalars())
            steps = list(conn.execute(text("SELECT id FROM step_executions ORDER BY id")).scalars())
            chosen = {
                "run": runs[one % len(runs)],
                "other": runs[other % len(runs)],
                "step": steps[other % len(steps)],
            }
            for statement in EDITS[name]:
                conn.execute(text(statement), chosen)


@settings(
    max_examples=size(3, 20),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tree=trees(), picked=edits)
def test_the_copy_follows_random_run_trees_one_sync_after_another(
    growing: tuple[str, Ledger, Mirror], tree: Node, picked: list[tuple[str, int, int]]
) -> None:
    url, ledger, mirror = growing
    scripts: dict[str, Script] = {}
    spec = spec_and_scripts(tree, "root", scripts)
    result = (
        AgentBuilder()
        .with_llm(Router(dict(scripts)))
        .with_name("root")
        .with_system_prompt(prompt("root"))
        .with_tools([check])
        .with_subagents(spec.subagents)
        .with_max_steps(None)
        .with_ledger(ledger)
        .build()
        .run("Go.")
    )
    assert result.status is AgentStatus.COMPLETED
    synced = mirror.check()
    assert synced.rows["step_executions"] == sum(node.steps for node in tree.walk()) or synced.full
    if picked:
        edit(url, picked)
        assert not mirror.check().full


def test_export_parquet_from_the_copy_writes_what_the_ledger_itself_gives(
    db_url: str, tmp_path: Path
) -> None:
    record_team(db_url)
    with Analytics.open(db_url) as direct:
        from_ledger = direct.export_parquet(tmp_path / "direct")
    with Analytics.open(db_url, cache=tmp_path / "ledger.duckdb") as cached:
        from_copy = cached.export_parquet(tmp_path / "cached")
    assert [p.relative_to(tmp_path / "direct") for p in from_ledger] == [
        p.relative_to(tmp_path / "cached") for p in from_copy
    ]
    with duckdb.connect() as conn:
        for one, other in zip(from_ledger, from_copy, strict=True):
            query = "SELECT * FROM read_parquet(?) ORDER BY ALL"
            assert (
                conn.execute(query, [str(one)]).fetchall()
                == conn.execute(query, [str(other)]).fetchall()
            ), one


# --- the rollup kept in the cache ----------------------------------------------------------------


def test_the_cache_keeps_the_rollup_and_its_views_read_it(db_url: str, tmp_path: Path) -> None:
    cache = tmp_path / "ledger.duckdb"
    record_team(db_url)
    assert_same(db_url, cache, KEPT_VIEWS)
    with Analytics.open(db_url) as direct, Analytics.open(db_url, cache=cache) as cached:
        kept = _view(cached, f"SELECT * FROM ledger.{KEPT_ROLLUP}")
        assert kept == _view(direct, "SELECT * FROM run_rollup") and kept
        for view in ("run_rollup", "run_tree"):
            (sql,) = cached.sql(
                f"SELECT sql FROM duckdb_views() WHERE view_name = '{view}'"
            ).fetchall()[0]
            plan = str(cached.sql(f"EXPLAIN SELECT * FROM {view}").fetchall())
            assert KEPT_ROLLUP in sql and "RECURSIVE" not in plan, view
        tables = _rows(
            cached, "SELECT table_name FROM duckdb_tables() WHERE database_name = 'ledger'"
        )
        assert sorted(t for (t,) in tables) == sorted(
            [*TABLES, "agentledger_version", "agentledger_cache", KEPT_ROLLUP]
        )


def test_a_cache_of_an_older_layout_is_rebuilt_with_the_rollup_and_says_so(
    tmp_path: Path,
) -> None:
    url, cache = f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "ledger.duckdb"
    with Ledger.open(url) as ledger:
        _agent(ledger).run("Hello.")
    assert_same(url, cache, KEPT_VIEWS)
    with duckdb.connect(str(cache)) as conn:  # as the first layout left it: no rollup kept
        conn.execute(f"DROP TABLE {KEPT_ROLLUP}")
        conn.execute("UPDATE agentledger_cache SET format = 1")
    rebuilt = assert_same(url, cache)
    assert rebuilt.full and rebuilt.reason == (
        "the cache was written in an older layout (format 1, now 3); rebuilding it"
    )
    assert not assert_same(url, cache, KEPT_VIEWS).full
    with duckdb.connect(str(cache)) as conn:  # as the second left it: no scope recorded
        conn.execute("ALTER TABLE agentledger_cache DROP COLUMN tenant_id")
        conn.execute("ALTER TABLE agentledger_cache DROP COLUMN owner_id")
        conn.execute("UPDATE agentledger_cache SET format = 2")
    rebuilt = assert_same(url, cache)
    assert rebuilt.full and rebuilt.reason == (
        "the cache was written in an older layout (format 2, now 3); rebuilding it"
    )


# --- a sync that fails or dies midway -----------------------------------------------------------


def _snapshot(cache: Path) -> dict[str, list[tuple[Any, ...]]]:
    with duckdb.connect(str(cache), read_only=True) as conn:
        return {
            t: sorted(conn.sql(f"SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {t}").fetchall(), key=repr)
            for t in (*TABLES, "agentledger_cache", KEPT_ROLLUP)
        }


class Stop(Exception):
    pass


def test_a_sync_that_raises_midway_leaves_the_previous_copy_and_the_next_completes_it(
    db_url: str, tmp_path: Path
) -> None:
    cache = tmp_path / "ledger.duckdb"
    record_team(db_url)
    assert_same(db_url, cache, KEPT_VIEWS)
    before = _snapshot(cache)
    record_compacted(db_url)

    def stop_at_third(line: str) -> None:
        if "[3/" in line:
            raise Stop(line)

    # a cache of an older revision is copied in full, with progress: stop it midway
    with duckdb.connect(str(cache)) as conn:
        conn.execute("UPDATE agentledger_cache SET revision = '0007'")
    before["agentledger_cache"] = _snapshot(cache)["agentledger_cache"]
    with pytest.raises(Stop):
        Analytics.open(db_url, cache=cache, progress=stop_at_third)
    assert _snapshot(cache) == before
    rebuilt = assert_same(db_url, cache)
    assert rebuilt.full and "older than" in (rebuilt.reason or "")


CRASHING_SYNC = """
import os, sys
from agentledger.analytics import Analytics

def die(line):
    if sys.argv[3] in line:
        os._exit(3)  # no rollback, no close: as if the process were killed

Analytics.open(sys.argv[1], cache=sys.argv[2], progress=die)
"""


KILLED_AT = ("[5/", "the run rollup")
"""Where a sync is killed: as it copies the fifth table, or as it builds the rollup. Both on
both backends in ``make soak``; in ``make test`` one on each (:func:`killed_at`)."""


def killed_at(at: str, url: str) -> str:
    return at if at in KILLED_AT else KILLED_AT[url.startswith("postgresql")]


@pytest.mark.parametrize("at", KILLED_AT if SOAK else ("one point a backend",))
def test_a_sync_killed_midway_leaves_the_previous_copy_and_the_next_completes_it(
    db_url: str, tmp_path: Path, at: str
) -> None:
    at = killed_at(at, db_url)
    cache = tmp_path / "ledger.duckdb"
    record_team(db_url)
    assert_same(db_url, cache, KEPT_VIEWS)
    before = _snapshot(cache)
    with Ledger.open(db_url) as ledger:
        _agent(ledger).run("Once more.")
    with duckdb.connect(str(cache)) as conn:  # a full copy, so that progress is reported
        conn.execute("UPDATE agentledger_cache SET ledger_id = 'another ledger'")
    before["agentledger_cache"] = _snapshot(cache)["agentledger_cache"]
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASHING_SYNC), db_url, str(cache), at],
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 3, child.stderr
    assert _snapshot(cache) == before
    rebuilt = assert_same(db_url, cache)
    assert rebuilt.full and "another ledger" in (rebuilt.reason or "")


# --- which cache, and clear errors ----------------------------------------------------------------


def test_a_cache_of_another_ledger_is_rebuilt_and_says_so(tmp_path: Path) -> None:
    cache = tmp_path / "ledger.duckdb"
    one, other = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'other.db'}"
    for url in (one, other):
        with Ledger.open(url) as ledger:
            _agent(ledger).run("Hello.")
    assert_same(one, cache, KEPT_VIEWS)
    said: list[str] = []
    with Analytics.open(other, cache=cache, progress=said.append) as analytics:
        assert analytics.last_sync is not None and analytics.last_sync.full
    assert "another ledger" in said[0]
    assert not assert_same(other, cache).full


def test_a_cache_written_by_a_newer_agentledger_is_refused(tmp_path: Path) -> None:
    url, cache = f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "ledger.duckdb"
    with Ledger.open(url) as ledger:
        _agent(ledger).run("Hello.")
    assert_same(url, cache, KEPT_VIEWS)
    with duckdb.connect(str(cache)) as conn:
        conn.execute("UPDATE agentledger_cache SET revision = '9999'")
    with pytest.raises(SchemaVersionError, match="newer agentledger") as raised:
        Analytics.open(url, cache=cache)
    assert head() in str(raised.value) and "9999" in str(raised.value)


def test_a_cache_file_that_is_not_duckdb_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    url, cache = f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "notes.txt"
    Ledger.open(url).close()
    cache.write_text("my notes, not a cache\n" * 100)
    with pytest.raises(LedgerOpenError, match="cannot be opened as a DuckDB database"):
        Analytics.open(url, cache=cache)
    assert cache.read_text() == "my notes, not a cache\n" * 100


HOLDER = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(60)
"""


def test_a_cache_another_process_holds_is_a_clear_busy_error(tmp_path: Path) -> None:
    url, cache = f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "ledger.duckdb"
    Ledger.open(url).close()
    assert_same(url, cache)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(LedgerBusyError, match="in use by another process"):
            Analytics.open(url, cache=cache)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_sync_without_a_cache_says_how_to_open_one(tmp_path: Path) -> None:
    from agentledger.errors import ConfigurationError

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger.open(url).close()
    with Analytics.open(url) as analytics, pytest.raises(ConfigurationError, match="cache="):
        analytics.sync()


def test_sync_reads_what_changed_since_open(tmp_path: Path) -> None:
    url, cache = f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "ledger.duckdb"
    with Ledger.open(url) as ledger, Analytics.open(url, cache=cache) as analytics:
        assert analytics.run_rollup().fetchall() == []
        _agent(ledger).run("Hello.")
        synced = analytics.sync()
        assert not synced.full and synced.rows["step_executions"] == 2
        assert len(analytics.run_rollup().fetchall()) == 1


# --- the command line -----------------------------------------------------------------------------


def test_analytics_sync_copies_with_progress_then_updates(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        _agent(ledger).run("Hello.")
    cache = tmp_path / "copy.duckdb"
    runner = CliRunner()
    first = runner.invoke(cli, ["--db", str(path), "analytics", "sync", "--cache", str(cache)])
    assert first.exit_code == 0, first.output
    assert "copying the ledger into the cache: a new cache" in first.stderr
    assert "[4/9] step_executions: 2 rows" in first.stderr
    assert "copied in full (a new cache)" in first.stdout
    with Ledger.open(path) as ledger:
        _agent(ledger).run("Again.")
    again = runner.invoke(cli, ["--db", str(path), "analytics", "sync", "--cache", str(cache)])
    assert again.exit_code == 0, again.output
    assert "updated:" in again.stdout and again.stderr == ""
    report = runner.invoke(
        cli, ["--db", str(path), "analytics", "report", "--cache", str(cache), "--json"]
    )
    assert report.exit_code == 0, report.output
    assert '"table": "runs"' in report.stdout
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not duckdb")
    refused = runner.invoke(cli, ["--db", str(path), "analytics", "sync", "--cache", str(bad)])
    assert refused.exit_code == 1
    assert "cannot be opened as a DuckDB database" in refused.output

"""The benchmarks that run in one process (``bench/steps.py``, ``bench/analytics.py``,
``bench/startup.py``, ``bench/statements.py``, ``bench/streaming.py``), and the viewer's with
its server and browser (``bench/viewer.py``), run end to end at a tiny size: every system
measured does the work it is held to (checked in SQL), the floors and SQLite-alone queries
answer what agentledger answers, and each report gives its figures with its targets judged.
Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import sqlite3
import sys
from contextlib import closing

import duckdb
import pytest

from agentledger import Analytics
from agentledger.ledger import Ledger, LedgerReader
from bench import _raw, _synthetic, analytics, startup, statements, steps, streaming, viewer
from bench._common import Samples
from bench._report import Section
from bench._versions import THIS, Version, this_version
from support.browser import REQUIRE_BROWSER_VARIABLE, browser_required
from support.cli import record_a_run

pytestmark = pytest.mark.bench  # `make test-bench`, not `make test`

RATIO = re.compile(r"^\*{0,2}(\d+\.\d\d)x(, (met|missed))?\*{0,2}$")
RUNS, STEPS = 20, 200


def cells(section: Section) -> dict[str, tuple[str, str]]:
    return {row.measure: (row.median, row.ratio) for row in section.rows}


def ratios(section: Section) -> list[float]:
    found = [RATIO.match(row.ratio) for row in section.rows if row.ratio]
    assert all(found), [row.ratio for row in section.rows]
    return [float(match.group(1)) for match in found if match]


def test_the_loop_and_a_steps_write_are_measured_against_their_floors(tmp_path):
    plan = steps.Plan(loop_turns=2, loop_reps=1, step_reps=1)
    loop, step = steps.run_plan(plan, tmp_path)
    assert "agent loop / bare loop, per step" in cells(loop)
    assert {
        "FULL: agentledger / raw messages, per step",
        "NORMAL: agentledger / raw messages, per step",
    } <= cells(step).keys()
    assert all(r > 0 for r in ratios(loop) + ratios(step))
    assert cells(step)["200-step run on a SQLite ledger: last / tenth (target ≤ 1.2x)"][1].endswith(
        ("met", "missed")
    )


def test_the_raw_floor_writes_a_turns_messages_and_usage_in_its_transactions(tmp_path):
    raw = _raw.RawMessages(tmp_path / "raw.db", "NORMAL")
    conversation = raw.run("first", None, 3, 1)
    assert raw.run("second", conversation, 3, 1) == conversation
    raw.close()
    with closing(sqlite3.connect(tmp_path / "raw.db")) as conn:
        roles = conn.execute("SELECT role, count(*) FROM messages GROUP BY role ORDER BY role")
        assert roles.fetchall() == [("assistant", 8), ("tool", 6), ("user", 2)]
        assert conn.execute("SELECT count(*) FROM usage").fetchone() == (8,)
        seqs = [s for (s,) in conn.execute("SELECT seq FROM messages ORDER BY seq")]
    assert seqs == list(range(16))


def test_the_raw_load_reads_what_the_ledger_loads(tmp_path):
    path = tmp_path / "ledger.db"
    recorded = record_a_run(str(path))
    with Ledger.open(path) as ledger, closing(sqlite3.connect(path)) as conn:
        state = ledger.recorder.load_conversation(recorded.conversation_id)
        loaded = sum(len(messages) for messages in state.store.sections.values())
        assert _raw.raw_load(conn, recorded.conversation_id) == loaded == 2


# -- analytics ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> _synthetic.Built:
    return _synthetic.build(tmp_path_factory.mktemp("bench") / "ledger.db", runs=RUNS, steps=STEPS)


def test_the_synthetic_ledger_holds_run_trees_down_to_depth_5_in_the_ledgers_formats(built):
    assert (built.rows["step_executions"], built.rows["agent_runs"]) == (STEPS, RUNS)
    assert built.max_depth == _synthetic.MAX_DEPTH
    with closing(sqlite3.connect(built.path)) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        spawned = conn.execute(
            "SELECT count(*) FROM tool_executions AS t JOIN agent_runs AS c "
            "ON c.id = t.child_run_id AND c.parent_run_id = t.run_id AND c.depth = 1 + "
            "(SELECT depth FROM agent_runs WHERE id = t.run_id)"
        ).fetchone()[0]
    assert spawned == RUNS - built.trees  # every subagent run started by its parent's call
    with Ledger.open(built.path, migrate=False) as ledger:
        assert ledger.verify() == []


def test_sqlite_alone_answers_as_duckdb_and_its_cache_even_after_a_sync(built, tmp_path):
    with (
        Analytics.open(built.path) as direct,
        closing(analytics.sqlite_connect(built.path)) as conn,
    ):
        analytics.check_same_answers(direct, conn)
    path = tmp_path / "ledger.db"
    _synthetic.build(path, runs=RUNS, steps=STEPS)
    with Analytics.open(path, cache=tmp_path / "cache.duckdb") as cached:
        added = _synthetic.append(path, runs=5, steps=50, seed=7, first_id=1 << 40)
        synced = cached.sync()
        assert not synced.full and synced.rows["step_executions"] == added == 50
        with closing(sqlite3.connect(path)) as conn:
            analytics.check_same_answers(cached, conn)


def test_the_answers_check_finds_a_wrong_answer():
    columns = ["run_id", "inclusive_cost_usd", "path"]
    same = analytics.differences(columns, [("r", 0.1 + 0.2, ["r"])], [("r", 0.3, "r")])
    wrong = analytics.differences(columns, [("r", 0.3, ["r"])], [("r", 0.31, "r")])
    missing = analytics.differences(columns, [("r", 0.3, ["r"])], [])
    assert (same, len(wrong), missing) == ([], 1, ["only in DuckDB: r"])


@pytest.mark.parametrize(
    "durations", [[7.0], [3.0, 1.0, 2.0], [5.0, 5.0, 5.0, 1.0], [n / 3 for n in range(101)]]
)
def test_the_sqlite_percentiles_interpolate_as_duckdbs_quantile_cont(durations):
    sqlite = sqlite3.connect(":memory:")
    sqlite.execute("CREATE TABLE tool_executions (tool_name, is_error, duration_ms)")
    sqlite.executemany("INSERT INTO tool_executions VALUES ('t', 0, ?)", [(d,) for d in durations])
    cursor = sqlite.execute(analytics.SQLITE_TOOL_STATS)
    ours = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
    expected = duckdb.sql(
        "SELECT quantile_cont(d, 0.5), quantile_cont(d, 0.95), quantile_cont(d, 0.99) "
        "FROM (SELECT unnest($durations) AS d)",
        params={"durations": durations},
    ).fetchone()
    assert (ours["p50_ms"], ours["p95_ms"], ours["p99_ms"]) == pytest.approx(expected, rel=1e-12)


# -- the read commands and import agentledger ---------------------------------------------------


def test_the_shell_reads_the_rows_each_command_prints(tmp_path):
    path = tmp_path / "ledger.db"
    recorded = record_a_run(str(path))
    chosen = startup.commands(recorded.conversation_id, recorded.run_id)
    assert list(chosen) == ["conversations", "runs", "show", "trace", "search"]
    with closing(sqlite3.connect(path)) as db, LedgerReader.open(path) as reader:
        read = {
            name: [db.execute(s).fetchall() for s in sql.split(";") if s.strip()]
            for name, (_, sql) in chosen.items()
        }
        assert [r[0] for r in read["conversations"][0]] == [
            c.id for c in reader.conversations(kind="main")
        ]
        assert [r[0] for r in read["runs"][0]] == [r.id for r in reader.runs()]
        assert [r[0] for r in read["show"][0]] == [
            m.id for m in reader.history(recorded.conversation_id)
        ]
        tree, steps_read, tools = read["trace"]
        calls = [t.id for s in reader.steps(recorded.run_id) for t in s.step.tool_executions]
        assert ([r[0] for r in tree], len(steps_read), [r[0] for r in tools]) == (
            [recorded.run_id],
            len(reader.steps(recorded.run_id)),
            calls,
        )


def test_without_the_shell_a_fresh_interpreter_reads_the_rows(monkeypatch, tmp_path):
    monkeypatch.setattr(startup.shutil, "which", lambda name: None)
    with closing(sqlite3.connect(tmp_path / "x.db")) as conn:
        conn.execute("CREATE TABLE conversations (id)")
    argv = startup.shell(tmp_path / "x.db", "SELECT * FROM conversations;")
    assert argv[0] == sys.executable
    assert startup.process(*argv)() > 0


def test_the_commands_report_judges_each_command_against_its_target():
    chosen = startup.commands("c", "r")
    times = {startup.BARE: [0.02, 0.03], startup.HELP: [0.09, 0.1], startup.IMPORTS: [0.2, 0.2]}
    for name in chosen:
        times |= {name: [0.2, 0.25], f"{name}: the same rows read by sqlite3": [0.004, 0.005]}
    times["search"] = [0.4, 0.5]
    section = startup.command_report(Samples(times), chosen, 2)
    found = cells(section)
    assert found["agentledger --help (target < 150 ms); / bare"] == ("95 ms, met", "3.80x")
    assert found["agentledger show (target < 300 ms); / bare; / sqlite3"] == (
        "225 ms, met",
        "9.00x; 50.00x",
    )
    assert found["agentledger search (target < 300 ms); / bare; / sqlite3"][0] == "450 ms, missed"


def test_the_import_is_measured_over_the_bare_interpreter_in_its_own_version(tmp_path):
    section = startup.import_section(2, [this_version()])
    found = cells(section)
    assert re.fullmatch(
        r"-?\d+ ms, (met|missed)", found[f"{THIS}: over the bare interpreter (target < 150 ms)"][0]
    )
    assert "pydantic" not in startup.loaded(this_version())  # the values load when first used
    elsewhere = Version("the previous version", tmp_path, "an empty directory")
    with pytest.raises(AssertionError, match="agentledger came from"):
        startup.loaded(elsewhere)


# -- the statements -----------------------------------------------------------------------------


def test_each_way_of_sending_the_statements_records_the_same_turns_on_both_sqlite_settings(
    tmp_path,
):
    measured = statements.measure(2, tmp_path, with_postgres=False)
    assert list(measured.backends) == ["SQLite, synchronous=FULL", "SQLite, synchronous=NORMAL"]
    for samples in measured.backends.values():
        for way in statements.WAYS:
            parts = [samples.times[f"{way} {part}"] for part in statements.PARTS.values()]
            whole, *calls, alone = parts
            for turn in range(2):
                # Each part is timed inside the turn; the statements also run in reads
                # that no timed recorder call holds (loading the conversation), so they are
                # held to the whole turn alone.
                recorded = sum(call[turn] for call in calls)
                assert 0 < recorded < whole[turn] and 0 < alone[turn] < whole[turn]
    section = statements.report(measured)
    paired = [row.ratio for row in section.rows if row.ratio]
    assert len(paired) == 2 * 2 * len(statements.PARTS)  # B/A and C/A, on two settings
    assert all(re.fullmatch(r"\*{0,2}\d+\.\d\dx \[\d+\.\d\d–\d+\.\d\d\]\*{0,2}", r) for r in paired)
    assert "- PostgreSQL: not measured in this run." in section.render()


# -- streaming ----------------------------------------------------------------------------------

TINY = streaming.Plan(
    conversations=4, turns=2, reps=1, cancels=2, sequential_turns=2, sequential_reps=2
)


def test_every_streamed_turn_and_cancel_is_recorded_and_reported_with_its_target(tmp_path):
    measured = streaming.measure(TINY, tmp_path, with_postgres=False)
    figures = measured.backends["SQLite"]
    for variant in (streaming.DEFAULT, streaming.RARE):
        (observed,) = figures.rounds[variant]
        assert observed.statuses == {"completed": TINY.conversations * TINY.turns}
        assert len(observed.step_lags) == len(observed.turn_times) * 4  # 3 tool steps, an answer
    (cancelled,) = figures.cancel_rounds
    assert cancelled.statuses == {"completed": 2, "interrupted": 2}
    assert cancelled.interrupted_answers == len(cancelled.cancels) == TINY.cancels
    assert figures.flushes_per_turn(streaming.DEFAULT) > 0  # a 1.2 s answer, flushed at 0.5 s
    assert figures.flushes_per_turn(streaming.RARE) == 0
    sections = streaming.report(measured)
    found = cells(sections[0]) | cells(sections[1])
    for late in (
        "event loop lateness, p99 (target < 20 ms)",
        "cancel → committed interrupted, p99 (target < 200 ms)",
    ):
        assert re.fullmatch(r"[\d.,]+ ms, (met|missed)", found[f"SQLite: {late}"][0])
    assert RATIO.match(found["SQLite: arun / run, per turn (target ≤ 1.2x)"][1])
    assert "PostgreSQL: not measured in this run." in sections[0].notes


def test_a_flush_is_told_from_the_other_updates_of_a_run():
    update = "UPDATE agent_runs SET heartbeat_at=?, partial_output=?, partial_step_index=?, {}=? "
    assert streaming.is_flush(update.format("change_seq") + "WHERE agent_runs.id = ?")
    assert not streaming.is_flush(update.format("step_count") + "WHERE agent_runs.id = ?")


# -- the viewer ---------------------------------------------------------------------------------

VIEWER = viewer.Plan(RUNS, STEPS, turns=3, reps=1, live_steps=2, pause=0.1, streams=2)


def test_the_viewers_pages_and_a_step_shown_live_are_timed_in_a_browser(tmp_path):
    section = viewer.run_plan(VIEWER, tmp_path)
    reason = viewer.unavailable()
    if reason is not None:
        assert (section.rows, section.notes) == ([], [f"Skipped: {reason}."])
        if browser_required():
            pytest.fail(f"{REQUIRE_BROWSER_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    found = cells(section)
    assert len(found) == 6
    for median, _ in found.values():
        assert re.fullmatch(r"\*{0,2}[\d.,]+ ms, (met|missed)\*{0,2}", median), median
    assert "(its page shows 3 of them)" in section.notes[0]
    assert "(2 of them were told of the changes)" in section.notes[1]


def test_a_machine_without_chromium_skips_the_viewers_section_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    section = viewer.run_plan(VIEWER, tmp_path)
    assert section.rows == [] and section.notes[0].startswith("Skipped: no Chromium on PATH")
    assert list(tmp_path.iterdir()) == []  # nothing built

"""The benchmarks that run systems in worker processes (``bench/recording.py``,
``bench/previous.py``, ``bench/writers.py``, ``bench/checkpoints.py``, ``bench/frameworks.py``)
run end to end at a tiny size: every worker runs the version it was started from, every system
records every turn (checked in SQL), the recorder's replay writes what ``Agent.run`` writes, and
each report gives a figure for every system. Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from bench import _versions, checkpoints, frameworks, peers, previous, recording, writers
from bench._common import database
from bench._workers import Worker, WorkerError

pytestmark = pytest.mark.bench  # `make test-bench`, not `make test`

ROOT = Path(__file__).resolve().parents[1]
FIGURE = re.compile(r"^\*{0,2}(\d+\.\d\d)x( \[\d+\.\d\d–\d+\.\d\d\])?(, (met|missed))?\*{0,2}$")


def table(sections) -> dict[str, tuple[str, str]]:
    return {row.measure: (row.median, row.ratio) for s in sections for row in s.rows}


def counts(path: Path) -> dict[str, int]:
    tables = ("agent_runs", "conversation_messages", "step_executions", "tool_executions")
    with closing(sqlite3.connect(path)) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def test_every_system_records_every_turn_at_every_history_and_the_loads_read_them_all(tmp_path):
    plan = recording.Plan((2, 3), reps=2, modes=("NORMAL",), profiled=(2, 5))
    measured = recording.measure(plan, tmp_path)
    found = table(recording.report(measured))
    for system in measured.systems:
        for turns in (2, 3):
            assert re.fullmatch(
                r"[\d.]+ ms a turn, [\d,]+ µs a step", found[f"@ {turns}: {system}"][0]
            )
    assert all(FIGURE.match(ratio) for _, ratio in found.values() if ratio)
    assert "@ 3: agentledger Agent.run NORMAL / raw sqlite3 messages NORMAL (target ≤ 3x)" in found
    if not peers.skipped(peers.SESSION):
        assert (
            f"@ 3: {peers.SESSION} FULL / agentledger recorder alone NORMAL (target > 1x)" in found
        )
    # The recorder's replay writes what Agent.run writes.
    agent = counts(tmp_path / "agentledger-agent.run-normal-3.db")
    assert counts(tmp_path / "agentledger-recorder-alone-normal-3.db") == agent
    assert agent == {
        "agent_runs": 5,
        "conversation_messages": 10,
        "step_executions": 20,
        "tool_executions": 15,
    }
    assert measured.loaded == 2 * (3 + 2)
    assert set(measured.loads.times) == {"agentledger cold", "agentledger warm", "agentledger raw"}
    assert sum(measured.profile.values()) == pytest.approx(1.0)
    assert measured.profile["sqlite3: statements and commits"] > 0.01


def test_a_worker_that_cannot_set_its_system_up_says_why(tmp_path):
    worker = Worker(
        "broken", recording.Turns, path=str(tmp_path), kind="agent", synchronous="NORMAL"
    )
    try:
        with pytest.raises(WorkerError, match="setting the system up failed"):
            worker.call("check")
    finally:
        worker.close()


def test_a_worker_whose_source_holds_no_agentledger_refuses_to_start(tmp_path):
    worker = Worker(
        "nowhere",
        recording.Turns,
        source=tmp_path,
        path=str(tmp_path / "t.db"),
        kind="agent",
        synchronous="NORMAL",
    )
    try:
        with pytest.raises(WorkerError, match=r"setting the system up failed(.|\n)*not from"):
            worker.call("grow", 1)
    finally:
        worker.close()


# -- the previous version -----------------------------------------------------------------------


def in_git() -> bool:
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False
    )
    return shutil.which("git") is not None and found.returncode == 0


@pytest.mark.skipif(not in_git(), reason="needs a git checkout to export HEAD from")
def test_this_version_is_held_against_a_commit_exported_from_git(tmp_path):
    with pytest.raises(ValueError, match="names no commit"):
        _versions.resolve("no-such-ref-anywhere")
    version = _versions.export("HEAD", tmp_path)
    assert (version.source / "agentledger" / "__init__.py").is_file()
    plan = previous.Plan((3,), reps=2, trees=1, fanout=(2, 2), modes=("NORMAL",))
    measured = previous.measure(plan, tmp_path, version)
    found = table([previous.turn_section(measured), previous.reads_section(measured)])
    for way in previous.WAYS:
        assert FIGURE.match(found[f"@ 3, {way} NORMAL: this version / the previous version"][1])
    for ratio in ("cold load", "warm load", "runs()", "run_tree()"):
        assert FIGURE.match(found[f"{ratio}: this version / the previous version"][1])
    assert measured.shape == (7, 7) and measured.loaded == 2 * (3 + 2)
    assert any(name.startswith("control: ") for name in found)


def test_without_a_previous_version_sections_11_and_12_say_how_to_run_them():
    (section,) = previous.run(previous.Sizes("quick"), Path("."), None)
    assert "Skipped: no previous version was given" in section.about and not section.rows


# -- many writers -------------------------------------------------------------------------------


def test_every_writer_takes_every_turn_and_the_ledger_counts_its_transactions(tmp_path):
    plan = writers.Plan((1, 2), conversations=2, turns=2, reps=2)
    only = (writers.AGENTLEDGER, *writers.CEILINGS)
    measured = writers.measure(plan, tmp_path, backends=("SQLite",), only=only)
    for count, point in measured.curves["SQLite"][writers.AGENTLEDGER].items():
        assert len(point.rates) == plan.reps and point.turns == count * 2 * 2 * plan.reps
        assert len(point.commits) == 4 * point.turns  # 3 tool steps and the answer
        # begin, 4 steps, commit; a load for every turn that continues a conversation
        assert point.counted == [point.turns * 6 + point.turns // 2, 0]
        assert point.held is not None and len(point.held) == point.turns * 6
        assert all(0 < held < 5 for held in point.held)
    path = tmp_path / "writers-agentledger-agent.run-2.db"
    with closing(sqlite3.connect(path)) as conn:
        runs = conn.execute("SELECT status, count(*) FROM agent_runs GROUP BY status").fetchall()
        messages = conn.execute(
            "SELECT count(*) FROM conversation_messages GROUP BY conversation_id"
        )
        assert messages.fetchall() == [(2 * plan.turns,)] * (2 * plan.conversations * plan.reps)
    assert runs == [("completed", 2 * plan.conversations * plan.reps * plan.turns)]
    # The ceiling: the same writers each on a file of its own, beyond one writer only.
    shared = measured.curves["SQLite"][writers.AGENTLEDGER][2]
    assert list(measured.curves["SQLite"][writers.OWN_FILES]) == [2]
    # Unsynced and replayed, at one writer too: their scaling is held against their own.
    assert list(measured.curves["SQLite"][writers.UNSYNCED]) == [1, 2]
    assert list(measured.curves["SQLite"][writers.REPLAYED]) == [1, 2]
    for system in writers.OWN_FILE_CEILINGS:
        own = measured.curves["SQLite"][system][2]
        # Both files' rows counted: as many as the shared file's, bar each file's bookkeeping.
        assert own.turns == shared.turns and 0 <= own.rows - shared.rows <= 2 / own.turns
        base = str(database(tmp_path, "writers", system, 2))  # the section's own naming
        for n in range(2):
            with closing(sqlite3.connect(writers.own_file(base, n))) as conn:
                (count,) = conn.execute("SELECT count(*) FROM agent_runs").fetchone()
                assert count == plan.conversations * plan.reps * plan.turns
    # The replay wrote, on the one shared file, the very rows the ledger writes: every writer's
    # runs completed, each conversation's messages all there, as many rows a turn.
    replayed = measured.curves["SQLite"][writers.REPLAYED][2]
    assert replayed.turns == shared.turns and replayed.rows == pytest.approx(shared.rows)
    assert replayed.held is not None and len(replayed.held) == replayed.turns * 6
    assert len(replayed.commits) == 4 * replayed.turns
    with closing(sqlite3.connect(database(tmp_path, "writers", writers.REPLAYED, 2))) as conn:
        runs = conn.execute("SELECT status, count(*) FROM agent_runs GROUP BY status").fetchall()
        assert runs == [("completed", 2 * plan.conversations * plan.reps * plan.turns)]
        messages = conn.execute(
            "SELECT count(*) FROM conversation_messages GROUP BY conversation_id"
        )
        assert messages.fetchall() == [(2 * plan.turns,)] * (2 * plan.conversations * plan.reps)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert not list(tmp_path.glob("*recording*"))  # the recordings' scratch files are gone
    section = writers.report(measured)
    assert [row.measure for row in section.rows] == [
        "SQLite, 1 writers: agentledger turns/s (ratio: / the best peer)",
        "SQLite, 2 writers: agentledger turns/s (ratio: / the best peer)",
    ]
    assert "| 2 | agentledger Agent.run |" in "\n".join(section.details)
    assert "lock held p50" in section.details[2]
    scaling = [line for line in section.notes if line.startswith("Scaling on SQLite")]
    assert len(scaling) == 1 and "2 writers" in scaling[0] and "target 1.6x" in scaling[0]
    assert "each on a file of its own: " in scaling[0] and "; and unsynced: " in scaling[0]
    assert "; the ledger's transactions replayed by sqlite3 alone: " in scaling[0]
    assert f"| 2 | {writers.OWN_FILES} |" in "\n".join(section.details)


def test_the_scaling_targets_are_sqlites_and_postgresqls_figures_are_given_without_one():
    def point(rate: float) -> writers.Point:
        return writers.Point(rates=[rate], commits=[0.001], turns=100)

    curve = {writers.AGENTLEDGER: {1: point(100.0), 2: point(150.0), 4: point(160.0)}}
    plan = writers.Plan((1, 2, 4), conversations=25, turns=4, reps=1)
    section = writers.report(writers.Measured(plan, {"SQLite": curve, "PostgreSQL": curve}))
    scaling = [line for line in section.notes if line.startswith("Scaling on")]
    assert scaling == [
        "Scaling on SQLite missed: 2 writers 1.50x 1 writer's (target 1.6x); "
        "4 writers 1.07x 2 writers' (target 1.0x).",
        "Scaling on PostgreSQL (the server shares the cores): 2 writers 1.50x 1 writer's "
        "(no target); 4 writers 1.07x 2 writers' (no target).",
    ]


@pytest.mark.skipif(not in_git(), reason="needs a git checkout to export HEAD from")
def test_the_writers_of_a_previous_version_are_measured_beside_this_ones(tmp_path):
    plan = writers.Plan((1,), conversations=2, turns=1, reps=1)
    before = _versions.export("HEAD", tmp_path)
    measured = writers.measure(
        plan, tmp_path, backends=("SQLite",), only=writers.OURS, before=before
    )
    curve = measured.curves["SQLite"]
    assert list(curve) == [writers.AGENTLEDGER, writers.BEFORE]
    for point in (curve[writers.AGENTLEDGER][1], curve[writers.BEFORE][1]):
        assert point.turns == 2 and point.held is not None and len(point.held) == 12
    details = "\n".join(writers.report(measured).details)
    assert f"| 1 | {writers.BEFORE} |" in details


# -- LangGraph checkpoints ----------------------------------------------------------------------


def test_every_saver_keeps_every_turn_of_the_chat_and_is_held_against_sqlitesaver(tmp_path):
    plan = checkpoints.Plan((3,), reps=2, bytes_at=3)
    measured = checkpoints.measure(plan, tmp_path)
    found = table([checkpoints.report(measured)])
    assert checkpoints.LEDGER in measured.systems
    for system in measured.systems:
        assert re.fullmatch(r"[\d.]+ MB", found[f"@ 3: {system}: file"][0])
        assert re.fullmatch(r"[\d.]+ ms", found[f"@ 3: {system}: a turn"][0])
    assert all(FIGURE.match(ratio) for _, ratio in found.values() if ratio)
    skipped = " ".join(measured.skipped)
    if checkpoints.SQLITE in measured.systems:
        target = f"@ 3: file, {checkpoints.LEDGER} / {checkpoints.SQLITE}"
        assert found[f"{target} (target ≤ 0.2x)"][1].endswith(("met", "missed"))
        with closing(sqlite3.connect(tmp_path / "langgraph-sqlitesaver-3.db")) as conn:
            held = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = 'chat'")
            assert held.fetchone() == (3 * (3 + plan.reps),)
    else:
        assert f"{checkpoints.SQLITE}: skipped, not installed" in skipped
    # Each turn's invoke: its input, the input applied, the model's answer.
    with closing(sqlite3.connect(tmp_path / "agentledger-ledgersaver-3.db")) as conn:
        held = conn.execute("SELECT count(*) FROM graph_checkpoints WHERE thread_id = 'chat'")
        assert held.fetchone() == (3 * (3 + plan.reps),)
        assert conn.execute("SELECT id FROM conversations").fetchall() == [("chat",)]


# -- three frameworks' stores -------------------------------------------------------------------


def test_each_frameworks_store_and_the_ledgers_keep_every_turn_and_are_held_side_by_side(tmp_path):
    measured = frameworks.measure(frameworks.Plan((2,), reps=2), tmp_path)
    found = table([frameworks.report(measured)])
    skipped = " ".join(measured.skipped)
    for framework in frameworks.FRAMEWORKS:
        pair = f"{framework.ledger} / {framework.default}"
        if framework.default not in measured.systems:
            assert f"{framework.ledger}: skipped, needs" in skipped
            continue
        for system in framework.systems:
            assert re.fullmatch(r"[\d.]+ MB|in memory", found[f"@ 2: {system}: on disk"][0])
            assert re.fullmatch(r"[\d.]+ ms", found[f"@ 2: {system}: a turn"][0])
        judged = found[f"@ 2: a turn, {pair} (target ≤ 1.2x)"][1]
        assert FIGURE.match(judged) and "[" in judged and judged.endswith(("met", "missed"))
        assert FIGURE.match(found[f"@ 2: on disk, {pair}"][1])
        sent = found[f"@ 2: {framework.ledger}: a turn sends"][0]
        assert re.fullmatch(r"[1-9]\d* statements, [1-9]\d* commits?", sent)
    # The ledger's stores keep each of the 5 turns (2 built, 2 timed, 1 with its statements
    # counted) as runs of the ledger: the prompt and the answer the conversation, the 3 tool
    # steps and the answer's step, a tool execution for each call.
    recorded = {"conversation_messages": 10, "step_executions": 20, "tool_executions": 15}
    for system in (frameworks.AGENTS_LEDGER, frameworks.PAI_LEDGER):
        if system in measured.systems:
            path = tmp_path / f"{system.lower().replace(' ', '-')}-2.db"
            assert {k: v for k, v in counts(path).items() if k != "agent_runs"} == recorded

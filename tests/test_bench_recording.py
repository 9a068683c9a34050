"""The recording benchmark (``bench/recording.py``) runs end to end at a tiny size: every
system's rows are in its report (a peer that is not installed is skipped with a note), every
ratio is a positive number, and the library's databases hold the rows the raw writer's does.
Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import _peers, recording  # noqa: E402 (after the path above)
from bench import _recording_plan as plan  # noqa: E402
from bench._raw import row_profile  # noqa: E402
from bench._turns import Loads  # noqa: E402
from bench._workers import Worker, WorkerError  # noqa: E402

HISTORIES = (2, 4)
PLAN = plan.Plan(HISTORIES, reps=2, load_reps=2)
RATIO = re.compile(r"^\*{0,2}(\d+\.\d\d)x\*{0,2}$")
PEERS = list(plan.PEER_MODES)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> plan.Measured:
    return recording.measure(PLAN, tmp_path_factory.mktemp("bench-recording"))


def rendered(measured: plan.Measured) -> str:
    return "\n".join(line for s in recording.report(measured) for line in s.render())


def table_rows(text: str) -> list[list[str]]:
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip(" |") for cell in row] for row in rows if row[0] != "| measure"]


def installed(peer: str) -> bool:
    return not _peers.missing(peer)


def test_every_system_has_a_turn_row_at_every_history_length(measured):
    measures = {row[0].strip("*") for row in table_rows(rendered(measured))}
    ours = [f"{label} {mode}" for mode in plan.MODES for label in plan.OURS]
    peers = [f"{peer} {mode}" for peer, mode in plan.PEER_MODES.items() if installed(peer)]
    for turns in HISTORIES:
        for name in ours + peers:
            assert f"@ {turns}: {name}" in measures
    for name in ours[: len(plan.OURS)] + peers:  # bytes per turn: one synchronous setting is enough
        assert f"{name}: bytes per turn, 2 → 4 turns (/ raw)" in measures


@pytest.mark.parametrize("peer", PEERS)
def test_a_peer_is_measured_when_installed_and_skipped_with_a_note_when_not(measured, peer):
    text = rendered(measured)
    if installed(peer):
        assert f"@ 4: {peer} / agentledger" in text
        assert f"{peer}: skipped" not in text
    else:
        assert f"- {peer}: skipped, not installed" in text
        assert f"@ 4: {peer}" not in text


@pytest.mark.parametrize("peer", PEERS)
def test_the_report_says_a_peer_was_skipped_and_leaves_its_rows_out(measured, peer):
    without = dataclasses.replace(
        measured,
        systems=[s for s in measured.systems if s.label != peer],
        skipped={peer: "not installed (it)"},
    )
    text = rendered(without)
    assert f"- {peer}: skipped, not installed (it)." in text
    assert not any(peer in row[0] for row in table_rows(text))


def test_every_ratio_is_a_positive_number(measured):
    ratios = [row[2] for row in table_rows(rendered(measured)) if row[2]]
    peers = sum(installed(peer) for peer in PEERS)
    assert len(ratios) >= 15 + peers  # ours against raw, flatness and loads; one per peer more
    for ratio in ratios:
        found = RATIO.match(ratio)
        assert found, ratio
        assert float(found.group(1)) > 0


def test_the_library_and_raw_databases_hold_the_same_rows(measured):
    for mode in plan.MODES:
        for turns in HISTORIES:
            counts = {
                label: {
                    table: values[0]
                    for table, values in row_profile(
                        measured.paths[plan.key(plan.System(label, mode), turns)]
                    ).items()
                }
                for label in (plan.AGENT, plan.RECORDER, plan.RAW)
            }
            raw = counts[plan.RAW]
            assert counts[plan.AGENT] == counts[plan.RECORDER] == raw
            total = turns + PLAN.reps
            assert raw["conversation_messages"] == 2 * total
            assert raw["step_executions"] == 4 * total
            assert raw["tool_executions"] == 3 * total
            assert raw["execution_buffer_rows"] == 0


def test_the_raw_messages_floor_holds_eight_messages_and_four_usage_rows_a_turn(measured):
    for mode in plan.MODES:
        for turns in HISTORIES:
            path = measured.paths[plan.key(plan.System(plan.RAW_MESSAGES, mode), turns)]
            with sqlite3.connect(path) as conn:
                rows = conn.execute(
                    "SELECT role, count(*) FROM messages GROUP BY role ORDER BY role"
                ).fetchall()
                usage = conn.execute("SELECT count(*) FROM usage").fetchone()[0]
            total = turns + PLAN.reps
            assert rows == [("assistant", 4 * total), ("tool", 3 * total), ("user", total)]
            assert usage == 4 * total


def test_the_profile_of_a_turn_divides_all_of_its_time(measured):
    shares = measured.profile
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    assert all(share > 0 for share in shares.values())
    assert shares["sqlite3: statements and commits"] > 0.01
    assert shares["the ledger's Python (rows, checksums, statements)"] > 0.01
    text = rendered(measured)
    assert "A profile of" in text and "self time by area" in text


def test_the_peers_hold_every_message_of_every_turn(measured):
    for name, counts in measured.stored.items():
        turns = int(name.rsplit(" @ ", 1)[1])
        assert counts.get("messages", counts.get("items")) == 8 * turns, name


def test_the_three_loads_read_the_whole_conversation(measured):
    assert measured.loaded_messages == 2 * (HISTORIES[-1] + PLAN.reps)
    assert set(measured.loads.times) == {plan.COLD, plan.WARM, plan.RAW_LOAD}


def test_a_worker_that_cannot_set_its_system_up_says_why(tmp_path):
    worker = Worker(
        "broken", Loads, path=str(tmp_path / "none.db"), conversation_id="x", kind="cold"
    )
    try:
        with pytest.raises(WorkerError, match="setting the system up failed"):
            worker.call("count")
    finally:
        worker.close()

"""The many-writers benchmark (``bench/writers.py``) runs end to end at a tiny size on SQLite:
writer processes start together, every turn of every conversation is recorded (checked in SQL),
each step's commit is timed, the ledger's transactions and lock retries are counted, and the
report gives the curve. Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import writers  # noqa: E402 (after the path above)

TINY = writers.Plan((1, 2), conversations=2, turns=2, reps=2)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench-writers")


@pytest.fixture(scope="module")
def measured(tmp: Path) -> writers.Measured:
    return writers.measure(TINY, tmp, backends=("SQLite",), only=(writers.AGENTLEDGER,))


def test_every_writer_took_every_turn_of_every_round_and_timed_each_step(measured):
    curve = measured.points["SQLite"][writers.AGENTLEDGER]
    assert sorted(curve) == [1, 2]
    for count, point in curve.items():
        turns = count * TINY.conversations * TINY.turns
        assert point.failed is None
        assert len(point.rates) == TINY.reps and all(rate > 0 for rate in point.rates)
        assert point.turns == turns * TINY.reps
        assert len(point.commits) == 4 * point.turns  # 3 tool steps and the answer
        # begin, 4 steps, commit; a load for every turn that continues a conversation
        assert point.transactions == point.turns * 6 + point.turns // 2
        assert point.retries == 0


def test_each_writers_conversations_hold_every_turn_in_sql(measured, tmp):
    path = tmp / "writers-agentledger-agent-run-2.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        runs = conn.execute("SELECT status, count(*) FROM agent_runs GROUP BY status").fetchall()
        messages = conn.execute(
            "SELECT count(*) FROM conversation_messages GROUP BY conversation_id"
        ).fetchall()
    conversations = 2 * TINY.conversations * TINY.reps
    assert runs == [("completed", conversations * TINY.turns)]
    assert messages == [(2 * TINY.turns,)] * conversations


def test_the_report_gives_the_curve_and_says_whether_the_target_is_met(measured):
    section = writers.report(measured)
    text = "\n".join(section.render())
    assert [row.measure for row in section.rows] == [
        "SQLite, 1 writers: agentledger turns/s (ratio: / the best peer)",
        "SQLite, 2 writers: agentledger turns/s (ratio: / the best peer)",
    ]
    assert "| 2 | agentledger Agent.run |" in text
    assert "Target met on SQLite" in text  # no peer measured here: nothing to fall behind
    assert "lock retries per 1000 tx" in text

"""The async and streaming benchmark (``bench/streaming.py``) runs end to end at a tiny size on
SQLite: a few conversations stream at once, some are cancelled mid-answer and committed as
interrupted (checked inside, in SQL), the flushes are counted only where they can happen, and
the report gives every figure and says whether each target is met. Correctness only: the
timing is ``make bench``'s."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from agentledger.ledger import Ledger
from agentledger.ledger._interrupts import RECORD_PARTIAL_OUTPUT

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import streaming  # noqa: E402 (after the path above)
from bench._streaming_runs import is_flush, sync_turns  # noqa: E402

TINY = streaming.Plan(
    conversations=4, turns=2, reps=1, cancels=2, sequential_turns=3, sequential_reps=2
)
FIGURE = r"\*{0,2}[\d,]+\.\d{1,2}(?: ms|x)?\*{0,2}"


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> streaming.Measured:
    return streaming.measure(TINY, tmp_path_factory.mktemp("bench-streaming"), postgres=False)


def rendered(measured: streaming.Measured) -> str:
    return "\n".join(line for s in streaming.report(measured) for line in s.render())


def rows(text: str) -> dict[str, list[str]]:
    found = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    cells = [[cell.strip(" |") for cell in row] for row in found]
    return {row[0].strip("*"): row[1:] for row in cells if row[0] != "| measure"}


def test_every_round_took_its_turns_and_every_cancel_was_timed(measured):
    figures = measured.backends["SQLite"]
    for variant in (streaming.DEFAULT, streaming.RARE):
        (observed,) = figures.rounds[variant]
        assert observed.turns_done == TINY.conversations * TINY.turns
        assert observed.statuses == {"completed": TINY.conversations * TINY.turns}
        assert len(observed.step_lags) == observed.turns_done * 4  # 3 tool steps, an answer
        assert observed.lateness and all(late > -0.005 for late in observed.lateness)
    (cancelled,) = figures.cancel_rounds
    assert len(cancelled.cancels) == TINY.cancels
    assert cancelled.statuses == {"completed": 2, "interrupted": 2}
    assert cancelled.interrupted_answers == TINY.cancels


def test_flushes_are_written_with_the_default_interval_and_never_with_a_rare_one(measured):
    figures = measured.backends["SQLite"]
    assert figures.flushes_per_turn(streaming.DEFAULT) > 0  # a 1.2 s answer, flushed at 0.5 s
    assert figures.flushes_per_turn(streaming.RARE) == 0


def test_the_report_gives_every_figure_of_both_sections(measured):
    found = rows(rendered(measured))
    for measure in [
        "SQLite: turns per second",
        "SQLite: event loop lateness, p99 (target < 20 ms)",
        "SQLite: a step's end → its StepRecorded, median",
        "SQLite: a step's end → its StepRecorded, p99",
        "SQLite: flush writes per turn",
        "SQLite: cancel → committed interrupted, p99 (target < 200 ms)",
        "SQLite: Agent.run, per turn",
        "SQLite: await agent.arun, per turn",
    ]:
        assert re.fullmatch(FIGURE, found[measure][0]), (measure, found[measure])
    for ratio in [
        "SQLite: turn time, default flush / no flush in a turn",
        "SQLite: arun / run, per turn (target ≤ 1.2x)",
    ]:
        assert re.fullmatch(FIGURE, found[ratio][1]), (ratio, found[ratio])


def test_the_report_says_whether_each_target_is_met_and_why_postgresql_is_missing(measured):
    text = rendered(measured)
    for what in [
        "SQLite: the event loop's lateness, p99, default flush is ",
        "SQLite: cancel → committed interrupted, p99 is ",
        "SQLite: await agent.arun / Agent.run, per turn is ",
    ]:
        assert re.search(rf"- Target (met|missed): {re.escape(what)}", text), what
    assert "- PostgreSQL: not measured in this run." in text
    assert "### SQLite" in text


def test_a_flush_is_told_from_the_other_updates_of_a_run():
    for dialect in (sqlite.dialect(), postgresql.dialect()):
        assert is_flush(str(RECORD_PARTIAL_OUTPUT.compile(dialect=dialect)))
    assert not is_flush(
        "UPDATE agent_runs SET heartbeat_at=?, partial_output=?, partial_step_index=?, "
        "step_count=? WHERE agent_runs.id = ?"
    )
    assert not is_flush("UPDATE conversations SET version=? WHERE conversations.id = ?")


def test_one_turn_after_another_is_recorded_on_the_ledger(tmp_path):
    with Ledger.open(tmp_path / "turns.db") as ledger:
        assert sync_turns(ledger, 2) > 0
        assert [r.status for r in ledger.runs()] == ["completed", "completed"]

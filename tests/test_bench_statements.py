"""The statements benchmark (``bench/statements.py``) runs end to end at a tiny size on SQLite:
both ways record the same turns (checked inside: as many rows, nothing damaged), each turn's
recorder calls and statements are timed, and every ratio is a positive number. Correctness
only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import statements  # noqa: E402 (after the path above)

RATIO = re.compile(r"^\*{0,2}(\d+\.\d\d)x \[(\d+\.\d\d)–(\d+\.\d\d)\]\*{0,2}$")
BACKENDS = ["SQLite, synchronous=FULL", "SQLite, synchronous=NORMAL"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> statements.Measured:
    return statements.measure(2, tmp_path_factory.mktemp("bench-statements"), postgres=False)


def test_both_sqlite_settings_are_measured_both_ways(measured):
    assert list(measured.ways) == BACKENDS
    for ways in measured.ways.values():
        assert [way.name for way in ways] == ["A", "B"]
        for way in ways:
            assert len(way.turns) == 2
            for turn in way.turns:
                assert 0 < turn.statements < sum(turn.calls.values()) < turn.whole


def test_every_ratio_is_a_positive_number_with_its_interquartile_range(measured):
    rows = statements.report(measured).rows
    cells = [row.ratio for row in rows if row.ratio]
    assert len(cells) == len(BACKENDS) * len(statements.PARTS)
    for cell in cells:
        found = RATIO.match(cell)
        assert found, cell
        low, high = float(found.group(2)), float(found.group(3))
        assert 0 < low <= high
    assert "- PostgreSQL: not measured in this run." in "\n".join(
        statements.report(measured).render()
    )

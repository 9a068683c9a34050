"""The statements benchmark (``bench/statements.py``) runs end to end at a tiny size on SQLite:
every variant replays the captured run and writes the same rows (checked inside), every ratio
is a positive number, and the ledger's own path shows every statement to SQLAlchemy's logging
and every failure to ``handle_error``, as Core does. Correctness only: the timing is
``make bench``'s."""

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


def rendered(measured: statements.Measured) -> str:
    return "\n".join(statements.report(measured).render())


def test_both_sqlite_settings_are_measured_for_every_variant(measured):
    assert list(measured.timings) == BACKENDS
    for timings in measured.timings.values():
        assert set(timings.times) == {"A", "B", "C", "D"}
        assert timings.kinds == ["begin", "step", "step", "step", "answer step", "commit"]
        assert all(len(by_key) == 2 * 6 for by_key in timings.times.values())


def test_every_ratio_is_a_positive_number_with_its_interquartile_range(measured):
    text = rendered(measured)
    tables = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    cells = [cell.strip(" |") for row in tables for cell in row if "x [" in cell]
    assert len(cells) >= 2 * (4 + 3 * 4 * 2)  # per backend: its rows, its transactions table
    for cell in cells:
        found = RATIO.match(cell)
        assert found, cell
        low, high = float(found.group(2)), float(found.group(3))
        assert 0 < low <= high


def test_the_report_has_a_table_per_backend_and_the_visibility_matrix(measured):
    text = rendered(measured)
    for backend in BACKENDS:
        assert f"### {backend}" in text
    assert "### Visibility" in text
    assert "- PostgreSQL: not measured in this run." in text


def test_the_ledgers_path_shows_everything_sqlalchemys_own_shows(measured):
    seen = measured.seen["SQLite"]
    assert seen["A"].shows_everything(), seen["A"]
    assert seen["B"].shows_everything(), seen["B"]
    assert seen["A"].raised == seen["B"].raised == "sqlalchemy.IntegrityError"
    assert "Visibility (SQLite): A shows everything" in rendered(measured)


def test_the_statements_are_labelled_with_the_ledgers_names(measured):
    labels = {label for row in measured.timings[BACKENDS[0]].labels for label in row}
    assert {"take_free_lease", "insert_run", "extend_lease", "insert_step"} <= labels
    assert {"end_run", "release_and_bump_version"} <= labels

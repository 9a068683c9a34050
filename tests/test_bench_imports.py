"""The import benchmark (``bench/imports.py``) runs end to end at a tiny size: every system has
its row, the figures over the bare interpreter are there with the target, and the report names
what ``import agentledger`` loaded. Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import imports  # noqa: E402 (after the path above)
from bench._versions import PREVIOUS, THIS, Version, this_version  # noqa: E402

MS = re.compile(r"^\*{0,2}-?\d[\d,]* ms\*{0,2}$")


@pytest.fixture(scope="module")
def measured() -> imports.Measured:
    return imports.measure(2, [this_version()])


def rendered(measured: imports.Measured) -> str:
    return "\n".join(imports.report(measured).render())


def table_rows(text: str) -> dict[str, list[str]]:
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    cells = [[cell.strip(" |*") for cell in row] for row in rows if row[0] != "| measure"]
    return {row[0]: row[1:] for row in cells}


def test_every_system_is_timed_and_measured_over_the_bare_interpreter(measured):
    rows = table_rows(rendered(measured))
    for name in (imports.BARE, imports.PYDANTIC, THIS):
        assert MS.match(rows[f"{name}: start to exit"][0])
    assert MS.match(rows[f"{THIS}: over the bare interpreter (target < 150 ms)"][0])
    assert MS.match(rows[f"{imports.PYDANTIC}: over the bare interpreter"][0])
    assert len(measured.samples.times[THIS]) == 2


def test_without_a_previous_version_the_report_says_it_was_not_measured(measured):
    text = rendered(measured)
    assert "The previous version: not measured (give `--previous REF`" in text
    assert f"{THIS} / {PREVIOUS}" not in text


def test_the_report_names_the_heavy_packages_the_import_loads(measured):
    text = rendered(measured)
    assert re.search(r"This version \(the working tree\): `import agentledger` leaves \d+ ", text)
    assert "agentledger" in measured.loaded[THIS]
    assert "pydantic" not in measured.loaded[THIS]  # the values load with the first one used


def test_an_interpreter_that_imports_another_agentledger_is_refused(tmp_path):
    elsewhere = Version(PREVIOUS, tmp_path, "an empty directory")  # no agentledger there
    with pytest.raises(AssertionError, match="agentledger came from"):
        imports.measure(1, [this_version(), elsewhere])

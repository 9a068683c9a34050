"""The version comparison (``bench/previous.py``) runs end to end at a tiny size, against this
repository's ``HEAD`` exported from git as the "previous" version: each worker imports its own
version, both versions hold the same rows, and the report has a row and a ratio for every way,
setting and history length, the loads and the reads. Without a previous version the section is
skipped with a note. Correctness only: the timing is ``make bench``'s."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import _versions, previous  # noqa: E402 (after the path above)
from bench._turns import Turns  # noqa: E402
from bench._workers import Worker, WorkerError  # noqa: E402

PLAN = previous.Plan((3,), reps=2, trees=1, fanout=(2, 2), read_reps=2)
RATIO = re.compile(r"^\*{0,2}(\d+\.\d\d)x \[(\d+\.\d\d)–(\d+\.\d\d)\]\*{0,2}$")


def in_git() -> bool:
    if shutil.which("git") is None:
        return False
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False
    )
    return found.returncode == 0


pytestmark = pytest.mark.skipif(not in_git(), reason="needs a git checkout to export HEAD from")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, _versions.Version]:
    tmp = tmp_path_factory.mktemp("bench-previous")
    return tmp, _versions.export("HEAD", tmp)


@pytest.fixture(scope="module")
def measured(exported: tuple[Path, _versions.Version]) -> previous.Measured:
    tmp, version = exported
    return previous.measure(PLAN, tmp, version)


def rendered(measured: previous.Measured) -> str:
    return "\n".join(line for s in previous.report(measured) for line in s.render())


def table_rows(text: str) -> dict[str, list[str]]:
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    cells = [[cell.strip(" |") for cell in row] for row in rows if row[0] != "| measure"]
    return {row[0].strip("*"): row[1:] for row in cells}


def test_the_export_holds_the_commits_package(exported):
    tmp, version = exported
    assert (version.source / "agentledger" / "__init__.py").is_file()
    assert version.source.is_relative_to(tmp)
    assert version.described.startswith("commit ")


def test_a_ref_that_names_no_commit_is_refused():
    with pytest.raises(ValueError, match="names no commit"):
        _versions.resolve("no-such-ref-anywhere")


def test_every_way_setting_and_history_has_both_versions_and_a_ratio(measured):
    rows = table_rows(rendered(measured))
    for count in PLAN.histories:
        for mode in previous.MODES:
            for way in previous.WAYS:
                for version in (_versions.THIS, _versions.PREVIOUS):
                    assert f"@ {count}: {version}: {way} {mode}" in rows
                ratio = rows[f"@ {count}, {way} {mode}: this version / the previous version"]
                assert RATIO.match(ratio[1].strip("*")), ratio
    for kind in (previous.COLD, previous.WARM):
        assert RATIO.match(rows[f"{kind} load: this version / the previous version"][1])
    for read in ("runs()", "run_tree()"):
        assert RATIO.match(rows[f"{read}: this version / the previous version"][1])
    assert any(name.startswith("control: ") for name in rows)


def test_the_reads_return_every_run_of_the_ledger_and_the_whole_tree(measured):
    for shape in measured.shapes.values():
        assert shape["runs"] == shape["tree"] == 1 + 2 + 4
    assert measured.shapes[_versions.THIS]["row"] == "AgentRun"


def test_the_loads_read_the_whole_conversation(measured):
    assert measured.loaded_messages == 2 * (PLAN.histories[-1] + PLAN.reps)
    assert len(measured.loads.times) == 4


def test_a_worker_runs_the_version_it_was_started_from(exported, tmp_path):
    _, version = exported
    worker = Worker(
        "previous",
        Turns,
        source=version.source,
        path=str(tmp_path / "t.db"),
        kind="agent",
        synchronous="NORMAL",
    )
    try:
        assert Path(worker.agentledger_file()).is_relative_to(version.source)
        assert worker.call("grow", 1) > 0
    finally:
        worker.close()


def test_a_worker_whose_source_holds_no_agentledger_refuses_to_start(tmp_path):
    worker = Worker(
        "nowhere",
        Turns,
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


def test_without_a_previous_version_the_section_is_skipped_with_a_note():
    section = previous.skipped()
    text = "\n".join(section.render())
    assert "Skipped: no previous version was given" in text
    assert "| measure |" not in text

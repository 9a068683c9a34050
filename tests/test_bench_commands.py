"""The read commands' benchmark (``bench/commands.py``), without timing anything: the
statements it gives the ``sqlite3`` shell read the rows each command prints, its report has a
row per system with the targets, and ``--write`` puts its section into ``bench/RESULTS.md``
without touching the others. The timing is ``make bench``'s."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

from agentledger.ledger import LedgerReader
from support.cli import record_a_run

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not installed: it sits next to tests/
    sys.path.insert(0, str(ROOT))

from bench import commands  # noqa: E402 (after the path above)
from bench._common import Samples  # noqa: E402
from bench._report import Row, Section  # noqa: E402


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    path = tmp_path_factory.mktemp("commands") / "ledger.db"
    recorded = record_a_run(str(path))
    return path, recorded.conversation_id, recorded.run_id


def rows_read_by(path: Path, sql: str) -> list[list[tuple[object, ...]]]:
    with closing(sqlite3.connect(path)) as database:
        return [database.execute(s).fetchall() for s in sql.split(";") if s.strip()]


def test_the_shell_reads_the_rows_each_command_prints(ledger):
    path, conversation, run = ledger
    chosen = {c.name: c for c in commands.commands(conversation, run)}
    assert list(chosen) == ["conversations", "runs", "show", "trace", "search"]
    with LedgerReader.open(path) as reader:
        (listed,) = rows_read_by(path, chosen["conversations"].sql)
        assert [row[0] for row in listed] == [c.id for c in reader.conversations(kind="main")]
        (runs,) = rows_read_by(path, chosen["runs"].sql)
        assert [row[0] for row in runs] == [r.id for r in reader.runs()]
        (messages,) = rows_read_by(path, chosen["show"].sql)
        assert [row[0] for row in messages] == [m.id for m in reader.history(conversation)]
        tree, steps, tools = rows_read_by(path, chosen["trace"].sql)
        executions = [t for s in reader.steps(run) for t in s.step.tool_executions]
        assert [row[0] for row in tree] == [run] and len(steps) == len(reader.steps(run))
        assert [row[0] for row in tools] == [t.id for t in executions]


def test_without_the_shell_a_fresh_interpreter_reads_the_rows(monkeypatch, ledger):
    path, conversation, run = ledger
    monkeypatch.setattr(commands.shutil, "which", lambda name: None)
    argv = commands.shell(path, commands.commands(conversation, run)[0].sql)
    assert argv[0] == sys.executable
    assert commands.Process(argv, path.parent).run() > 0


def measured() -> commands.Measured:
    chosen = commands.commands("c", "r")
    times = {commands.BARE: [0.02, 0.03], commands.HELP: [0.09, 0.1], commands.IMPORTS: [0.2] * 2}
    for command in chosen:
        times[command.name] = [0.2, 0.25]
        times[f"{command.name}: the same rows read by sqlite3"] = [0.004, 0.005]
    return commands.Measured(Samples(times), chosen, 2, "the sqlite3 shell")


def test_the_report_gives_each_command_its_time_and_its_ratios_with_the_targets():
    section = commands.report(measured())
    cells = {row.measure: row for row in section.rows}
    assert cells["agentledger --help (target < 150 ms); / bare"].median == "95 ms"
    show = cells["agentledger show (target < 300 ms); / bare; / sqlite3"]
    assert (show.median, show.ratio, show.headline) == ("225 ms", "9.00x; 50.00x", True)
    assert "Target met: the slowest read command" in section.notes[0]


def test_writing_the_section_replaces_its_own_and_keeps_the_others():
    results = "\n".join(
        [
            "# Benchmark results",
            "",
            "## Summary",
            "",
            "| measure | median | ratio |",
            "|---|---:|---:|",
            "| 15. writers | 1 | 2x |",
            "| 16. old figure | 9 | 9x |",
            "",
            "## 15. Many writers",
            "",
            "kept",
            "",
            f"## {commands.TITLE}",
            "",
            "old section",
            "",
        ]
    )
    section = Section(commands.TITLE, "new", [Row("figure", "1 ms", "2x", headline=True)])
    text = commands.written(results, section)
    assert "| 16. figure | 1 ms | 2x |" in text and "old" not in text
    assert "| 15. writers | 1 | 2x |" in text and "kept" in text
    assert text.count(f"## {commands.TITLE}") == 1
    assert commands.written(text, section) == text


def test_a_section_written_first_goes_after_the_summary_rows_of_the_sections_before_it():
    results = "\n".join(
        ["## Summary", "", "| 9. imports | 1 | |", "| 17. later | 2 | |", "", "## 9. x", ""]
    )
    section = Section("12. Middle", "about", [Row("figure", "3 ms", headline=True)])
    lines = commands.written(results, section).splitlines()
    assert lines[2:5] == ["| 9. imports | 1 | |", "| 12. figure | 3 ms |  |", "| 17. later | 2 | |"]
    assert "## 12. Middle" in lines

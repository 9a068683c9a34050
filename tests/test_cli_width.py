"""Output that fits the terminal: every listing of ``agentledger``, at 80 and at 120 columns
(``COLUMNS``, piped), on a ledger the size of the demo's, keeps within the width and cuts no
cell to a stub: the columns that do not fit are left out, by priority, ids and dates are
whole. The commands are found by walking the group, so a new one must say what it prints."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import support.migration_harness as harness
from agentledger.cli import cli
from agentledger.cli.demo import build_agent, converse_recorded
from agentledger.ledger import Ledger
from support.cli import PRINTS_NO_ROWS, command_paths, invoke

WIDTHS = (80, 120)

LISTINGS = {
    "conversations": (),
    "runs": (),
    "search": ("Lisbon",),
    "show": ("{conversation}",),
    "trace": ("{run}",),
    "recover": ("--dry-run",),
    "forget": ("{conversation}", "--dry-run"),
    "db history": (),
    "analytics report": (),
    "export parquet": ("{tmp}/parquet",),
}
NOT_LISTINGS = {
    **PRINTS_NO_ROWS,
    "db verify": "a sentence per problem, each kept on one line for grep",
    "analytics sync": "one line: what the sync read",
    "export otlp": "one line: what was sent",
    "import": "a line of progress now and then, and one summary line",
    "prune": "one line: how many checkpoints were deleted",
}
"""The commands whose output is no listing: those that print no rows, and those whose rows
come as lines of prose (their --json has the rows)."""

STUB = re.compile(r"^\S{0,5}…$")
"""A cell cut to almost nothing: ``t…``, ``$0.…``, ``2,4…``."""
DATE = re.compile(r"\d{4}-\d\d-\d\d(?! \d\d:\d\d:\d\d)")
"""A date whose time is not beside it on its line: a wrapped date."""


@dataclass(frozen=True)
class Demo:
    url: str
    conversation: str
    run: str
    """The run that delegated to two subagents."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo's three turns (five runs, two of them subagents') and a stale run."""
    path = tmp_path_factory.mktemp("width") / "demo.db"
    with Ledger.open(path) as ledger:
        agent, _ = build_agent(ledger=ledger)
        results = converse_recorded(agent)
        harness.begin_stale_run(ledger)
    yield Demo(str(path), results[-1].conversation_id, results[-1].run_id)


def test_every_command_is_a_listing_or_says_what_it_prints_instead():
    assert set(command_paths(cli)) == set(LISTINGS) | set(NOT_LISTINGS)
    assert not set(LISTINGS) & set(NOT_LISTINGS)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", sorted(LISTINGS))
def test_every_listing_fits_the_width_and_cuts_no_cell_to_a_stub(demo, tmp_path, command, width):
    fill = {"conversation": demo.conversation, "run": demo.run, "tmp": str(tmp_path)}
    args = [arg.format(**fill) for arg in LISTINGS[command]]
    result = invoke("--db", demo.url, *command.split(), *args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines, f"{command} printed nothing"
    too_long = [line for line in lines if len(line) > width]
    assert too_long == [], f"{command} at {width} columns:\n{result.stdout}"
    stubs = [cell for cell in cells(lines) if STUB.match(cell)]
    assert stubs == [], f"{command} at {width} columns:\n{result.stdout}"
    assert not DATE.search(result.stdout), f"{command} at {width} columns:\n{result.stdout}"


def cells(lines: list[str]) -> Iterator[str]:
    """Every cell of the tables' headers and bodies, whole: a cell wrapped over several lines
    is their text joined (a row goes on while its first cell is empty)."""
    row: list[list[str]] = []
    for line in [*lines, ""]:
        parts = [p.strip() for p in re.split("[│┃]", line.strip("│┃"))]
        if line[:1] in ("│", "┃") and row and not parts[0] and len(parts) == len(row):
            for kept, part in zip(row, parts, strict=True):
                kept.append(part)
            continue
        yield from (" ".join(p for p in kept if p) for kept in row)
        row = [[part] for part in parts] if line[:1] in ("│", "┃") else []


def test_runs_at_80_columns_shows_ids_agent_status_and_cost_and_leaves_the_rest_out(demo):
    output = invoke("--db", demo.url, "runs", env={"COLUMNS": "80"}).stdout
    headers = next(line for line in output.splitlines() if line.startswith("┃"))
    shown = [cell.strip() for cell in headers.strip("┃").split("┃")]
    assert shown == ["id", "conversation", "agent", "status", "cost"]
    wide = invoke("--db", demo.url, "runs", env={"COLUMNS": "240"}).stdout
    assert "started" in wide and "tokens" in wide and "steps" in wide


def test_a_pipe_without_columns_keeps_every_column_of_a_listing(demo):
    piped = invoke("--db", demo.url, "runs").stdout
    headers = next(line for line in piped.splitlines() if line.startswith("┃"))
    assert len(headers.split("┃")) - 2 == 9


def test_an_analytics_listing_with_no_rows_says_so_in_a_line(tmp_path: Path):
    path = tmp_path / "empty.db"
    Ledger.open(path).close()
    output = invoke("--db", str(path), "analytics", "report").stdout
    assert "Tools: nothing recorded yet" in output.splitlines()
    assert "The most expensive runs: nothing recorded yet" in output.splitlines()

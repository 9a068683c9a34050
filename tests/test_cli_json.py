"""``--json`` on every command that prints rows: JSON Lines, one object per row, ids in full,
times in ISO 8601, numbers as numbers, and nothing else on standard output. The commands are
found by walking the ``agentledger`` group, so a new one must say whether it prints rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from click.testing import CliRunner

import support.migration_harness as harness
from agentledger.cli import cli
from agentledger.ledger import Ledger
from support.cli import (
    ANSWER,
    PRINTS_NO_ROWS,
    QUESTION,
    Recorded,
    command_paths,
    console,
    invoke,
    record_a_run_and_a_stale_one,
)
from support.databases import BACKENDS, fresh_database

PRINTS_ROWS = {
    "conversations",
    "runs",
    "search",
    "show",
    "trace",
    "recover",
    "db history",
    "db verify",
    "analytics report",
    "analytics sync",
    "export parquet",
    "export otlp",
    "import",
    "forget",
    "prune",
}


def lines(*args: str) -> list[dict[str, Any]]:
    """The command's standard output, each line parsed as one JSON object."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, f"agentledger {' '.join(args)}: {result.output}"
    parsed = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(isinstance(row, dict) for row in parsed), result.stdout
    return parsed


def iso(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
    assert moment.tzinfo is not None, f"{value} has no time zone"
    return moment


@pytest.fixture(scope="module", params=BACKENDS)
def shared(request: pytest.FixtureRequest) -> Iterator[Recorded]:
    """A ledger holding one finished run and one stale run, shared by tests that only read."""
    with fresh_database(request.param, request) as url:
        yield record_a_run_and_a_stale_one(url)


def test_every_command_either_takes_json_or_prints_no_rows():
    commands = set(command_paths(cli))
    assert commands == PRINTS_ROWS | set(PRINTS_NO_ROWS), "a new command: does it print rows?"
    assert not PRINTS_ROWS & set(PRINTS_NO_ROWS)


@pytest.mark.parametrize("command", sorted(PRINTS_ROWS))
def test_each_command_that_prints_rows_takes_json(command):
    result = CliRunner().invoke(cli, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert "--json" in result.output and "JSON Lines" in " ".join(result.output.split())


def test_conversations_and_runs_print_each_row_by_its_columns_with_full_ids(shared):
    conversations = lines("--db", shared.url, "conversations", "--json")
    assert {c["id"] for c in conversations} == {
        shared.conversation_id,
        shared.stale_conversation_id,
    }
    finished = next(c for c in conversations if c["id"] == shared.conversation_id)
    assert (finished["kind"], finished["version"], finished["messages"]) == ("main", 1, 2)
    assert iso(finished["created_at"]) <= iso(finished["updated_at"])

    runs = {r["id"]: r for r in lines("--db", shared.url, "runs", "--json")}
    assert set(runs) == {shared.run_id, shared.stale_run_id}
    run = runs[shared.run_id]
    assert run["conversation_id"] == shared.conversation_id
    assert (run["status"], run["stop_reason"], run["step_count"]) == ("completed", "completed", 2)
    assert (run["input_tokens"], run["output_tokens"]) == (323, 62)
    assert "checksum" not in run and "metadata" in run
    with Ledger.open(shared.url) as ledger:
        assert iso(run["started_at"]) == ledger.run(shared.run_id).started_at


def test_search_show_and_trace_print_their_rows_as_json(shared):
    (hit,) = lines("--db", shared.url, "search", "marmalade", "--json")
    assert hit["conversation_id"] == shared.conversation_id
    assert (hit["seq"], hit["message"]["role"], hit["message"]["content"]) == (
        1,
        "assistant",
        ANSWER,
    )

    shown = lines("--db", shared.url, "show", shared.conversation_id[:13], "--json")
    assert [(m["role"], m["content"]) for m in shown] == [("user", QUESTION), ("assistant", ANSWER)]
    assert {m["conversation_id"] for m in shown} == {shared.conversation_id}

    (run,) = lines("--db", shared.url, "trace", shared.run_id, "--json")
    assert run["id"] == shared.run_id and run["agent_name"] == "weather-bot"
    assert run["exclusive"]["usage"]["input_tokens"] == 323 and run["inclusive"]["steps"] == 2
    first, second = run["steps"]
    assert (first["step_index"], first["step_type"], first["usage"]["output_tokens"]) == (
        0,
        "tool_use",
        45,
    )
    (tool,) = first["tool_executions"]
    assert (tool["tool_name"], tool["arguments"], tool["is_error"]) == (
        "get_weather",
        {"city": "Paris"},
        False,
    )
    assert isinstance(tool["duration_ms"], float)
    assert second["answer"] == ANSWER and second["stop_reason"] == "completed"


def test_recover_prints_the_stale_runs_as_json_and_nothing_else(shared):
    stale = lines("--db", shared.url, "recover", "--dry-run", "--stale-after", "0", "--json")
    assert [r["id"] for r in stale] == [shared.stale_run_id]
    assert stale[0]["status"] == "running"


def test_db_history_and_verify_print_their_rows_as_json(shared):
    history = lines("db", "history", "--json")
    assert [r["revision"] for r in history] == list(reversed(harness.revisions()))
    assert history[-1]["down_revision"] is None

    verified = {r["table"]: r for r in lines("--db", shared.url, "db", "verify", "--json")}
    assert verified["agent_runs"]["rows"] == 2
    assert verified["agent_runs"]["rows_with_checksum"] == 1  # the stale run is not sealed yet


def test_analytics_report_prints_a_row_of_every_table_as_json(shared, tmp_path):
    rows = lines("--db", shared.url, "analytics", "report", "--json")
    tables = {r["table"] for r in rows}
    assert {"conversations", "agents", "models", "runs", "tools", "completeness"} <= tables
    assert "running_runs" in tables
    runs = {r["run_id"]: r for r in rows if r["table"] == "runs"}
    assert set(runs) == {shared.run_id, shared.stale_run_id}
    top = runs[shared.run_id]
    assert top["inclusive"]["input_tokens"] == 323 and isinstance(top["runs"], int)
    (running,) = [r for r in rows if r["table"] == "running_runs"]
    assert running["run_id"] == shared.stale_run_id
    iso(running["started_at"])

    page = tmp_path / "report.html"
    result = invoke("--db", shared.url, "analytics", "report", "--json", "--html", str(page))
    assert result.exit_code == 0 and page.exists()
    assert f"wrote {page}" in result.stderr and "wrote" not in result.stdout


def test_export_parquet_prints_each_table_it_wrote_as_json(shared, tmp_path):
    exported = lines("--db", shared.url, "export", "parquet", str(tmp_path / "out"), "--json")
    by_table = {r["table"]: r for r in exported}
    assert by_table["agent_runs"]["rows"] == 2 and by_table["agent_runs"]["files"] >= 1


def test_the_console_script_piped_into_another_program_prints_json_lines(tmp_path):
    recorded = record_a_run_and_a_stale_one(str(tmp_path / "ledger.db"))
    done = console("runs", "--db", "ledger.db", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {json.loads(line)["id"] for line in done.stdout.splitlines()} == {
        recorded.run_id,
        recorded.stale_run_id,
    }

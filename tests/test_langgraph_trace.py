"""LangGraph runs (``LedgerSaver``) seen as any other run, on SQLite and PostgreSQL: ``agentledger
trace`` shows the invocation's run, its model calls as steps with their tokens and the tool it
called; the OpenTelemetry export makes of it a run span, a chat span per model call with its
tokens and a tool span, each tool's time running from the model's asking to its result."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentledger.integrations.langgraph import LedgerSaver
from agentledger.integrations.otel import export_otlp
from agentledger.ledger import Ledger
from support.cli import flat, ok
from support.graphs import ask, react, replies
from support.ledger import Database


def _invoked(ledger: Ledger, db: Database) -> str:
    """The graph asked once (a tool call, then the answer); the id of its run."""
    ask(react(LedgerSaver(ledger), replies(1)), 1)
    return str(db.scalar("SELECT id FROM agent_runs"))


def test_trace_shows_a_graph_invocation_as_a_run_of_steps_and_tools(
    ledger: Ledger, db: Database, db_url: str
):
    run_id = _invoked(ledger, db)

    shown = flat(ok("--db", db_url, "trace", run_id[:13]))

    assert f"run {run_id[:8]} · langgraph · completed · 2 steps · 1670 in / 29 out" in shown
    assert "step 0 · tool_use · 800 in / 20 out" in shown
    assert "✓ get_weather" in shown and "→ 22C, sunny in Paris" in shown
    assert "step 1 · response · 870 in / 9 out" in shown and "answer: Sunny, 22C (1)." in shown
    (run,) = [
        json.loads(line) for line in ok("--db", db_url, "trace", run_id, "--json").splitlines()
    ]
    assert [s["model"] for s in run["steps"]] == ["gpt-4o", "gpt-4o"]


def _spans(output: Path) -> dict[str, list[dict[str, Any]]]:
    """The spans of an OTLP JSON file by name, each with its attributes as plain values."""
    (line,) = output.read_text().splitlines()
    (scope,) = json.loads(line)["resourceSpans"][0]["scopeSpans"]
    spans: dict[str, list[dict[str, Any]]] = {}
    for span in scope["spans"]:
        found = {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
        spans.setdefault(span["name"], []).append({**span, "attributes": found})
    return spans


def test_the_opentelemetry_export_has_the_run_its_model_calls_with_tokens_and_its_tool(
    ledger: Ledger, db: Database, tmp_path: Path
):
    run_id = _invoked(ledger, db)
    output = tmp_path / "traces.jsonl"

    export_otlp(ledger, since=datetime.now(UTC) - timedelta(hours=1), output=output)

    spans = _spans(output)
    assert sorted((name, len(found)) for name, found in spans.items()) == [
        ("chat gpt-4o", 2),
        ("execute_tool get_weather", 1),
        ("invoke_agent langgraph", 1),
    ]
    (run,), (tool_span,) = spans["invoke_agent langgraph"], spans["execute_tool get_weather"]
    assert run["attributes"]["agentledger.run_id"] == run_id
    assert run["attributes"]["gen_ai.conversation.id"] == "chat"
    assert all(s["parentSpanId"] == run["spanId"] for s in (*spans["chat gpt-4o"], tool_span))
    tokens = [
        (
            s["attributes"]["gen_ai.usage.input_tokens"],
            s["attributes"]["gen_ai.usage.output_tokens"],
        )
        for s in spans["chat gpt-4o"]
    ]
    assert sorted(tokens) == [("800", "20"), ("870", "9")]
    assert tool_span["attributes"]["gen_ai.tool.call.id"] == "call-1"

    # The tool ran from the model's asking (its step's end) to its result, and the next model
    # call began when the result was there.
    times = db.row(
        "SELECT s.finished_at AS asked, t.started_at AS began, t.finished_at AS returned, "
        "n.started_at AS next_call FROM tool_executions t "
        "JOIN step_executions s ON s.id = t.step_id "
        "JOIN step_executions n ON n.run_id = s.run_id AND n.step_index = s.step_index + 1"
    )
    assert times["began"] == times["asked"] and times["next_call"] == times["returned"]

"""``agentledger export otlp`` (and ``export_otlp``): recorded runs as OpenTelemetry spans after
the fact, on SQLite and PostgreSQL. POSTed to a collector on loopback (a small ``http.server``
that decodes each request with ``opentelemetry-proto``), or written as OTLP JSON; the spans'
names, links, times and attributes are those of the ledger's rows, the same as the live
tracer's, and exporting twice gives the same ids. Bad input gets a clear error."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentledger import AgentBuilder, ScriptedLLM, UsageError
from agentledger.cli import cli
from agentledger.errors import ExportError
from agentledger.integrations.otel import OpenTelemetryTracer, export_otlp
from agentledger.ledger import Ledger
from support.ledger import Database
from support.otel import QUESTION, lead, response, run_span_attributes, runs_by_agent


class Collector:
    """An OTLP/HTTP collector on loopback: keeps each request it takes, decoded, and answers
    ``status``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.requests.append((self.path, dict(self.headers), body))
                answer = b"" if collector.status < 300 else b"the collector is full"
                self.send_response(collector.status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def decoded(self) -> list[ExportTraceServiceRequest]:
        found = []
        for _, _, body in self.requests:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            found.append(request)
        return found

    def spans(self) -> list[Span]:
        return [
            span
            for request in self.decoded()
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.close()


def export(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", db_url, "export", "otlp", *args])


def attributes(span: Span) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in span.attributes:
        kind = pair.value.WhichOneof("value")
        value = getattr(pair.value, kind)
        if kind == "array_value":
            value = tuple(v.string_value for v in value.values)
        found[pair.key] = value
    return found


def nanos(moment: datetime) -> int:
    return int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) * 1000


def as_utc(moment: datetime | str) -> datetime:
    """A time read with SQL (SQLite gives text), as an aware UTC datetime."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def test_the_recorded_runs_reach_a_collector_as_the_spans_of_their_rows(
    ledger: Ledger, db: Database, db_url: str, collector: Collector
):
    run_id = lead(ledger).build().run(QUESTION).run_id
    result = export(db_url, "--since", "1h", "--endpoint", collector.url)
    assert result.exit_code == 0, result.output
    assert "Exported 1 trace (9 spans)" in result.stdout
    ((path, headers, _),) = collector.requests
    assert path == "/v1/traces"
    assert headers["Content-Type"] == "application/x-protobuf"
    (request,) = collector.decoded()
    (resource,) = request.resource_spans
    assert {a.key: a.value.string_value for a in resource.resource.attributes} == {
        "service.name": "agentledger"
    }
    spans = {span.name: span for span in collector.spans()}
    assert sorted(spans) == [
        "chat scripted-1",
        "chat scripted-mini",
        "execute_tool lookup",
        "execute_tool spawn_subagent",
        "execute_tool weather",
        "invoke_agent lead",
        "invoke_agent researcher",
    ]
    assert len({span.trace_id for span in collector.spans()}) == 1
    assert len(collector.spans()) == 9  # one chat span per step: the lead's two share a name

    lead_span, child = spans["invoke_agent lead"], spans["invoke_agent researcher"]
    spawn = spans["execute_tool spawn_subagent"]
    assert lead_span.parent_span_id == b""
    assert spawn.parent_span_id == lead_span.span_id
    assert child.parent_span_id == spawn.span_id
    assert spans["execute_tool lookup"].parent_span_id == child.span_id
    assert spans["chat scripted-mini"].parent_span_id == child.span_id
    assert lead_span.kind == Span.SPAN_KIND_INTERNAL
    assert spans["chat scripted-mini"].kind == Span.SPAN_KIND_CLIENT

    runs = runs_by_agent(db)
    assert runs["lead"]["id"] == run_id
    for name, span in (("lead", lead_span), ("researcher", child)):
        row = runs[name]
        assert span.start_time_unix_nano == nanos(as_utc(row["started_at"]))
        assert span.end_time_unix_nano == nanos(as_utc(row["finished_at"]))
        assert attributes(span) == run_span_attributes(name, row)

    tools = db.rows(
        "SELECT t.id, t.run_id, t.tool_call_id, t.tool_name, t.child_run_id, t.started_at,"
        " t.finished_at, s.id AS step_id, s.step_index, r.conversation_id FROM tool_executions t"
        " JOIN step_executions s ON s.id = t.step_id JOIN agent_runs r ON r.id = t.run_id"
    )
    for row in tools:
        span = spans[f"execute_tool {row['tool_name']}"]
        assert span.start_time_unix_nano == nanos(as_utc(row["started_at"]))
        assert span.end_time_unix_nano == nanos(as_utc(row["finished_at"]))
        assert attributes(span) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": row["tool_name"],
            "gen_ai.tool.call.id": row["tool_call_id"],
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": row["conversation_id"],
            "agentledger.run_id": row["run_id"],
            "agentledger.step_id": row["step_id"],
            "agentledger.step_index": row["step_index"],
            "agentledger.tool_execution_id": row["id"],
            **({"agentledger.child_run_id": row["child_run_id"]} if row["child_run_id"] else {}),
        }

    steps = db.rows(
        "SELECT s.id, s.run_id, s.step_index, s.model, s.finish_reason, s.input_tokens,"
        " s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.started_at,"
        " r.conversation_id FROM step_executions s JOIN agent_runs r ON r.id = s.run_id"
    )
    chats = {
        attributes(s)["agentledger.step_id"]: s
        for s in collector.spans()
        if s.name.startswith("chat ")
    }
    assert len(chats) == len(steps) == 4
    for row in steps:
        chat = chats[row["id"]]
        assert chat.start_time_unix_nano == nanos(as_utc(row["started_at"]))
        assert attributes(chat) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": row["model"],
            "gen_ai.response.model": row["model"],
            "gen_ai.usage.input_tokens": row["input_tokens"],
            "gen_ai.usage.output_tokens": row["output_tokens"],
            "gen_ai.usage.cache_read.input_tokens": row["cache_read_tokens"],
            "gen_ai.usage.cache_creation.input_tokens": row["cache_write_tokens"],
            "gen_ai.response.finish_reasons": (row["finish_reason"],),
            "gen_ai.conversation.id": row["conversation_id"],
            "agentledger.run_id": row["run_id"],
            "agentledger.step_id": row["id"],
            "agentledger.step_index": row["step_index"],
        }


def test_the_exported_spans_are_the_live_tracers_spans(ledger: Ledger, collector: Collector):
    """The same names, links and attributes, but for what only one side knows: the provider
    (live) and the step's id (exported)."""
    live = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(live))
    lead(ledger).with_tracing(OpenTelemetryTracer(tracer_provider=provider)).build().run(QUESTION)
    export_otlp(ledger, since=datetime.now(UTC) - timedelta(hours=1), endpoint=collector.url)

    def shape(name: str, found: dict[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
        left_out = {"agentledger.step_id", "gen_ai.provider.name"}
        kept = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in found.items()}
        return name, tuple(sorted((k, v) for k, v in kept.items() if k not in left_out))

    exported = sorted(shape(s.name, attributes(s)) for s in collector.spans())
    emitted = sorted(shape(s.name, dict(s.attributes or {})) for s in live.get_finished_spans())
    assert exported == emitted
    provider.shutdown()


def test_exporting_twice_sends_the_same_spans(ledger: Ledger, db_url: str, collector: Collector):
    lead(ledger).build().run(QUESTION)
    for _ in range(2):
        assert export(db_url, "--since", "1h", "--endpoint", collector.url).exit_code == 0
    first, second = collector.decoded()
    assert first == second
    assert len({s.span_id for s in collector.spans()}) == 9


def test_the_json_file_is_otlp_json_with_the_same_ids(
    ledger: Ledger, db_url: str, collector: Collector, tmp_path: Path
):
    lead(ledger).build().run(QUESTION)
    output = tmp_path / "traces.jsonl"
    result = export(db_url, "--since", "2000-01-01", "--output", str(output))
    assert result.exit_code == 0, result.output
    assert export(db_url, "--since", "2000-01-01", "--endpoint", collector.url).exit_code == 0
    (line,) = output.read_text().splitlines()
    document = json.loads(line)
    (scope,) = document["resourceSpans"][0]["scopeSpans"]
    assert scope["scope"]["name"] == "agentledger"
    by_id = {span.span_id.hex(): span for span in collector.spans()}
    assert sorted(s["spanId"] for s in scope["spans"]) == sorted(by_id)
    for span in scope["spans"]:
        sent = by_id[span["spanId"]]
        assert span["traceId"] == sent.trace_id.hex()
        assert span.get("parentSpanId", "") == sent.parent_span_id.hex()
        assert span["name"] == sent.name
        assert span["kind"] == sent.kind  # a number, as OTLP JSON has enums
        assert int(span["startTimeUnixNano"]) == sent.start_time_unix_nano
        found = {a["key"]: a["value"] for a in span["attributes"]}
        assert found["agentledger.run_id"] == {
            "stringValue": attributes(sent)["agentledger.run_id"]
        }


def test_a_failed_run_exports_as_error_spans(ledger: Ledger, db_url: str, collector: Collector):
    def down(request):
        raise ConnectionError("the provider went away")

    AgentBuilder().with_llm(ScriptedLLM([down])).with_ledger(ledger).build().run(QUESTION)
    assert export(db_url, "--since", "1h", "--endpoint", collector.url).exit_code == 0
    spans = {span.name: span for span in collector.spans()}
    for name in ("invoke_agent agent", "chat"):
        assert spans[name].status.code == Status.STATUS_CODE_ERROR
        assert attributes(spans[name])["error.type"] == "ConnectionError"
        assert "the provider went away" in spans[name].status.message


def test_the_summary_is_one_json_row_with_json(
    ledger: Ledger, db_url: str, collector: Collector, tmp_path: Path
):
    lead(ledger).build().run(QUESTION)
    output = tmp_path / "traces.jsonl"
    result = export(db_url, "--since", "1h", "--output", str(output), "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {
            "traces": 1,
            "spans": 9,
            "requests": 1,
            "destination": str(output),
            "rejected_spans": 0,
        }
    ]


def test_since_leaves_out_older_run_trees(ledger: Ledger, db_url: str, collector: Collector):
    lead(ledger).build().run(QUESTION)
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    result = export(db_url, "--since", later, "--endpoint", collector.url)
    assert result.exit_code == 0, result.output
    assert "Exported 0 traces (0 spans)" in result.stdout
    assert collector.spans() == []


def test_contents_are_exported_only_when_asked(ledger: Ledger, db_url: str, collector: Collector):
    lead(ledger).build().run(QUESTION)
    assert export(db_url, "--since", "1h", "--endpoint", collector.url).exit_code == 0
    args = ("--since", "1h", "--endpoint", collector.url, "--capture-content")
    assert export(db_url, *args).exit_code == 0
    plain, full = collector.decoded()
    keys = [
        {
            a.key
            for r in d.resource_spans
            for s in r.scope_spans
            for x in s.spans
            for a in x.attributes
        }
        for d in (plain, full)
    ]
    assert "gen_ai.output.messages" not in keys[0]
    assert {"gen_ai.output.messages", "gen_ai.tool.call.arguments"} <= keys[1]


def test_a_long_export_tells_its_progress_on_stderr(tmp_path: Path, collector: Collector):
    url = str(tmp_path / "many.db")
    with Ledger.open(url) as ledger:
        agent = AgentBuilder().with_llm(ScriptedLLM([response("hi")] * 60)).with_ledger(ledger)
        built = agent.build()
        for _ in range(60):
            built.run("hello")
    result = export(url, "--since", "1d", "--endpoint", collector.url)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "exported 50 of 60 run trees",
        "exported 60 of 60 run trees",
    ]
    assert len(collector.requests) == 2
    assert "Exported 60 traces (120 spans)" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "last tuesday", "--output", "x.json"], "'last tuesday' is neither a date"),
        (["--since", "1h"], "give exactly one of --endpoint URL or --output FILE"),
        (["--since", "1h", "--endpoint", "localhost:4318"], "is not an http:// or https:// URL"),
        (["--since", "1h", "--endpoint", "ftp://collector"], "is not an http:// or https:// URL"),
        (["--since", "1h", "--endpoint", "http://x", "--header", "nope"], "is not NAME=VALUE"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, args: list[str], message: str):
    url = str(tmp_path / "ledger.db")
    Ledger.open(url).close()
    result = export(url, *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_collector_answering_an_error_is_a_clear_error(
    ledger: Ledger, db_url: str, collector: Collector
):
    lead(ledger).build().run(QUESTION)
    collector.status = 503
    result = export(db_url, "--since", "1h", "--endpoint", collector.url + "/custom/traces")
    assert result.exit_code == 1
    assert f"the collector at {collector.url}/custom/traces answered 503" in result.output
    assert "the collector is full" in result.output
    with pytest.raises(ExportError, match="answered 503"):
        export_otlp(ledger, since=datetime(2000, 1, 1), endpoint=collector.url)


def test_an_unreachable_collector_is_a_clear_error(ledger: Ledger, db_url: str):
    lead(ledger).build().run(QUESTION)
    closed = Collector()
    closed.close()  # nothing listens on its port any more
    result = export(db_url, "--since", "1h", "--endpoint", closed.url)
    assert result.exit_code == 1
    assert f"cannot send traces to the collector at {closed.url}/v1/traces" in result.output


def test_export_otlp_needs_one_destination(ledger: Ledger, tmp_path: Path):
    since = datetime(2000, 1, 1)
    with pytest.raises(UsageError, match="exactly one destination"):
        export_otlp(ledger, since=since)
    with pytest.raises(UsageError, match="exactly one destination"):
        export_otlp(ledger, since=since, endpoint="http://x", output=tmp_path / "x.json")

"""OpenTelemetry traces as they happen (``AgentBuilder.with_tracing(OpenTelemetryTracer())``):
the spans of a run with tools and a subagent, taken by the SDK's in-memory exporter, named and
attributed by the GenAI semantic conventions, and checked against the ledger's rows read with
SQL, on SQLite and PostgreSQL; through ``run``, ``arun``, ``stream`` and ``astream``. Message
contents only on opt-in; failures as ERROR spans with ``error.type``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.trace import SpanKind, StatusCode

from agentledger import AgentBuilder, ScriptedLLM, ToolCall
from agentledger.integrations.otel import CAPTURE_CONTENT_ENV, OpenTelemetryTracer
from agentledger.ledger import Ledger
from support.ledger import Database
from support.otel import (
    ANSWER,
    CHILD_ANSWER,
    QUESTION,
    TASK,
    broken,
    lead,
    response,
    run_span_attributes,
    runs_by_agent,
)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def traced_agent(
    provider: TracerProvider, ledger: Ledger | None = None, **tracer_options: bool
) -> AgentBuilder:
    tracer = OpenTelemetryTracer(tracer_provider=provider, **tracer_options)
    return lead(ledger).with_tracing(tracer)


def run_by(mode: str, builder: AgentBuilder) -> str:
    """The run's id, run through ``mode`` (``+parallel``: the tools of a step at once)."""
    mode, _, parallel = mode.partition("+")
    agent = (builder.with_parallel_tools(2) if parallel else builder).build()
    if mode == "run":
        return agent.run(QUESTION).run_id
    if mode == "arun":
        return asyncio.run(agent.arun(QUESTION)).run_id
    if mode == "stream":
        stream = agent.stream(QUESTION)
        for _ in stream:
            pass
        return stream.result.run_id

    async def consume() -> str:
        stream = agent.astream(QUESTION)
        async for _ in stream:
            pass
        return stream.result.run_id

    return asyncio.run(consume())


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def only(spans: dict[str, list[ReadableSpan]], name: str) -> ReadableSpan:
    (span,) = spans[name]
    return span


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


@pytest.mark.parametrize(
    "mode", ["run", "arun", "stream", "astream", "run+parallel", "arun+parallel"]
)
def test_a_run_with_tools_and_a_subagent_emits_genai_spans_that_match_the_ledger(
    mode: str, provider: TracerProvider, exporter: InMemorySpanExporter, ledger, db: Database
):
    run_id = run_by(mode, traced_agent(provider, ledger))
    spans = by_name(exporter.get_finished_spans())

    assert sorted(spans) == [
        "chat scripted-1",
        "chat scripted-mini",
        "execute_tool lookup",
        "execute_tool spawn_subagent",
        "execute_tool weather",
        "invoke_agent lead",
        "invoke_agent researcher",
    ]
    lead, child = only(spans, "invoke_agent lead"), only(spans, "invoke_agent researcher")
    spawn = only(spans, "execute_tool spawn_subagent")
    # The tree: the lead's model calls and tools under its run; the subagent's run under the
    # tool call that spawned it, its own calls under it; one trace.
    assert lead.parent is None
    assert {parent_of(s) for s in spans["chat scripted-1"]} == {span_id(lead)}
    assert parent_of(only(spans, "execute_tool weather")) == span_id(lead)
    assert parent_of(spawn) == span_id(lead)
    assert parent_of(child) == span_id(spawn)
    assert {parent_of(s) for s in spans["chat scripted-mini"]} == {span_id(child)}
    assert parent_of(only(spans, "execute_tool lookup")) == span_id(child)
    assert len({s.context.trace_id for ss in spans.values() for s in ss if s.context}) == 1
    assert lead.kind is SpanKind.INTERNAL
    assert {s.kind for s in spans["chat scripted-1"]} == {SpanKind.CLIENT}

    runs = runs_by_agent(db)
    assert runs["lead"]["id"] == run_id
    for name, span in (("lead", lead), ("researcher", child)):
        row = runs[name]
        assert dict(span.attributes or {}) == run_span_attributes(name, row)
        assert span.status.status_code is StatusCode.UNSET

    steps = db.rows(
        "SELECT s.run_id, s.step_index, s.model, s.finish_reason, s.input_tokens,"
        " s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, r.conversation_id"
        " FROM step_executions s JOIN agent_runs r ON r.id = s.run_id"
    )
    chats = spans["chat scripted-1"] + spans["chat scripted-mini"]
    assert len(steps) == len(chats) == 4
    seen = {(s.attributes["agentledger.run_id"], s.attributes["agentledger.step_index"]): s
            for s in chats}  # fmt: skip
    for row in steps:
        chat = seen[(row["run_id"], row["step_index"])]
        assert dict(chat.attributes or {}) == {
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
            "agentledger.step_index": row["step_index"],
            # The lead's model says it is OpenAI's; the subagent's scripted one says nothing.
            **({"gen_ai.provider.name": "openai"} if row["run_id"] == run_id else {}),
        }

    tools = db.rows(
        "SELECT t.id, t.run_id, t.tool_call_id, t.tool_name, t.child_run_id, s.step_index,"
        " r.conversation_id FROM tool_executions t JOIN step_executions s ON s.id = t.step_id"
        " JOIN agent_runs r ON r.id = t.run_id"
    )
    assert len(tools) == 3
    for row in tools:
        span = only(spans, f"execute_tool {row['tool_name']}")
        assert dict(span.attributes or {}) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": row["tool_name"],
            "gen_ai.tool.call.id": row["tool_call_id"],
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": row["conversation_id"],
            "agentledger.run_id": row["run_id"],
            "agentledger.step_index": row["step_index"],
            "agentledger.tool_execution_id": row["id"],
            **({"agentledger.child_run_id": row["child_run_id"]} if row["child_run_id"] else {}),
        }
    assert spawn.attributes["agentledger.child_run_id"] == runs["researcher"]["id"]


PARIS = {"city": "Paris"}


def emitted(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    return by_name(exporter.get_finished_spans())


def test_message_contents_are_left_out_unless_the_app_opts_in(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch
):
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    traced_agent(provider).build().run(QUESTION)
    keys = {k for s in exporter.get_finished_spans() for k in (s.attributes or {})}
    assert not {k for k in keys if "messages" in k or "instructions" in k or ".call.a" in k}
    assert "gen_ai.tool.call.result" not in keys


@pytest.mark.parametrize("opt_in", ["env", "option"])
def test_opted_in_contents_are_the_conventions_messages(
    opt_in: str, provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch
):
    if opt_in == "env":
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
        builder = traced_agent(provider)
    else:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "false")  # the explicit option wins
        builder = traced_agent(provider, capture_content=True)
    builder.with_system_prompt("You are the lead.").build().run(QUESTION)
    spans = emitted(exporter)

    first, last = sorted(spans["chat scripted-1"], key=lambda s: s.start_time or 0)
    assert json.loads(first.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You are the lead."}
    ]
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    ]
    assert json.loads(first.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "p1",
                    "name": "weather",
                    "arguments": {"city": "Paris"},
                },
                {
                    "type": "tool_call",
                    "id": "p2",
                    "name": "spawn_subagent",
                    "arguments": {"subagent": "researcher", "task": TASK},
                },
            ],
            "finish_reason": "tool_calls",
        }
    ]
    inputs = json.loads(last.attributes["gen_ai.input.messages"])
    assert inputs[-2:] == [
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "p1", "response": "sunny in Paris"}],
            "name": "weather",
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "p2", "response": CHILD_ANSWER}],
            "name": "spawn_subagent",
        },
    ]
    assert json.loads(last.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": ANSWER}],
            "finish_reason": "stop",
        }
    ]
    weather_span = only(spans, "execute_tool weather")
    assert json.loads(weather_span.attributes["gen_ai.tool.call.arguments"]) == {"city": "Paris"}
    assert weather_span.attributes["gen_ai.tool.call.result"] == "sunny in Paris"


def test_a_failing_model_call_is_an_error_on_its_span_and_its_runs(
    provider: TracerProvider, exporter: InMemorySpanExporter
):
    def down(request):
        raise ConnectionError("the provider went away")

    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([down]))
        .with_tracing(OpenTelemetryTracer(tracer_provider=provider))
        .build()
    )
    result = agent.run(QUESTION)
    assert result.status.value == "failed"
    spans = emitted(exporter)
    chat, run = only(spans, "chat scripted"), only(spans, "invoke_agent agent")
    for span in (chat, run):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == "ConnectionError"
        assert "the provider went away" in (span.status.description or "")
    assert run.attributes["agentledger.status"] == "failed"


def test_a_tool_that_raises_is_an_error_on_its_span_and_the_run_goes_on(
    provider: TracerProvider, exporter: InMemorySpanExporter
):
    llm = ScriptedLLM(
        [response("", ToolCall(id="b1", name="broken", arguments={"city": "Oslo"})), response("ok")]
    )
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([broken])
        .with_tracing(OpenTelemetryTracer(tracer_provider=provider))
        .build()
    )
    assert agent.run(QUESTION).answer == "ok"
    spans = emitted(exporter)
    failed = only(spans, "execute_tool broken")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "ValueError"
    assert only(spans, "invoke_agent agent").status.status_code is StatusCode.UNSET


def test_a_stream_closed_early_ends_its_run_span_as_an_error(
    provider: TracerProvider, exporter: InMemorySpanExporter
):
    slow = ScriptedLLM([response("a long answer, told slowly")], chunk_size=1, chunk_delay=0.05)
    agent = (
        AgentBuilder()
        .with_llm(slow)
        .with_tracing(OpenTelemetryTracer(tracer_provider=provider))
        .build()
    )
    stream = agent.stream(QUESTION)
    next(event for event in stream if event.type == "text_delta")
    assert stream.close()
    spans = emitted(exporter)
    for name in ("invoke_agent agent", "chat scripted"):
        span = only(spans, name)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == "StreamClosed"


def test_the_run_span_is_a_child_of_the_apps_current_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
):
    with provider.get_tracer("app").start_as_current_span("request") as request:
        traced_agent(provider).build().run(QUESTION)
    run = only(emitted(exporter), "invoke_agent lead")
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id


def test_the_global_tracer_provider_is_used_when_none_is_given(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch
):
    """The default: the provider the app set globally, even after the tracer was made."""
    tracer = OpenTelemetryTracer()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    AgentBuilder().with_llm(ScriptedLLM([response("hi")])).with_tracing(tracer).build().run("?")
    assert sorted(emitted(exporter)) == ["chat scripted", "invoke_agent agent"]


def test_every_gen_ai_attribute_is_one_of_the_pinned_conventions(
    provider: TracerProvider, exporter: InMemorySpanExporter
):
    traced_agent(provider, capture_content=True).build().run(QUESTION)
    registry = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_")}
    used = {k for s in exporter.get_finished_spans() for k in (s.attributes or {})}
    gen_ai = {k for k in used if k.startswith("gen_ai.")}
    assert gen_ai - registry == set()
    assert {k for k in used - gen_ai if not k.startswith("agentledger.")} <= {"error.type"}


def without_opentelemetry(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in a fresh interpreter where OpenTelemetry cannot be imported, as without
    the otel extra."""
    script = "import sys\nsys.modules['opentelemetry'] = None\n" + code
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )


def test_without_the_extra_the_integration_says_what_to_install():
    found = without_opentelemetry(
        "from agentledger.errors import ConfigurationError\n"
        "try:\n"
        "    import agentledger.integrations.otel\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    assert "pip install 'agentledger[otel]'" in found.stdout, found.stderr


def test_without_the_extra_the_export_command_says_what_to_install(tmp_path):
    ledger = tmp_path / "ledger.db"
    Ledger.open(str(ledger)).close()
    found = without_opentelemetry(
        "from agentledger.cli import main\nsys.argv[0] = 'agentledger'\nmain()",
        *("--db", str(ledger), "export", "otlp", "--since", "1d", "--output", "x.json"),
    )
    assert found.returncode == 1
    assert "Error: OpenTelemetry is not installed" in found.stderr
    assert "pip install 'agentledger[otel]'" in found.stderr
    assert "Traceback" not in found.stderr

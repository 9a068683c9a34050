"""Run by the interpreter of a fresh virtual environment into which the agentledger wheel was
installed with one extra (``tests/test_install_extras.py``): it records a scripted run in a
ledger, uses what the extra promises, and prints what it found as one JSON object.

Usage: ``python install_probe.py EXTRA LEDGER_URL``, EXTRA being ``base`` for no extra. Only
the standard library and what the install brought are imported here.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

ROLLUP = "SELECT agent_path, inclusive_input_tokens FROM run_rollup ORDER BY path"


def record_a_run(url: str) -> str:
    """One run of a scripted agent that calls a tool, then answers; its id."""
    from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall, Usage, tool
    from agentledger.ledger import Ledger

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})],
                usage=Usage(input_tokens=10, output_tokens=2),
            ),
            InferenceResponse(content="5", usage=Usage(input_tokens=20, output_tokens=1)),
        ]
    )
    with Ledger.open(url) as ledger:
        agent = AgentBuilder().with_llm(llm).with_tools([add]).with_ledger(ledger).build()
        return agent.run("What is 2 + 3?").run_id


def analytics_error(url: str) -> str:
    """What ``Analytics.open`` says where DuckDB is not installed."""
    from agentledger import Analytics
    from agentledger.errors import ConfigurationError

    try:
        Analytics.open(url).close()
    except ConfigurationError as exc:
        return str(exc)
    return "Analytics.open did not fail"


def sqlite_rows(url: str, query: str, *params: Any) -> list[list[Any]]:
    """The rows of ``query`` (with ``params``) on the ledger file of ``url`` (a
    ``sqlite:///`` one), read with the standard library's sqlite3."""
    connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return [list(row) for row in connection.execute(query, params)]
    finally:
        connection.close()


def said(url: str, conversation_id: str) -> list[list[Any]]:
    """The role and text of each message of the conversation, in order, read with SQL."""
    query = "SELECT role, content FROM conversation_messages WHERE conversation_id = ? ORDER BY seq"
    return sqlite_rows(url, query, conversation_id)


def agentledger(*args: str) -> dict[str, Any]:
    """The ``agentledger`` command the wheel installed beside this interpreter, run with
    ``args``: its exit code and what it printed."""
    command = [str(Path(sys.executable).parent / "agentledger"), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return {"code": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()}


def base_errors(url: str) -> dict[str, Any]:
    """What each extra's feature says where its extra is not installed: ``Analytics.open``,
    importing ``LedgerSaver`` and ``LedgerConversationStore``, and ``agentledger import`` (dry
    run and real)."""
    from agentledger.errors import ConfigurationError

    try:
        from agentledger.integrations.langgraph import LedgerSaver  # noqa: F401
    except ConfigurationError as exc:
        langgraph = str(exc)
    else:
        langgraph = "LedgerSaver was imported"
    try:
        from agentledger.integrations.pydantic_ai import LedgerConversationStore  # noqa: F401
    except ConfigurationError as exc:
        pydantic_ai = str(exc)
    else:
        pydantic_ai = "LedgerConversationStore was imported"
    try:
        from agentledger.integrations.adk import LedgerSessionService  # noqa: F401
    except ConfigurationError as exc:
        adk = str(exc)
    else:
        adk = "LedgerSessionService was imported"
    return {
        "analytics": analytics_error(url),
        "langgraph": langgraph,
        "pydantic-ai": pydantic_ai,
        "adk": adk,
        "import": import_twice(url),
    }


def session_items(url: str) -> Any:
    """What an OpenAI Agents SDK session kept in the ledger reads back."""
    import asyncio

    from agentledger.integrations.openai_agents import LedgerSession
    from agentledger.ledger import Ledger

    with Ledger.open(url) as ledger:
        session = LedgerSession("probe", ledger)
        asyncio.run(session.add_items([{"role": "user", "content": "hello"}]))
        return asyncio.run(session.get_items())


def rollup(url: str, convert: Callable[[Any], Any]) -> Any:
    from agentledger import Analytics

    with Analytics.open(url) as analytics:
        return convert(analytics.sql(ROLLUP))


def converted(value: Any, rows: list[list[Any]]) -> dict[str, Any]:
    """The library a conversion's result comes from, and its rows as lists."""
    return {"library": type(value).__module__.split(".")[0], "rows": rows}


def as_pandas(url: str) -> Any:
    frame = rollup(url, lambda relation: relation.df())
    return converted(frame, frame.values.tolist())


def as_arrow(url: str) -> Any:
    table = rollup(url, lambda relation: relation.arrow().read_all())
    return converted(table, [list(row.values()) for row in table.to_pylist()])


def as_polars(url: str) -> Any:
    frame = rollup(url, lambda relation: relation.pl())
    return converted(frame, [list(row) for row in frame.rows()])


def as_rows(url: str) -> Any:
    rows = rollup(url, lambda relation: relation.fetchall())
    return converted(rows, [list(row) for row in rows])


def chat_app_conversation(url: str) -> Any:
    """A question asked of the example chat app (``examples/chat_app`` of this checkout, which
    the wheel does not hold) over the ledger at ``url``: the conversation it then shows."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import uvicorn  # noqa: F401  (what `uvicorn examples.chat_app.app:app` needs)
    from fastapi.testclient import TestClient

    from examples.chat_app.app import OfflineModel, create_app

    with TestClient(create_app(url, OfflineModel(words=3, delay=0.0))) as client:
        events = client.post("/conversations/new/runs", json={"text": "Lisbon"}).text
        first = next(line for line in events.splitlines() if line.startswith("data: "))
        conversation_id = json.loads(first.removeprefix("data: "))["conversation_id"]
        return client.get(f"/conversations/{conversation_id}").json()["messages"]


def viewed(url: str) -> dict[str, Any]:
    """The viewer of the ledger at ``url``, as a browser on this machine reads it: the
    status of its conversations page, of its stylesheet (shipped in the wheel), and whether
    the page names the probe's agent."""
    from starlette.testclient import TestClient

    from agentledger.ledger import Ledger
    from agentledger.ui import create_app

    with Ledger.open(url, migrate=False, read_only=True) as ledger:
        client = TestClient(create_app(ledger), base_url="http://127.0.0.1:8765")
        page, style = client.get("/"), client.get("/static/ui.css")
        return {"page": page.status_code, "style": style.status_code, "agent": "agent" in page.text}


def traced_and_exported(url: str) -> dict[str, Any]:
    """A run traced live to an in-memory exporter (its spans' names), then the ledger's runs
    exported as OTLP JSON (how many spans the file holds)."""
    import tempfile

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM
    from agentledger.integrations.otel import OpenTelemetryTracer, export_otlp
    from agentledger.ledger import Ledger

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = OpenTelemetryTracer(tracer_provider=provider)
    with Ledger.open(url) as ledger:
        llm = ScriptedLLM([InferenceResponse(content="hi")])
        AgentBuilder().with_llm(llm).with_ledger(ledger).with_tracing(tracer).build().run("?")
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "traces.jsonl"
        exported = export_otlp(url, since=datetime(2000, 1, 1, tzinfo=UTC), output=output)
    return {
        "live": sorted(span.name for span in spans.get_finished_spans()),
        "exported": exported.spans,
    }


MCP_SERVER = """
from mcp.server.mcpserver import MCPServer

app = MCPServer("probe")


@app.tool()
def multiply(a: int, b: int) -> int:
    return a * b


app.run("stdio")
"""


def mcp_tool_call(url: str) -> Any:
    """An agent calling the tool of an MCP server (the SDK's own, over stdio): what the
    ledger recorded of the call."""
    import tempfile

    from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall
    from agentledger.integrations.mcp import MCPServer
    from agentledger.ledger import Ledger

    script = Path(tempfile.mkdtemp()) / "server.py"
    script.write_text(MCP_SERVER)
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="c1", name="multiply", arguments={"a": 6, "b": 7})]
            ),
            InferenceResponse(content="42"),
        ]
    )
    server = MCPServer.stdio(sys.executable, [str(script)], name="probe")
    with Ledger.open(url) as ledger:
        builder = AgentBuilder().with_llm(llm).with_ledger(ledger).with_mcp_servers([server])
        with builder.build() as agent:
            run_id = agent.run("6 * 7?").run_id
        (execution,) = ledger.tool_executions(run_id)
    return {"result": execution.result, "metadata": execution.metadata}


def graph_rows(url: str) -> dict[str, Any]:
    """A one-node graph on a fake chat model (langchain_core's, no network), compiled on
    ``LedgerSaver`` over the ledger and invoked twice on one thread: its last state's messages,
    then the thread's conversation and runs, and its checkpoints' count, read with SQL."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from agentledger.integrations.langgraph import LedgerSaver
    from agentledger.ledger import Ledger

    usage = {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}
    model = GenericFakeChatModel(
        messages=iter(
            AIMessage(text, usage_metadata=usage, response_metadata={"model_name": "gpt-4o"})
            for text in ("Hello!", "Bye!")
        )
    )

    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    config: Any = {"configurable": {"thread_id": "probe"}}
    with Ledger.open(url) as ledger:
        graph = builder.compile(checkpointer=LedgerSaver(ledger))
        graph.invoke({"messages": [HumanMessage("hi")]}, config)
        state = graph.invoke({"messages": [HumanMessage("bye")]}, config)
    return {
        "state": [message.content for message in state["messages"]],
        "messages": said(url, "probe"),
        "runs": sqlite_rows(
            url,
            "SELECT status, step_count, input_tokens, output_tokens, cost_usd > 0 "
            "FROM agent_runs WHERE conversation_id = 'probe' ORDER BY started_at",
        ),
        "checkpoints": sqlite_rows(
            url, "SELECT count(*) FROM graph_checkpoints WHERE thread_id = 'probe'"
        )[0][0],
    }


def stored_conversation(url: str) -> dict[str, Any]:
    """Two runs of a pydantic-ai agent on a scripted model (``FunctionModel``, no network),
    each saved through ``LedgerConversationStore``: the messages loaded back, then the
    conversation's messages and runs read with SQL."""
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from agentledger.integrations.pydantic_ai import LedgerConversationStore
    from agentledger.ledger import Ledger

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=12, output_tokens=3)
        return ModelResponse(parts=[TextPart(f"answer {len(messages)}")], usage=usage)

    agent = Agent(FunctionModel(reply))

    async def turns(store: LedgerConversationStore) -> list[Any]:
        for prompt in ("hi", "bye"):
            conversation = await store.load("probe") or Conversation(conversation_id="probe")
            await store.save(await agent.run(prompt, conversation=conversation))
        loaded = await store.load("probe")
        return [type(m).__name__ for m in loaded.messages] if loaded is not None else []

    with Ledger.open(url) as ledger:
        kinds = asyncio.run(turns(LedgerConversationStore(ledger)))
    return {
        "loaded": kinds,
        "messages": said(url, "probe"),
        "runs": sqlite_rows(
            url,
            "SELECT status, input_tokens, output_tokens FROM agent_runs "
            "WHERE conversation_id = 'probe' ORDER BY started_at",
        ),
    }


SDK_SESSION_TABLES = """
CREATE TABLE agent_sessions (
    session_id TEXT PRIMARY KEY,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE agent_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    message_data TEXT NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    FOREIGN KEY (session_id) REFERENCES agent_sessions (session_id) ON DELETE CASCADE
);
"""
"""The tables an OpenAI Agents SDK ``SQLiteSession`` writes (its default names), as it
creates them."""

SDK_SESSION_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "22C"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "22C."}]},
]
"""One turn of a session: the user's question, a tool call and its output, the answer."""


def sdk_session_file(path: Path) -> Path:
    """A ``SQLiteSession`` file of one session, written with sqlite3 by the SDK's schema (the
    import extra does not bring the SDK)."""
    connection = sqlite3.connect(path)
    with connection:
        connection.executescript(SDK_SESSION_TABLES)
        connection.execute("INSERT INTO agent_sessions (session_id) VALUES ('probe')")
        connection.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('probe', ?)",
            [(json.dumps(item),) for item in SDK_SESSION_ITEMS],
        )
    connection.close()
    return path


def import_twice(url: str) -> list[dict[str, Any]]:
    """``agentledger import`` of an Agents SDK session file into the ledger, as a dry run, then
    for real: what each run of the command printed, and how many conversations of the file
    the ledger then holds."""
    source = sdk_session_file(Path(url.removeprefix("sqlite:///")).parent / "sessions.db")
    said = []
    for dry_run in (["--dry-run"], []):
        done = agentledger("--db", url, "import", str(source), *dry_run)
        count = "SELECT count(*) FROM conversations WHERE title = 'probe'"
        said.append({**done, "conversations": sqlite_rows(url, count)[0][0]})
    return said


def imported(url: str) -> dict[str, Any]:
    """What ``agentledger import`` printed, then the imported conversation and its tool
    execution, read with SQL."""
    return {
        "said": import_twice(url),
        "messages": sqlite_rows(
            url,
            "SELECT m.role, m.content FROM conversation_messages m "
            "JOIN conversations c ON c.id = m.conversation_id "
            "WHERE c.title = 'probe' ORDER BY m.seq",
        ),
        "tools": sqlite_rows(
            url,
            "SELECT t.tool_name, t.result FROM tool_executions t "
            "JOIN agent_runs r ON r.id = t.run_id JOIN conversations c ON c.id = r.conversation_id "
            "WHERE c.title = 'probe'",
        ),
    }


def session_rows(url: str) -> dict[str, Any]:
    """An ADK session kept by ``LedgerSessionService``: created with state in each scope, a
    user's event appended, read back; the conversation's messages and the session's
    conversation, read with SQL."""
    import asyncio

    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from agentledger.integrations.adk import LedgerSessionService
    from agentledger.ledger import Ledger

    async def scenario(service: LedgerSessionService) -> bool:
        made = await service.create_session(
            app_name="probe", user_id="u", session_id="s", state={"app:a": 1, "user:b": 2}
        )
        said = types.Content(role="user", parts=[types.Part(text="hi")])
        delta = EventActions(state_delta={"c": 3})
        await service.append_event(made, Event(author="user", content=said, actions=delta))
        got = await service.get_session(app_name="probe", user_id="u", session_id="s")
        return got == made

    with Ledger.open(url) as ledger:
        same = asyncio.run(scenario(LedgerSessionService(ledger)))
    return {
        "same": same,
        "messages": sqlite_rows(url, "SELECT role, content FROM conversation_messages"),
        "owners": sqlite_rows(url, "SELECT tenant_id, owner_id FROM conversations"),
    }


USES: dict[str, Callable[[str], Any]] = {
    "base": base_errors,
    "postgresql": analytics_error,
    "analytics": as_rows,
    "analytics-postgresql": as_rows,
    "pandas": as_pandas,
    "arrow": as_arrow,
    "polars": as_polars,
    "examples": chat_app_conversation,
    "openai-agents": session_items,
    "otel": traced_and_exported,
    "mcp": mcp_tool_call,
    "langgraph": graph_rows,
    "pydantic-ai": stored_conversation,
    "adk": session_rows,
    "import": imported,
    "ui": viewed,
}


def installed() -> dict[str, int]:
    """Every distribution installed but pip's own, with its size on disk in bytes (the files
    its RECORD lists, byte code included)."""
    found: dict[str, int] = {}
    for dist in distributions():
        name = dist.metadata["Name"].lower().replace("_", "-")
        if name in ("pip", "setuptools"):
            continue
        files = (Path(str(dist.locate_file(f))) for f in dist.files or ())
        found[name] = sum(f.stat().st_size for f in files if f.is_file())
    return found


def main(extra: str, url: str) -> None:
    run_id = record_a_run(url)
    found = {"run_id": run_id, "uses": USES[extra](url), "installed": installed()}
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])

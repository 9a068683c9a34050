"""``agentledger import`` of a LangGraph ``SqliteSaver`` file, written by LangGraph's own saver
running a real graph (a fake chat model from ``langchain_core``, a tool, two invocations):
each thread's latest checkpoint imported through the LangGraph integration's mapping (the human
input and the answer the conversation, the model calls steps with their usage, the tool calls
tool executions), checked with SQL on SQLite and PostgreSQL; a second import adds nothing, a
grown thread only its new turn, a dry run writes nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentledger.cli import cli
from agentledger.importing import import_history
from agentledger.ledger import Ledger
from support.databases import BACKENDS
from support.graphs import check_two_weather_turns
from support.invariants import violations
from support.ledger import Database

SQLITE_ONLY = pytest.mark.parametrize("db_url", BACKENDS[:1], indirect=True)


@tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"22C, sunny in {city}"


def _replies(turn: int) -> list[AIMessage]:
    """The model's replies to one input: a tool call, then the answer, with their usage."""
    call = {"name": "get_weather", "args": {"city": "Paris"}, "id": f"call-{turn}"}
    return [
        AIMessage(
            "",
            tool_calls=[call],
            usage_metadata={"input_tokens": 800, "output_tokens": 20, "total_tokens": 820},
            response_metadata={"model_name": "gpt-4o", "finish_reason": "tool_calls"},
        ),
        AIMessage(
            f"Sunny, 22C ({turn}).",
            usage_metadata={"input_tokens": 870, "output_tokens": 9, "total_tokens": 879},
            response_metadata={"model_name": "gpt-4o", "finish_reason": "stop"},
        ),
    ]


@tool
def broken_weather(city: str) -> str:
    """The weather in ``city``, from a service that is down."""
    raise ValueError("the weather service is down")


def saver_file(
    path: Path,
    thread: str,
    asks: list[str],
    first_turn: int = 1,
    replies: list[AIMessage] | None = None,
) -> Path:
    """``asks`` put to a ReAct graph (a fake chat model and LangGraph's ToolNode) on thread
    ``thread`` of the SqliteSaver file at ``path``, the model saying ``replies`` (else a tool
    call and an answer to each)."""
    if replies is None:
        replies = [m for n in range(len(asks)) for m in _replies(first_turn + n)]
    model = GenericFakeChatModel(messages=iter(replies))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather, broken_weather], handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    connection = sqlite3.connect(path, check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(connection))
    try:
        for ask in asks:
            config: Any = {"configurable": {"thread_id": thread}}
            graph.invoke({"messages": [HumanMessage(ask)]}, config)
    finally:
        connection.close()
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("langgraph")
    return saver_file(folder / "checkpoints.db", "chat", ["Weather in Paris?", "And now?"])


def test_a_thread_is_a_conversation_and_its_model_calls_and_tools_the_trace(
    ledger: Ledger, db: Database, db_url: str, source: Path
) -> None:
    summary = import_history(ledger, source)

    assert (summary.kind, summary.conversations, summary.turns) == ("langgraph", 1, 2)
    assert (summary.steps, summary.tool_executions, summary.usage_recorded) == (4, 2, True)
    conversation = db.row("SELECT * FROM conversations")
    assert conversation["title"] == "chat"
    metadata = conversation["metadata"]
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    assert metadata == {"imported_from": "langgraph", "source_id": "chat"}
    check_two_weather_turns(db, conversation["id"])
    tools = db.rows("SELECT tool_name, result, is_error FROM tool_executions ORDER BY started_at")
    assert [(t["tool_name"], t["result"], bool(t["is_error"])) for t in tools] == [
        ("get_weather", "22C, sunny in Paris", False)
    ] * 2
    steps = db.rows("SELECT model, finish_reason FROM step_executions ORDER BY started_at, id")
    assert [(s["model"], s["finish_reason"]) for s in steps][:2] == [
        ("gpt-4o", "tool_calls"),
        ("gpt-4o", "stop"),
    ]
    assert violations(db_url) == []


def test_a_second_import_adds_nothing_and_a_grown_thread_only_its_new_turn(
    ledger: Ledger, db: Database, tmp_path: Path
) -> None:
    path = saver_file(tmp_path / "checkpoints.db", "chat", ["Weather in Paris?"])
    import_history(ledger, path)
    tables = ["conversations", "conversation_messages", "agent_runs", "tool_executions"]
    before = {table: db.count(table) for table in tables}

    again = import_history(ledger, path)

    assert (again.turns, again.skipped) == (0, 1)
    assert {table: db.count(table) for table in tables} == before
    saver_file(path, "chat", ["And now?"], first_turn=2)
    grown = import_history(ledger, path)
    assert (grown.turns, grown.skipped, db.count("conversations")) == (1, 1, 1)
    assert db.count("conversation_messages") == before["conversation_messages"] + 2
    assert db.count("tool_executions") == before["tool_executions"] + 1


@SQLITE_ONLY
def test_a_dry_run_of_a_saver_file_counts_and_writes_nothing(
    db_url: str, tmp_path: Path, source: Path
) -> None:
    runner = CliRunner()
    target = tmp_path / "new.db"
    preview = runner.invoke(
        cli, ["--db", str(target), "import", str(source), "--dry-run", "--json"]
    )
    assert preview.exit_code == 0, preview.output
    assert not target.exists()
    counted = json.loads(preview.output)
    assert (counted["kind"], counted["turns"], counted["steps"]) == ("langgraph", 2, 4)
    assert counted["tool_executions"] == 2

    done = runner.invoke(cli, ["--db", str(target), "import", str(source)])
    assert done.exit_code == 0, done.output
    assert done.output.startswith("Imported 2 turns (4 steps, 2 tool executions) in 1")


def test_an_invocation_cut_before_its_answer_is_a_failed_run_with_its_step_and_error(
    ledger: Ledger, db: Database, tmp_path: Path
) -> None:
    call = AIMessage(
        "", tool_calls=[{"name": "broken_weather", "args": {"city": "Oslo"}, "id": "c9"}]
    )
    path = tmp_path / "checkpoints.db"
    with pytest.raises(RuntimeError, match="StopIteration"):  # the model has no second reply
        saver_file(path, "cut", ["Weather in Oslo?"], replies=[call])

    summary = import_history(ledger, path)

    assert (summary.turns, summary.steps, summary.unanswered) == (1, 1, 1)
    run = db.row("SELECT status, error, step_count FROM agent_runs")
    assert (run["status"], run["step_count"]) == ("failed", 1)
    assert "no answer" in run["error"]
    tool = db.row("SELECT tool_name, result, is_error FROM tool_executions")
    assert (tool["tool_name"], bool(tool["is_error"])) == ("broken_weather", True)
    assert "the weather service is down" in tool["result"]

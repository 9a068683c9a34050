"""A LangGraph thread's messages as rows of the ledger (``LedgerSaver``): a ReAct graph with
tools on SQLite and PostgreSQL, sync and async. The human input and the final answer are the
conversation, each model call a step with its tokens and cost, each tool call with its
``ToolMessage`` a tool execution; a checkpoint refers to those rows instead of serializing the
messages, and reads back every message exactly as LangGraph put it."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from agentledger.analytics import Analytics
from agentledger.integrations.langgraph import LedgerSaver
from agentledger.ledger import Ledger
from support.cli import flat, ok
from support.graphs import CONFIG, check_two_weather_turns, delta_chat, react, replies
from support.ledger import Database


def _two_turns(ledger: Ledger) -> list[BaseMessage]:
    graph = react(LedgerSaver(ledger), replies(1) + replies(2))
    graph.invoke({"messages": [HumanMessage("Weather in Paris?", id="h1")]}, CONFIG)
    done = graph.invoke({"messages": [HumanMessage("And now?", id="h2")]}, CONFIG)
    return list(done["messages"])


def test_a_react_thread_is_a_conversation_of_its_inputs_and_answers_with_steps_and_tools(
    ledger: Ledger, db: Database
):
    messages = _two_turns(ledger)

    check_two_weather_turns(db, "chat")
    steps = db.rows(
        "SELECT s.step_type, s.model, s.input_tokens, s.output_tokens, s.finish_reason "
        "FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
        "WHERE r.conversation_id = 'chat' ORDER BY r.started_at, s.step_index"
    )
    assert [tuple(r.values()) for r in steps] == [
        ("tool_use", "gpt-4o", 800, 20, "tool_calls"),
        ("response", "gpt-4o", 870, 9, "stop"),
    ] * 2
    tools = db.rows(
        "SELECT t.tool_name, t.tool_call_id, t.result FROM tool_executions t "
        "JOIN agent_runs r ON r.id = t.run_id WHERE r.conversation_id = 'chat' "
        "ORDER BY t.tool_call_id"
    )
    assert [tuple(r.values()) for r in tools] == [
        ("get_weather", "call-1", "22C, sunny in Paris"),
        ("get_weather", "call-2", "22C, sunny in Paris"),
    ]
    # The newest checkpoint refers to the eight messages' rows and serializes none of them:
    # its version of the channel is stored as the version before it and the ids it adds.
    latest = db.rows(
        "SELECT v.message_ids, v.value FROM graph_channel_values v "
        "WHERE v.thread_id = 'chat' AND v.channel = 'messages' ORDER BY v.version DESC"
    )[0]
    held = latest["message_ids"]
    head, *added = held if isinstance(held, list) else json.loads(held)
    assert head["count"] + len(added) == len(messages) == 8 and latest["value"] is None
    assert len(added) == 1 and added[0] is not None

    # Read back by a saver that never saw them: every message as LangGraph put it.
    again = react(LedgerSaver(ledger), []).get_state(CONFIG).values["messages"]
    assert again == messages
    assert [type(m) for m in again] == [type(m) for m in messages]


def test_the_async_graph_records_the_same_rows(ledger: Ledger, db: Database):
    async def main() -> list[BaseMessage]:
        graph = react(LedgerSaver(ledger), replies(1))
        done = await graph.ainvoke({"messages": [HumanMessage("Weather?", id="h1")]}, CONFIG)
        state = await react(LedgerSaver(ledger), []).aget_state(CONFIG)
        assert state.values["messages"] == done["messages"]
        return list(done["messages"])

    assert len(asyncio.run(main())) == 4
    assert db.scalar("SELECT COUNT(*) FROM tool_executions") == 1
    assert db.scalar("SELECT COUNT(*) FROM step_executions") == 2
    assert db.scalar("SELECT status FROM agent_runs") == "completed"


def test_an_interrupt_ends_the_run_interrupted_and_the_resumed_graph_keeps_its_messages(
    ledger: Ledger, db: Database
):
    graph = react(LedgerSaver(ledger), replies(1), ask=True)
    graph.invoke({"messages": [HumanMessage("Weather?", id="h1")]}, CONFIG)
    assert db.scalar("SELECT status FROM agent_runs") == "interrupted"

    done = graph.invoke(Command(resume="yes"), CONFIG)

    assert react(LedgerSaver(ledger), []).get_state(CONFIG).values["messages"] == done["messages"]
    assert [m.type for m in done["messages"]] == ["human", "ai", "tool", "ai"]


def test_the_cli_and_the_analytics_see_langgraph_runs_and_forget_removes_them(
    ledger: Ledger, db: Database, db_url: str
):
    _two_turns(ledger)

    assert "chat" in flat(ok("--db", db_url, "conversations"))
    trace = flat(ok("--db", db_url, "show", "chat", "--trace"))
    assert "get_weather" in trace and "Sunny, 22C (2)." in trace
    with Analytics.open(db_url) as analytics:
        stats = analytics.tool_stats().fetchall()
    assert [row[0] for row in stats] == ["get_weather"]

    ledger.forget("chat")

    for table in (
        "conversation_messages",
        "agent_runs",
        "step_executions",
        "tool_executions",
        "graph_checkpoints",
        "graph_channel_values",
        "graph_writes",
    ):
        assert db.scalar(f"SELECT COUNT(*) FROM {table}") == 0, table


def _delta_script(saver: Any) -> tuple[Any, list[Any]]:
    """Five turns of a graph whose messages are LangGraph's DeltaChannel: the state and the
    history a saver gives back."""
    graph = delta_chat(saver)
    for turn in range(5):
        graph.invoke({"messages": [HumanMessage(f"question {turn}", id=f"h{turn}")]}, CONFIG)
    return graph.get_state(CONFIG).values, [s.values for s in graph.get_state_history(CONFIG)]


def test_a_delta_channel_of_messages_reads_back_as_with_langgraphs_saver(ledger: Ledger):
    expected = _delta_script(InMemorySaver())
    assert len(expected[0]["messages"]) == 10
    assert _delta_script(LedgerSaver(ledger)) == expected


def test_pruning_a_thread_keeps_the_versions_its_newest_checkpoint_is_stored_against(
    ledger: Ledger, db: Database
):
    messages = _two_turns(ledger)
    versions = db.scalar("SELECT COUNT(*) FROM graph_channel_values WHERE channel = 'messages'")

    LedgerSaver(ledger).prune(["chat"])

    assert db.scalar("SELECT COUNT(*) FROM graph_checkpoints") == 1
    kept = db.scalar("SELECT COUNT(*) FROM graph_channel_values WHERE channel = 'messages'")
    assert 1 < kept <= versions  # the chain the newest version is stored against
    assert react(LedgerSaver(ledger), []).get_state(CONFIG).values["messages"] == messages
    assert db.scalar("SELECT COUNT(*) FROM tool_executions") == 2  # the rows stay


def _with_a_subgraph(saver: Any) -> Any:
    """A graph whose one node is a subgraph answering with a model call of its own."""

    def research(state: MessagesState) -> dict[str, Any]:
        return {"messages": [replies(1)[1]]}

    inner = StateGraph(MessagesState)
    inner.add_node("research", research)
    inner.add_edge(START, "research")
    outer = StateGraph(MessagesState)
    outer.add_node("researcher", inner.compile())
    outer.add_edge(START, "researcher")
    return outer.compile(checkpointer=saver)


def test_a_subgraph_is_a_subagent_conversation_under_the_threads_run(ledger: Ledger, db: Database):
    question: Any = {"messages": [HumanMessage("Weather?", id="h1")]}
    expected = _with_a_subgraph(InMemorySaver()).invoke(question, CONFIG)

    done = _with_a_subgraph(LedgerSaver(ledger)).invoke(question, CONFIG)

    assert done == expected
    runs = db.rows(
        "SELECT r.depth, r.agent_name, r.status, r.input_tokens, c.kind, r.parent_run_id "
        "FROM agent_runs r JOIN conversations c ON c.id = r.conversation_id ORDER BY r.depth"
    )
    assert [tuple(r.values())[:5] for r in runs] == [
        (0, "langgraph", "completed", 0, "main"),
        (1, "researcher", "completed", 870, "subagent"),
    ]
    assert runs[1]["parent_run_id"] is not None
    said = db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = 'chat' "
        "ORDER BY seq"
    )
    assert [tuple(r.values()) for r in said] == [
        ("user", "Weather?"),
        ("assistant", "Sunny, 22C (1)."),
    ]
    state = _with_a_subgraph(LedgerSaver(ledger)).get_state(CONFIG, subgraphs=True)
    assert state.values == expected


class _LateInput(LedgerSaver):
    """A saver whose thread's first checkpoints are slow to save: LangGraph saves them from
    a thread of its own, so the subgraph's checkpoints come before them."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if not config["configurable"].get("checkpoint_ns") and metadata.get("step", 1) <= 0:
            time.sleep(0.3)
        return super().put(config, checkpoint, metadata, new_versions)


def test_a_subgraphs_checkpoints_saved_before_the_threads_are_recorded_in_its_run(
    ledger: Ledger, db: Database
):
    question: Any = {"messages": [HumanMessage("Weather?", id="h1")]}
    expected = _with_a_subgraph(InMemorySaver()).invoke(question, CONFIG)

    assert _with_a_subgraph(_LateInput(ledger)).invoke(question, CONFIG) == expected

    runs = db.rows(
        "SELECT r.depth, r.agent_name, r.input_tokens, r.parent_run_id IS NOT NULL AS below "
        "FROM agent_runs r ORDER BY r.depth"
    )
    assert [tuple(r.values()) for r in runs] == [
        (0, "langgraph", 0, False),
        (1, "researcher", 870, True),
    ]
    state = _with_a_subgraph(LedgerSaver(ledger)).get_state(CONFIG, subgraphs=True)
    assert state.values == expected


def test_an_invocation_on_a_thread_another_run_holds_is_saved_with_its_messages_serialized(
    ledger: Ledger, db: Database
):
    held = ledger.turn("Still running elsewhere", conversation_id="chat")
    held.begin()  # a run a killed process left holding the thread, until its lease expires

    done = react(LedgerSaver(ledger), replies(1)).invoke(
        {"messages": [HumanMessage("Weather?", id="h1")]}, CONFIG
    )

    assert react(LedgerSaver(ledger), []).get_state(CONFIG).values["messages"] == done["messages"]
    assert db.scalar("SELECT COUNT(*) FROM agent_runs") == 1
    assert db.scalar("SELECT COUNT(*) FROM step_executions") == 0

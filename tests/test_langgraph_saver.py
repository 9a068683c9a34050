"""``LedgerSaver`` under real LangGraph graphs (no network: LangChain's fake chat model): the
same states and history as LangGraph's ``InMemorySaver``, sync and async, on SQLite and
PostgreSQL; and the ledger's promises for a thread: it is a conversation, ``forget`` deletes its
checkpoints, a damaged checkpoint row is an error, a scoped handle keeps to its tenant, and a
turn commits no more often than on LangGraph's ``SqliteSaver``."""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from sqlalchemy import event

from agentledger.errors import LedgerCorruptError, UsageError
from agentledger.integrations.langgraph import LedgerSaver
from agentledger.ledger import Ledger
from support.ledger import Database


class Counted(MessagesState):
    steps: Annotated[list[str], operator.add]


def _chat_graph(checkpointer: Any, answers: list[str]) -> Any:
    """A chat node answering from ``answers``, then a node asking a human to approve it."""
    model = GenericFakeChatModel(messages=iter(AIMessage(a) for a in answers))

    def chat(state: Counted) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])], "steps": ["chat"]}

    def review(state: Counted) -> dict[str, Any]:
        verdict = interrupt({"question": "approve?", "answer": state["messages"][-1].content})
        return {"steps": [f"review:{verdict}"]}

    builder = StateGraph(Counted)
    builder.add_node("chat", chat)
    builder.add_node("review", review)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", "review")
    return builder.compile(checkpointer=checkpointer)


def _script(graph: Any, thread: str) -> list[Any]:
    """Two turns, each interrupted and resumed, a message removed, then a fork of the first
    turn's state: the states and history a saver gives back."""
    config: Any = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage("Hi", id="h1")]}, config)
    graph.invoke(Command(resume="yes"), config)
    graph.invoke({"messages": [HumanMessage("And again?", id="h2")]}, config)
    graph.invoke(Command(resume="no"), config)
    graph.update_state(config, {"messages": [RemoveMessage(id="h1")]})
    history = list(graph.get_state_history(config))
    first_turn = next(s for s in history if s.values.get("steps") == ["chat", "review:yes"])
    forked = graph.update_state(first_turn.config, {"steps": ["forked"]})
    return [_view(s) for s in (*history, graph.get_state(forked), graph.get_state(config))]


async def _ascript(graph: Any, thread: str) -> list[Any]:
    config: Any = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"messages": [HumanMessage("Hi", id="h1")]}, config)
    await graph.ainvoke(Command(resume="yes"), config)
    await graph.aupdate_state(config, {"messages": [RemoveMessage(id="h1")]})
    history = [s async for s in graph.aget_state_history(config)]
    return [_view(s) for s in (*history, await graph.aget_state(config))]


def _view(snapshot: Any) -> Any:
    """What a state snapshot says, less what differs between two savers (ids and times)."""
    values = {
        k: [(m.type, m.content) for m in v] if k == "messages" else v
        for k, v in snapshot.values.items()
    }
    interrupts = [i.value for i in snapshot.interrupts]
    return values, snapshot.next, snapshot.metadata.get("step"), interrupts


ANSWERS = ["Hello!", "Again, hello."]


def test_a_graph_with_interrupts_removals_and_a_fork_reads_back_as_with_langgraphs_saver(
    ledger: Ledger,
):
    expected = _script(_chat_graph(InMemorySaver(), ANSWERS), "t")
    assert _script(_chat_graph(LedgerSaver(ledger), ANSWERS), "t") == expected


def test_the_async_graph_reads_back_as_with_langgraphs_saver(ledger: Ledger):
    expected = asyncio.run(_ascript(_chat_graph(InMemorySaver(), ANSWERS), "t"))
    assert asyncio.run(_ascript(_chat_graph(LedgerSaver(ledger), ANSWERS), "t")) == expected


def test_a_thread_is_a_conversation_that_forget_deletes_with_its_checkpoints(
    ledger: Ledger, db: Database
):
    graph = _chat_graph(LedgerSaver(ledger), ANSWERS)
    graph.invoke({"messages": [HumanMessage("Hi")]}, {"configurable": {"thread_id": "thread-7"}})
    assert ledger.conversation("thread-7").metadata_ == {"graph_thread": "thread-7"}
    held = {t: db.scalar(f"SELECT COUNT(*) FROM {t} WHERE thread_id = 'thread-7'") for t in _GRAPH}
    assert all(held.values()), held

    forgotten = ledger.forget("thread-7")

    assert {t: forgotten.counts[t] for t in _GRAPH} == held
    assert all(db.scalar(f"SELECT COUNT(*) FROM {t}") == 0 for t in _GRAPH)


_GRAPH = ("graph_checkpoints", "graph_channel_values", "graph_writes")


def test_a_damaged_checkpoint_row_is_an_error_that_names_it(ledger: Ledger, db: Database):
    saver = LedgerSaver(ledger)
    config: Any = {"configurable": {"thread_id": "t"}}
    _chat_graph(saver, ANSWERS).invoke({"messages": [HumanMessage("Hi")]}, config)
    db.execute("UPDATE graph_checkpoints SET metadata = '{\"step\": 99}' WHERE thread_id = 't'")

    with pytest.raises(LedgerCorruptError, match="of graph_checkpoints does not match"):
        saver.get_tuple(config)
    assert any("graph_checkpoints" in line for line in ledger.verify())


def test_a_scoped_ledger_keeps_to_its_tenants_threads(ledger: Ledger):
    acme, other = LedgerSaver(ledger.scoped(tenant_id="acme")), LedgerSaver(ledger.scoped("other"))
    config: Any = {"configurable": {"thread_id": "acme-thread"}}
    _chat_graph(acme, ANSWERS).invoke({"messages": [HumanMessage("Hi")]}, config)

    assert ledger.conversation("acme-thread").tenant_id == "acme"
    assert acme.get_tuple(config) is not None
    assert other.get_tuple(config) is None and list(other.list(None)) == []
    with pytest.raises(UsageError, match="outside this handle's scope"):
        _chat_graph(other, ANSWERS).invoke({"messages": [HumanMessage("Hi")]}, config)


def _answering(checkpointer: Any) -> Any:
    """A chat of one model node answering each question, with its usage."""

    def model(state: MessagesState) -> dict[str, Any]:
        usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        answer = AIMessage(f"answer {len(state['messages'])}", usage_metadata=usage)
        return {"messages": [answer]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    return builder.compile(checkpointer=checkpointer)


def _chat_commits(graph: Any, committed: list[object]) -> int:
    """The commits of the third turn of a chat on ``graph`` (the thread made by the first)."""
    config: Any = {"configurable": {"thread_id": "chat"}}
    for turn in range(3):
        if turn == 2:
            committed.clear()
        graph.invoke({"messages": [HumanMessage(f"question {turn}")]}, config)
    return len(committed)


def test_a_chat_turn_commits_no_more_often_than_on_langgraphs_sqlite_saver(tmp_path: Path):
    # At the ledger's synchronous=FULL each commit is a sync to disk: what a turn costs.
    theirs: list[object] = []
    connection = sqlite3.connect(tmp_path / "sqlite-saver.db", check_same_thread=False)
    connection.set_trace_callback(lambda sql: theirs.append(sql) if sql == "COMMIT" else None)
    saver = SqliteSaver(connection)
    saver.setup()
    expected = _chat_commits(_answering(saver), theirs)
    connection.close()
    ours: list[object] = []
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        event.listen(ledger.engine, "commit", ours.append)

        assert _chat_commits(_answering(LedgerSaver(ledger)), ours) <= expected

        said = ledger.model_context("chat")
        assert [m.content for m in said][-2:] == ["question 2", "answer 5"]  # still rows

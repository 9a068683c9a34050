"""LangGraph graphs for the tests of ``LedgerSaver`` (no network): a ReAct graph whose fake chat
model (LangChain's ``GenericFakeChatModel``) answers from a script, with LangGraph's
``ToolNode``, and a graph whose messages are a ``DeltaChannel``."""

from __future__ import annotations

from collections.abc import Iterable
from functools import reduce
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.channels import DeltaChannel
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

CONFIG: Any = {"configurable": {"thread_id": "chat"}}


@tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"22C, sunny in {city}"


def usage(given: int, made: int) -> dict[str, Any]:
    return {"input_tokens": given, "output_tokens": made, "total_tokens": given + made}


def replies(turn: int) -> list[AIMessage]:
    """A model's replies for one turn: a tool call, then the answer (fixed ids and usage)."""
    call = {"name": "get_weather", "args": {"city": "Paris"}, "id": f"call-{turn}"}
    meta = {"model_name": "gpt-4o", "finish_reason": "tool_calls"}
    return [
        AIMessage(
            "",
            id=f"ai-{turn}a",
            tool_calls=[call],
            usage_metadata=usage(800, 20),
            response_metadata=meta,
            additional_kwargs={"refusal": None},
        ),
        AIMessage(
            f"Sunny, 22C ({turn}).",
            id=f"ai-{turn}b",
            usage_metadata=usage(870, 9),
            response_metadata={"model_name": "gpt-4o", "finish_reason": "stop"},
        ),
    ]


def react(saver: Any, script: Iterable[AIMessage], *, ask: bool = False) -> Any:
    """A ReAct graph on ``saver``: an agent node whose model answers from ``script``,
    LangGraph's ToolNode, and (``ask``) an approval asked with ``interrupt()`` before the
    tools run."""
    model = GenericFakeChatModel(messages=iter(script))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def approve(state: MessagesState) -> dict[str, Any]:
        interrupt("run the tool?")
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    if ask:
        builder.add_node("approve", approve)
        builder.add_conditional_edges(
            "agent", tools_condition, {"tools": "approve", "__end__": "__end__"}
        )
        builder.add_edge("approve", "tools")
    else:
        builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def ask(graph: Any, turn: int) -> Any:
    """Turn ``turn`` of the thread ``CONFIG`` names: a question with an id of its own."""
    return graph.invoke({"messages": [HumanMessage(f"Weather {turn}?", id=f"h{turn}")]}, CONFIG)


def _folded(state: list[AnyMessage] | None, writes: list[Any]) -> list[AnyMessage]:
    return reduce(add_messages, writes, state or [])


class Delta(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_folded, snapshot_frequency=3)]


def delta_chat(saver: Any) -> Any:
    """A graph whose messages are LangGraph's DeltaChannel (a snapshot every third update, the
    writes in between): a node answering each question with the number of messages it has."""

    def chat(state: Delta) -> dict[str, Any]:
        turn = len(state["messages"])
        return {"messages": [AIMessage(f"answer {turn}", id=f"a{turn}")]}

    builder = StateGraph(Delta)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder.compile(checkpointer=saver)


def check_two_weather_turns(db: Any, conversation_id: str) -> list[dict[str, Any]]:
    """The rows two turns of :func:`react` (asked with :func:`ask`) leave in conversation
    ``conversation_id``: the questions and answers as the conversation, two completed runs of
    two steps with their tokens, priced; the runs' rows, oldest first."""
    said = db.rows(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = :id ORDER BY seq",
        id=conversation_id,
    )
    assert [(r["role"], r["content"]) for r in said] == [
        ("user", "Weather in Paris?"),
        ("assistant", "Sunny, 22C (1)."),
        ("user", "And now?"),
        ("assistant", "Sunny, 22C (2)."),
    ]
    runs = db.rows(
        "SELECT id, status, agent_name, step_count, input_tokens, output_tokens, cost_usd "
        "FROM agent_runs WHERE conversation_id = :id ORDER BY started_at, id",
        id=conversation_id,
    )
    assert [tuple(r.values())[1:6] for r in runs] == [("completed", "langgraph", 2, 1670, 29)] * 2
    assert all(r["cost_usd"] > 0 for r in runs)
    return runs

"""The peers: what other agent frameworks store of the same turn, through their public APIs.

- The OpenAI Agents SDK's sessions (``SQLiteSession``; ``SQLAlchemySession`` on PostgreSQL
  through asyncpg), given what the SDK's ``Runner`` gives its session for a turn: ``get_items()``
  as it starts, then ``add_items`` for the user message, each tool call with its output, and the
  answer: five calls, eight items.
- LangGraph: a ``StateGraph`` of ``messages``, a scripted model node, the prebuilt ``ToolNode``
  and ``tools_condition``, compiled with ``SqliteSaver`` or ``PostgresSaver``; one ``invoke`` a
  turn on a thread, LangGraph's default durability (a checkpoint per super-step).

Each is a writer of section 15 (``setup``, ``prepare`` a round, a ``turn`` of a conversation,
each step's commit timed into ``commits``); the session is section 6's peer too. They are
optional (``pip install -e '.[bench]'``): :func:`skipped` says which are missing.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._common import (
    ANSWER,
    RESULT,
    TOOL_NAME,
    TOOL_STEPS,
    USAGE,
    call_arguments,
    call_id,
    lookup,
    question,
    timing,
)

SESSION, ALCHEMY_SESSION = "OpenAI Agents SQLiteSession", "OpenAI Agents SQLAlchemySession"
RUNNER = "OpenAI Agents Runner + SQLiteSession"
ALCHEMY_RUNNER = "OpenAI Agents Runner + SQLAlchemySession"
SQLITE_GRAPH, POSTGRES_GRAPH = "LangGraph SqliteSaver", "LangGraph PostgresSaver"
REQUIREMENTS = {
    SESSION: ("openai-agents",),
    ALCHEMY_SESSION: ("openai-agents", "asyncpg", "greenlet"),
    RUNNER: ("openai-agents",),
    ALCHEMY_RUNNER: ("openai-agents", "asyncpg", "greenlet"),
    SQLITE_GRAPH: ("langgraph", "langgraph-checkpoint-sqlite"),
    POSTGRES_GRAPH: ("langgraph", "langgraph-checkpoint-postgres"),
}
ITEMS_PER_TURN = 2 + 2 * TOOL_STEPS
"""What a peer stores of a turn: the user message, each tool call and its result, the answer."""


def skipped(peer: str) -> list[str]:
    """Why ``peer`` cannot be measured (nothing when it can)."""
    missing = []
    for package in REQUIREMENTS[peer]:
        try:
            version(package)
        except PackageNotFoundError:
            missing.append(package)
    if not missing:
        return []
    return [f"not installed ({', '.join(missing)}): `pip install -e '.[bench]'` (make bench does)"]


# -- the SDK's sessions --------------------------------------------------------------------------


def session_batches(turn: int) -> list[list[dict[str, Any]]]:
    """The items the SDK's Runner saves for a turn, in its batches (the Responses API items'
    ``model_dump``, as it stores them)."""
    batches: list[list[dict[str, Any]]] = [[{"content": question(turn), "role": "user"}]]
    for s in range(TOOL_STEPS):
        arguments = json.dumps(call_arguments(s, 0))
        call = {"arguments": arguments, "call_id": call_id(s, 0), "name": TOOL_NAME}
        call |= {"type": "function_call", "id": f"fc_{turn}_{s}", "status": "completed"}
        output = {"call_id": call_id(s, 0), "output": RESULT, "type": "function_call_output"}
        batches.append([call, output])
    text = {"annotations": [], "text": ANSWER, "type": "output_text", "logprobs": []}
    answer = {"id": f"msg_{turn}", "content": [text], "role": "assistant", "type": "message"}
    return [*batches, [answer | {"status": "completed"}]]


async def session_turn(session: Any, turn: int, commits: list[float]) -> float:
    """A turn as the Runner stores it: its seconds; each ``add_items``'s in ``commits``."""
    started = time.perf_counter()
    await session.get_items()
    for batch in session_batches(turn):
        begun = time.perf_counter()
        await session.add_items(batch)
        commits.append(time.perf_counter() - begun)
    return time.perf_counter() - started


class SessionWriter:
    """One session per conversation: ``SQLiteSession`` on a file path, ``SQLAlchemySession``
    on a ``postgresql://`` URL (its engine shared by the writer's sessions, as an app would).
    One event loop for the writer's life: a ``SQLiteSession``'s calls run in its thread pool,
    each thread keeping its connection, as in a long-lived app."""

    def __init__(self, url: str, writer: int) -> None:
        self.url, self.writer = url, writer
        self.loop = asyncio.new_event_loop()
        self.engine: Any = None
        if url.startswith("postgresql://"):
            from sqlalchemy.ext.asyncio import create_async_engine

            self.engine = create_async_engine("postgresql+asyncpg://" + url.split("://", 1)[1])
        self.commits: list[float] = []
        self.sessions: list[Any] = []

    def _session(self, name: str, *, create_tables: bool = False) -> Any:
        if self.engine is None:
            from agents import SQLiteSession

            return SQLiteSession(name, self.url)
        from agents.extensions.memory import SQLAlchemySession

        return SQLAlchemySession(name, engine=self.engine, create_tables=create_tables)

    def setup(self) -> None:
        if self.engine is not None:
            self.loop.run_until_complete(self._session("setup", create_tables=True).get_items())

    def prepare(self, round: int, conversations: int, turns: int) -> None:
        self._close_sessions()
        self.sessions = [
            self._session(f"w{self.writer}-r{round}-c{c}") for c in range(conversations)
        ]

    def turn(self, conversation: int, turn: int) -> float:
        work = session_turn(self.sessions[conversation], turn, self.commits)
        return self.loop.run_until_complete(work)

    def held(self) -> int:
        """The items the first conversation holds."""
        return len(self.loop.run_until_complete(self.sessions[0].get_items()))

    def _close_sessions(self) -> None:
        for session in self.sessions:
            if hasattr(session, "close"):
                session.close()

    def close(self) -> None:
        self._close_sessions()
        if self.engine is not None:
            self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()


class RunnerWriter(SessionWriter):
    """The SDK's whole turn: ``Runner.run`` on section 18's scripted model with the ``lookup``
    tool, its conversation in a session per conversation as :class:`SessionWriter` makes them;
    each ``add_items`` the Runner makes is timed."""

    def __init__(self, url: str, writer: int) -> None:
        super().__init__(url, writer)
        from agents import RunConfig, function_tool

        self.run_config = RunConfig(tracing_disabled=True)
        self.tool = function_tool(lookup.function)

    def _session(self, name: str, *, create_tables: bool = False) -> Any:
        session = super()._session(name, create_tables=create_tables)
        add_items, commits = session.add_items, self.commits

        async def timed(items: Any) -> None:
            begun = time.perf_counter()
            await add_items(items)
            commits.append(time.perf_counter() - begun)

        session.add_items = timed
        return session

    def turn(self, conversation: int, turn: int) -> float:
        from agents import Agent, Runner

        from .framework_chats import agents_model

        agent = Agent(name="bench", tools=[self.tool], model=agents_model(turn))
        started = time.perf_counter()
        work = Runner.run(
            agent, question(turn), session=self.sessions[conversation], run_config=self.run_config
        )
        self.loop.run_until_complete(work)
        return time.perf_counter() - started


# -- LangGraph -----------------------------------------------------------------------------------


def _responses() -> list[Any]:
    from langchain_core.messages import AIMessage

    usage = {"input_tokens": USAGE.input_tokens, "output_tokens": USAGE.output_tokens}
    usage["total_tokens"] = USAGE.input_tokens + USAGE.output_tokens
    calls = [
        AIMessage(
            content="",
            tool_calls=[{"id": call_id(s, 0), "name": TOOL_NAME, "args": call_arguments(s, 0)}],
            usage_metadata=usage,
        )
        for s in range(TOOL_STEPS)
    ]
    return [*calls, AIMessage(content=ANSWER, usage_metadata=usage)]


def _graph(saver: Any, respond: Any) -> Any:
    from typing import Annotated, TypedDict

    from langchain_core.messages import AnyMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode, tools_condition

    # The functional form evaluates the annotation now: the class form would leave a string
    # that LangGraph resolves in this module's globals, where these lazy imports are not.
    messages = Annotated[list[AnyMessage], add_messages]
    state = TypedDict("State", {"messages": messages})  # type: ignore[name-match]  # noqa: UP013
    tool = StructuredTool.from_function(lookup.function, name=TOOL_NAME, description="Look up.")
    builder = StateGraph(state)
    builder.add_node("model", respond)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


class GraphWriter:
    """LangGraph's checkpointer on one connection of the writer's, a thread per conversation:
    ``SqliteSaver`` on a file path (``synchronous=FULL``, as the ledger's default),
    ``PostgresSaver`` on a ``postgresql://`` URL (autocommit, as LangGraph's documentation sets
    it up). Every checkpoint's ``put`` is timed."""

    def __init__(self, url: str, writer: int) -> None:
        self.writer, self.round = writer, 0
        self.conn: Any
        if url.startswith("postgresql://"):
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row

            self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
            self.saver: Any = PostgresSaver(self.conn)
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            self.conn = sqlite3.connect(url, check_same_thread=False, timeout=5.0)
            self.conn.execute("PRAGMA synchronous=FULL")
            self.saver = SqliteSaver(self.conn)
        self.commits: list[float] = []
        self.saver.put = timing(self.saver.put, self.commits)
        self.graph = _graph(self.saver, lambda state: {"messages": [next(self._script)]})
        self._script: Iterator[Any] = iter(())

    def setup(self) -> None:
        self.saver.setup()

    def prepare(self, round: int, conversations: int, turns: int) -> None:
        self.round = round

    def turn(self, conversation: int, turn: int) -> None:
        # Fresh messages every turn: add_messages gives each an id, and a message seen again
        # with the same id would replace the first instead of being appended.
        self._script = iter(_responses())
        thread = f"w{self.writer}-r{self.round}-c{conversation}"
        inputs = {"messages": [("user", question(turn))]}
        self.graph.invoke(inputs, {"configurable": {"thread_id": thread}})

    def close(self) -> None:
        self.conn.close()

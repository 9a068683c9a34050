"""The peers of the recording benchmark, one class a worker process holds, each recording the
turn of ``bench/_turns.py`` (a user message, three ``lookup`` calls of ~1 KB, an answer)
through its public API:

- :class:`LangGraphTurns`: a ``StateGraph`` whose state is ``messages`` with the
  ``add_messages`` reducer, a model node answering from a script (three ``AIMessage`` tool
  calls, then the answer), LangGraph's prebuilt ``ToolNode`` running ``lookup`` and
  ``tools_condition`` between them, compiled with a ``SqliteSaver`` on a file; one ``invoke``
  per turn on a fixed ``thread_id``, LangGraph's default durability (``"async"``: a checkpoint
  after every super-step, written while the next one runs, all written when ``invoke``
  returns).
- :class:`SessionTurns`: the OpenAI Agents SDK's ``SQLiteSession`` on a file, given what the
  SDK's ``Runner`` gives it for such a turn: ``get_items()`` once as the turn starts (the
  history for the model's input), then ``add_items`` for the user message, for each model
  response with its tool result (a ``function_call`` and its ``function_call_output``) and for
  the answer (an assistant ``message``): five ``add_items`` calls, as the Runner saves the
  input first and then each step's new items.

The peers are optional (``pip install -e '.[bench]'``): :func:`missing` says which are not
installed, without importing them.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import time
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ._common import ANSWER, RESULT, TOOL_NAME, USAGE, call_arguments, call_id, lookup
from ._raw import checkpointed_size
from ._turns import TOOL_STEPS, question

LANGGRAPH = "LangGraph SqliteSaver"
SESSION = "OpenAI Agents SQLiteSession"
POSTGRES_LANGGRAPH = "LangGraph PostgresSaver"
POSTGRES_SESSION = "OpenAI Agents SQLAlchemySession"
REQUIREMENTS = {
    LANGGRAPH: ("langgraph", "langgraph-checkpoint-sqlite"),
    SESSION: ("openai-agents",),
    POSTGRES_LANGGRAPH: ("langgraph", "langgraph-checkpoint-postgres"),
    # On PostgreSQL through asyncpg, which SQLAlchemy's asyncio extension drives with greenlet.
    POSTGRES_SESSION: ("openai-agents", "asyncpg", "greenlet"),
}
ITEMS_PER_TURN = 2 + 2 * TOOL_STEPS
"""What either peer stores of a turn: the user message, each tool call and its result, the
answer."""
THREAD = "bench"


def versions(peer: str) -> dict[str, str | None]:
    """The installed versions of what ``peer`` needs (None: not installed)."""
    found: dict[str, str | None] = {}
    for package in REQUIREMENTS[peer]:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def missing(peer: str) -> list[str]:
    return [package for package, found in versions(peer).items() if found is None]


def langgraph_bytes(turns: int) -> int:
    """About how large a LangGraph thread of ``turns`` turns grows: every checkpoint holds the
    whole message list, nine checkpoints a turn, so the file grows with the square of the
    turns (22 GB at 1000 turns with langgraph 1.2.22)."""
    return int(22.5e9 * (turns / 1000) ** 2)


def _usage() -> dict[str, int]:
    total = USAGE.input_tokens + USAGE.output_tokens
    return {"input_tokens": USAGE.input_tokens, "output_tokens": USAGE.output_tokens} | {
        "total_tokens": total
    }


class LangGraphTurns:
    """A LangGraph thread in a ``SqliteSaver`` file, growing by one ``invoke`` per turn.

    The ``sqlite3`` connection is ours (the saver takes one), so it gets ``synchronous`` like
    the ledger's; the saver itself sets ``journal_mode=WAL``.
    """

    def __init__(self, path: str, synchronous: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = Path(path)
        # The saver writes from LangGraph's background thread (durability "async").
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.graph = ScriptedGraph(SqliteSaver(self.conn))
        self.config: Any = {"configurable": {"thread_id": THREAD}}
        self.turns = 0

    def grow(self, turns: int) -> float:
        return sum(self.turn() for _ in range(turns))

    def turn(self) -> float:
        gc.collect()  # as bench._turns.Turns.turn does
        started = time.perf_counter()
        self.graph.invoke_turn(THREAD, self.turns)
        elapsed = time.perf_counter() - started
        self.turns += 1
        return elapsed

    def stored(self) -> dict[str, int]:
        """The thread's messages and the saver's rows."""
        messages = self.graph.graph.get_state(self.config).values.get("messages", [])
        rows = {
            table: self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("checkpoints", "writes")
        }
        return {"messages": len(messages), **rows}

    def synchronous(self) -> int:
        return int(self.conn.execute("PRAGMA synchronous").fetchone()[0])

    def size(self) -> int:
        return checkpointed_size(self.path)

    def close(self) -> None:
        self.conn.close()


class ScriptedGraph:
    """The turn's graph compiled with ``saver``, its model node answering from a fresh script
    each turn; one turn is one ``invoke`` on a thread."""

    def __init__(self, saver: Any) -> None:
        self.graph = _graph(saver, self._respond)
        self._script: Iterator[Any] = iter(())

    def _respond(self, state: Any) -> dict[str, list[Any]]:
        return {"messages": [next(self._script)]}

    def invoke_turn(self, thread_id: str, turn: int) -> None:
        # Fresh messages every turn: add_messages gives each an id, and a message seen again
        # with the same id would replace the first instead of being appended.
        self._script = iter(_responses())
        inputs = {"messages": [_human(question(turn))]}
        self.graph.invoke(inputs, {"configurable": {"thread_id": thread_id}})


def _graph(saver: Any, respond: Any) -> Any:
    from typing import Annotated, TypedDict

    from langchain_core.messages import AnyMessage
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode, tools_condition

    # The functional form evaluates the annotation now: the class form would leave a string
    # that LangGraph resolves in this module's globals, where these lazy imports are not.
    messages = Annotated[list[AnyMessage], add_messages]
    state = TypedDict("State", {"messages": messages})  # type: ignore[misc]  # noqa: UP013
    builder = StateGraph(state)
    builder.add_node("model", respond)
    builder.add_node("tools", ToolNode([_lookup_tool()]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def _lookup_tool() -> Any:
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(
        lookup.function, name=TOOL_NAME, description="Look a key up."
    )


def _human(text: str) -> Any:
    from langchain_core.messages import HumanMessage

    return HumanMessage(content=text)


def _responses() -> list[Any]:
    from langchain_core.messages import AIMessage

    calls = [
        AIMessage(
            content="",
            tool_calls=[{"id": call_id(s, 0), "name": TOOL_NAME, "args": call_arguments(s, 0)}],
            usage_metadata=_usage(),
        )
        for s in range(TOOL_STEPS)
    ]
    return [*calls, AIMessage(content=ANSWER, usage_metadata=_usage())]


class SessionTurns:
    """An OpenAI Agents SDK ``SQLiteSession`` in a file, growing by the items of a turn.

    The session opens its own connections (one per thread, in WAL mode) and offers no way to
    set ``synchronous``: it runs at SQLite's default, which this class reports.
    """

    def __init__(self, path: str) -> None:
        from agents import SQLiteSession

        self.path = Path(path)
        self.session = SQLiteSession(THREAD, self.path)
        # One event loop for the worker's life: the session's calls run in the loop's
        # default thread pool, each thread keeping its connection, as in a long-lived app.
        self.loop = asyncio.new_event_loop()
        self.turns = 0

    def grow(self, turns: int) -> float:
        return sum(self.turn() for _ in range(turns))

    def turn(self) -> float:
        batches = session_batches(self.turns)
        gc.collect()  # as bench._turns.Turns.turn does
        elapsed, _ = self.loop.run_until_complete(record_session_turn(self.session, batches))
        self.turns += 1
        return elapsed

    def stored(self) -> dict[str, int]:
        items = self.loop.run_until_complete(self.session.get_items())
        return {"items": len(items)}

    def synchronous(self) -> int:
        conn = sqlite3.connect(self.path)
        try:
            return int(conn.execute("PRAGMA synchronous").fetchone()[0])
        finally:
            conn.close()

    def size(self) -> int:
        return checkpointed_size(self.path)

    def close(self) -> None:
        self.session.close()
        self.loop.close()


async def record_session_turn(
    session: Any, batches: list[list[dict[str, Any]]]
) -> tuple[float, list[float]]:
    """What the SDK's Runner asks of its session in a turn: ``get_items()`` as the turn starts,
    then ``add_items`` for each batch. The turn's seconds, and those of each ``add_items``."""
    started = time.perf_counter()
    await session.get_items()
    times = []
    for batch in batches:
        begun = time.perf_counter()
        await session.add_items(batch)
        times.append(time.perf_counter() - begun)
    return time.perf_counter() - started, times


def session_batches(turn: int) -> list[list[dict[str, Any]]]:
    """The items the SDK's Runner saves for a turn, in its batches (as ``model_dump`` of the
    Responses API items, which is how it stores them)."""
    batches: list[list[dict[str, Any]]] = [[{"content": question(turn), "role": "user"}]]
    for s in range(TOOL_STEPS):
        call = {
            "arguments": json.dumps(call_arguments(s, 0)),
            "call_id": call_id(s, 0),
            "name": TOOL_NAME,
            "type": "function_call",
            "id": f"fc_{turn}_{s}",
            "status": "completed",
        }
        output = {"call_id": call_id(s, 0), "output": RESULT, "type": "function_call_output"}
        batches.append([call, output])
    answer = {"annotations": [], "text": ANSWER, "type": "output_text", "logprobs": []}
    batches.append(
        [
            {
                "id": f"msg_{turn}",
                "content": [answer],
                "role": "assistant",
                "status": "completed",
                "type": "message",
            }
        ]
    )
    return batches

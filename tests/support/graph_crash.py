"""A LangGraph graph on ``LedgerSaver`` killed mid-invocation, for the kill -9 tests.

The graph is a ReAct loop without a real model: a ``model`` node that asks for one ``lookup``
call per step until it has ``TOOL_STEPS`` results since the last human message, then answers
quoting them, and a ``tools`` node that runs the calls. Both are functions of the state (their
messages' ids too), so a graph resumed from any checkpoint ends where an unbroken one would.

A child process (forked, ``support.forked``) plays :func:`play`: one invocation acknowledged,
then a second on the same thread, SIGKILLed at its ``point`` (:data:`POINTS`). Every ``put``
that returned is logged (and synced) to the spec's ``acknowledged`` file with the checkpoint id
it returned, before anything else happens: what the parent holds the database to.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import event

from agentledger.ledger import Ledger
from support import forked
from support.crash_points import kill
from support.forked import Finished

TOOL_STEPS = 3
QUESTIONS = ("Tell me three facts about otters.", "Three more, please.")
THREAD = "otters"
FIRST_INVOCATION_PUTS = 2 + 2 * TOOL_STEPS + 1
"""The checkpoints of an invocation: its input, the input applied, each model and tool step."""
POINTS = {
    "model-node": "inside the model node of the killed invocation's third step (between puts)",
    "put-sent": "inside the killed invocation's third put, its statements sent, before COMMIT",
    "put-committed": "right after the third put's COMMIT returned, before put() returned",
}
"""Where the second invocation dies: each point names what has happened by then."""
KILLED_PUT = 3
"""The put of the second invocation the ``put-*`` points kill in (its input's is the first)."""


def config() -> dict[str, Any]:
    return {"configurable": {"thread_id": THREAD}}


def expected_messages(invocations: int = len(QUESTIONS)) -> list[str]:
    """The thread's messages once the first ``invocations`` ended: each question, its calls
    and results, its answer (a call's content is empty)."""
    facts = [f"fact {step}" for step in range(TOOL_STEPS)]
    turn = [part for fact in facts for part in ("", fact)] + ["answer: " + "; ".join(facts)]
    return [part for question in QUESTIONS[:invocations] for part in (question, *turn)]


def _results_since_question(messages: Sequence[Any]) -> list[str]:
    last = max(n for n, m in enumerate(messages) if m.type == "human")
    return [str(m.content) for m in messages[last + 1 :] if m.type == "tool"]


def model_steps(messages: Sequence[Any], turn: int) -> int:
    """The model steps of question ``turn`` (from 1) that ``messages`` hold (each its AI
    message): none if they do not hold the question."""
    asked = [n for n, m in enumerate(messages) if m.type == "human"]
    if len(asked) < turn:
        return 0
    end = asked[turn] if len(asked) > turn else len(messages)
    return sum(m.type == "ai" for m in messages[asked[turn - 1] + 1 : end])


def build_graph(saver: Any, on_model_step: Callable[[int, int], None] | None = None) -> Any:
    """The graph, compiled with ``saver``; ``on_model_step(turn, step)`` is called as the model
    node starts (the ``model-node`` point kills there)."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    def model(state: Any) -> dict[str, Any]:
        messages = state["messages"]
        turn = sum(m.type == "human" for m in messages)
        results = _results_since_question(messages)
        if on_model_step is not None:
            on_model_step(turn, len(results))
        if len(results) < TOOL_STEPS:
            step = len(results)
            call = {"id": f"call-{turn}-{step}", "name": "lookup", "args": {"step": step}}
            return {"messages": [AIMessage("", id=f"ai-{turn}-{step}", tool_calls=[call])]}
        return {"messages": [AIMessage("answer: " + "; ".join(results), id=f"ai-{turn}-answer")]}

    def tools(state: Any) -> dict[str, Any]:
        calls = state["messages"][-1].tool_calls
        return {
            "messages": [
                ToolMessage(f"fact {c['args']['step']}", tool_call_id=c["id"], id=f"r-{c['id']}")
                for c in calls
            ]
        }

    def route(state: Any) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    # The functional form evaluates the annotation now: the class form would leave a string
    # that LangGraph resolves in this module's globals, where these lazy imports are not.
    state = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages]})  # type: ignore[misc]  # noqa: UP013
    builder = StateGraph(state)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


class PutTripwire:
    """Logs every ``put`` that returned to ``acknowledged`` (synced), and kills the process at
    ``point`` of the ``put`` numbered :data:`KILLED_PUT` once :meth:`arm` was called."""

    def __init__(self, saver: Any, ledger: Ledger, acknowledged: Path, point: str) -> None:
        self.point, self.puts, self.armed = point, 0, False
        self.in_killed_put = threading.local()
        self.acknowledged = acknowledged
        put = saver.put

        def logged_put(*args: Any, **kwargs: Any) -> Any:
            self.puts += 1
            self.in_killed_put.value = self.armed and self.puts == KILLED_PUT
            returned = put(*args, **kwargs)
            self._log(returned["configurable"])
            return returned

        saver.put = logged_put
        event.listen(ledger.engine, "commit", self._commit)
        do_commit = ledger.engine.dialect.do_commit

        def commit_then_check(dbapi_connection: Any) -> None:
            do_commit(dbapi_connection)
            if self._tripped("put-committed"):
                kill("sigkill")

        ledger.engine.dialect.do_commit = commit_then_check  # type: ignore[method-assign]

    def arm(self) -> None:
        """From now on, count the puts of the invocation to kill."""
        self.armed, self.puts = True, 0

    def _tripped(self, point: str) -> bool:
        return self.point == point and getattr(self.in_killed_put, "value", False)

    def _commit(self, _conn: Any) -> None:
        if self._tripped("put-sent"):
            kill("sigkill")

    def _log(self, returned: dict[str, Any]) -> None:
        entry = {k: returned[k] for k in ("checkpoint_ns", "checkpoint_id")}
        with self.acknowledged.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def invoke_and_die(spec: dict[str, Any]) -> None:
    """The child: the first question answered, then the second, killed at ``spec["point"]``."""
    from agentledger.integrations.langgraph import LedgerSaver

    point = spec["point"]
    ledger = Ledger.open(spec["url"])
    saver = LedgerSaver(ledger)
    tripwire = PutTripwire(saver, ledger, Path(spec["acknowledged"]), point)

    def on_model_step(turn: int, step: int) -> None:
        if point == "model-node" and (turn, step) == (2, 2):
            kill("sigkill")

    graph = build_graph(saver, on_model_step)
    graph.invoke({"messages": [("human", QUESTIONS[0])]}, config())
    tripwire.arm()
    graph.invoke({"messages": [("human", QUESTIONS[1])]}, config())
    raise AssertionError(f"the second invocation ended: {point} was never reached")


def run_killed(spec: dict[str, Any], workdir: Path, name: str) -> Finished:
    """Run :func:`invoke_and_die` in a child forked from the forkserver, to its kill."""
    return forked.run(invoke_and_die, spec, workdir, name)


def read_acknowledged(path: Path) -> list[dict[str, str]]:
    """The checkpoints whose ``put`` returned, in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

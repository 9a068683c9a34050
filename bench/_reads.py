"""The reads side of the version comparison, one class a worker process holds: a ledger of run
trees, built through ``Agent.run`` with subagents, and two of its reads timed: ``Ledger.runs()``
(every run of the ledger) and ``Ledger.run_tree(root)`` (one whole tree).

A tree: the root run spawns ``fanout[0]`` subagents in one step, each of them ``fanout[1]``,
and so on; every run answers once its subagents answered (two steps a run, the leaves one).
The model is :class:`Spawner`, which decides from the request alone, so that one instance
serves every run of a level. Only the public API is used (``AgentBuilder.with_subagents``,
``SubagentSpec``, ``Ledger.runs``, ``Ledger.run_tree``), which both versions have.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

from agentledger import AgentBuilder, SubagentPolicy, SubagentSpec, ToolCall
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse

from ._common import ANSWER, MODEL, USAGE

SPAWN = "spawn_subagent"


class Spawner:
    """A model that, given a task, spawns ``spawns`` subagents named ``subagent`` in one step,
    and answers once their results are in (at once when ``spawns`` is 0)."""

    def __init__(self, spawns: int, subagent: str | None) -> None:
        self.spawns = spawns
        self.subagent = subagent

    def complete(self, request: Any) -> InferenceResponse:
        last = request.messages.root[-1]
        if self.spawns and getattr(last.role, "value", last.role) != "tool":
            calls = [
                ToolCall(
                    id=f"spawn-{n}",
                    name=SPAWN,
                    arguments={"subagent": self.subagent, "task": f"part {n}"},
                )
                for n in range(self.spawns)
            ]
            return InferenceResponse(tool_calls=calls, usage=USAGE, model=MODEL)
        return InferenceResponse(content=ANSWER, usage=USAGE, model=MODEL)


def tree_size(fanout: tuple[int, ...]) -> int:
    """The runs of one tree: 1 + f0 + f0*f1 + ..."""
    size, level = 1, 1
    for spawns in fanout:
        level *= spawns
        size += level
    return size


def _spec(fanout: tuple[int, ...], depth: int) -> SubagentSpec:
    """The subagent at ``depth`` (1 is the root's children), with those below it."""
    spawns = fanout[depth] if depth < len(fanout) else 0
    below = (_spec(fanout, depth + 1),) if spawns else ()
    return SubagentSpec(
        name=f"level{depth}",
        description=f"the subagent at depth {depth}",
        llm=Spawner(spawns, f"level{depth + 1}" if spawns else None),
        subagents=below,
    )


def tree_agent(ledger: Ledger, fanout: tuple[int, ...]) -> Any:
    builder = AgentBuilder().with_llm(Spawner(fanout[0], "level1")).with_max_steps(None)
    policy = SubagentPolicy(max_depth=len(fanout))
    builder = builder.with_subagents([_spec(fanout, 1)], policy=policy)
    return builder.with_ledger(ledger).build()


class Reads:
    """One ledger of run trees, in one database, and its reads timed."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.ledger = Ledger.open(self.path, synchronous="NORMAL")
        self.roots: list[str] = []

    def build(self, trees: int, fanout: tuple[int, ...]) -> float:
        """``trees`` trees (untimed); the seconds they took."""
        started = time.perf_counter()
        for n in range(trees):
            self.roots.append(tree_agent(self.ledger, fanout).run(f"tree {n}").run_id)
        return time.perf_counter() - started

    def shape(self) -> dict[str, Any]:
        """What the reads return: how many runs, the tree's size, the type of a run row."""
        runs = self.ledger.runs()
        tree = self.ledger.run_tree(self.roots[0])
        return {
            "runs": len(runs),
            "tree": sum(1 for _ in tree.walk()),
            "row": type(runs[0]).__name__,
        }

    def runs(self) -> float:
        """``Ledger.runs()``: every run of the ledger; its seconds."""
        gc.collect()
        started = time.perf_counter()
        self.ledger.runs()
        return time.perf_counter() - started

    def run_tree(self) -> float:
        """``Ledger.run_tree(root)`` of the first tree; its seconds."""
        gc.collect()
        started = time.perf_counter()
        self.ledger.run_tree(self.roots[0])
        return time.perf_counter() - started

    def close(self) -> None:
        self.ledger.close()

"""Subagents: a run spawns child runs through a tool, each in an isolated state.

Every level of the tree has its own conversation and its own run, exposes only its answer to
its caller, may be stopped by the budget it shares with its ancestors, and is recorded like
any run (seed 004, "the fractal model"). The parent's model sees the child's answer as the
spawn tool's result; nothing of the child's trace reaches the parent's buffer or conversation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PositiveInt

from .._core import Tool, ToolContext, ToolOutput, ToolSource
from .._recording import RunResult
from .._values import LLM, AgentStatus, ExecutionBudget, Spend
from ._agent import Agent

SPAWN_TOOL_NAME = "spawn_subagent"


@dataclass(frozen=True)
class SubagentSpec:
    """A subagent the model may spawn: who it is, what it may use, how much it may spend.

    ``llm`` defaults to the parent's model; ``budget`` is tightened by what the parent has left
    when it spawns; ``subagents`` are the ones this subagent may spawn in turn; its tools from
    ``mcp_servers`` are connected at its first run and kept until the parent agent is closed.
    """

    name: str
    description: str
    system_prompt: str | None = None
    tools: Sequence[Tool | Callable[..., object]] = ()
    llm: LLM | None = None
    budget: ExecutionBudget | None = None
    subagents: Sequence[SubagentSpec] = field(default_factory=tuple)
    mcp_servers: Sequence[ToolSource] = ()


class SubagentPolicy(BaseModel):
    """Rules for spawning. ``max_depth`` is the deepest level a subagent may sit at; the root
    run is at depth 0, so the default lets subagents spawn subagents twice more."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    max_depth: PositiveInt = 3


class SpawnArguments(BaseModel):
    """The spawn tool's arguments, as the model sends them."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    subagent: str = Field(description="The name of the subagent to run.")
    task: str = Field(
        description="What the subagent should do. It sees only this text, not this conversation, "
        "so include everything it needs."
    )


@dataclass(frozen=True)
class SpawnSubagentTool:
    """The tool, seen by the model as ``spawn_subagent``, that runs a subagent to its answer."""

    subagents: tuple[SubagentSpec, ...]
    policy: SubagentPolicy
    make_agent: Callable[[SubagentSpec], Agent]
    name: str = SPAWN_TOOL_NAME
    arguments_model: type[BaseModel] = SpawnArguments
    _connected: dict[str, Agent] = field(default_factory=dict, compare=False, repr=False)
    """The subagents with tool sources, made once: their connections outlive a spawn."""
    _making: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def description(self) -> str:
        listed = "\n".join(f"- {s.name}: {s.description}" for s in self.subagents)
        return (
            "Give a task to a subagent, which works on it alone (with its own tools) and "
            "returns its answer. Several spawns in one step may run at once. Subagents:\n" + listed
        )

    def spec(self, name: str) -> SubagentSpec | None:
        return next((s for s in self.subagents if s.name == name), None)

    def invoke(self, arguments: BaseModel, context: ToolContext) -> ToolOutput:
        assert isinstance(arguments, SpawnArguments)
        spec = self.spec(arguments.subagent)
        if spec is None:
            names = ", ".join(s.name for s in self.subagents)
            return _refused(
                f"there is no subagent {arguments.subagent!r}; the subagents are: {names}"
            )
        depth = context.state.depth + 1
        if depth > self.policy.max_depth:
            return _refused(
                f"spawning {spec.name!r} would put it at depth {depth}, deeper than the "
                f"subagent policy allows ({self.policy.max_depth}); do this task yourself"
            )
        parent = context.state
        spent = parent.spend() + (context.in_flight or Spend())
        budget = parent.budget.remaining(spent, parent.run_started_at)
        if spec.budget is not None:
            budget = budget.tightened(spec.budget)
        child = self._agent(spec)
        return _reported(spec, _run_once(child, arguments.task, context, budget))

    def _agent(self, spec: SubagentSpec) -> Agent:
        """The agent of ``spec``: a new one each time, unless it has tool sources, whose
        connections are made once and kept until :meth:`close`."""
        if not spec.mcp_servers:
            return self.make_agent(spec)
        with self._making:
            if spec.name not in self._connected:
                self._connected[spec.name] = self.make_agent(spec)
            return self._connected[spec.name]

    def close(self) -> None:
        """Let the subagents' tool sources go (``Agent.close`` of the parent does it)."""
        with self._making:
            agents = list(self._connected.values())
            self._connected.clear()
        for agent in agents:
            agent.close()


def _run_once(child: Agent, task: str, context: ToolContext, budget: ExecutionBudget) -> RunResult:
    """Run the child, unless this very tool call already started it: a parent resumed after a
    crash redoes its step, and must not start a second copy of a child that already ran. A
    child that ended is reported as it ended (an abandoned one as interrupted); one that was cut
    off with the parent goes on."""
    parent_run_id = context.state.run_id
    found = None
    if parent_run_id is not None:
        found = child.recorder.find_child_run(parent_run_id, context.idempotency_key)
    if found is not None:
        run_id, status = found
        if status in (AgentStatus.COMPLETED, AgentStatus.STOPPED, AgentStatus.INTERRUPTED):
            return child.recorder.run_result(run_id)
        if status in (AgentStatus.RUNNING, AgentStatus.FAILED):
            # Its process was the parent's, which is gone: nothing else can be running it.
            return child.resume(run_id, stale_after=0)
    return child.run_subagent(task, parent=context, budget=budget)


def _refused(message: str) -> ToolOutput:
    return ToolOutput(content=f"Error: {message}", is_error=True)


def _reported(spec: SubagentSpec, result: RunResult) -> ToolOutput:
    """The child's answer, as the parent's model is shown it."""
    answer = result.answer or ""
    metadata: dict[str, JsonValue] = {
        "subagent": spec.name,
        "status": result.status.value,
        "stop_reason": result.stop_reason.value if result.stop_reason else None,
    }
    if result.status is AgentStatus.FAILED:
        content = f"Error: subagent {spec.name!r} failed: {result.error}"
        if answer:
            content += f"\nWhat it had: {answer}"
        return ToolOutput(
            content=content,
            is_error=True,
            child_run_id=result.run_id,
            subtree=result.spend,
            metadata=metadata,
        )
    if result.status in (AgentStatus.STOPPED, AgentStatus.INTERRUPTED):
        reason = result.stop_reason.value if result.stop_reason else "a limit"
        if result.status is AgentStatus.INTERRUPTED:
            reason = "abandoned after its process stopped"
        content = f"[interrupted: {reason}] {answer or '(no answer)'}"
        return ToolOutput(
            content=content,
            child_run_id=result.run_id,
            subtree=result.spend,
            metadata={**metadata, "interrupted": True},
        )
    return ToolOutput(
        content=answer, child_run_id=result.run_id, subtree=result.spend, metadata=metadata
    )

"""A child process for the subagent crash-recovery and concurrency tests.

A child is forked from a warm forkserver (``support.forked``: :func:`run_child`,
:func:`run_together`) and calls :func:`play` with its spec, which says which role to play:

``tree-crash``
    Run a three-level tree (root → child → grandchild) on a new conversation; the grandchild's
    ``lookup`` tool SIGKILLs the process in step 1 of the grandchild's run (step 0 recorded).
``spawn-then-crash``
    Run a root whose step 0 calls two tools, one after the other: ``spawn_subagent`` (the
    child runs to its answer and commits), then ``boom``, which SIGKILLs the process before the
    root's step 0 is recorded.
``fan-out``
    After the barrier, open the ledger; once all ``peers`` have, run ``turns`` root runs on one
    conversation, each spawning four subagents in one step (``with_parallel_tools(4)``), each
    of those calling ``lookup`` in several steps before it answers.

Every role but the crashing ones writes a JSON result file (``{"ok": ...}`` or ``{"error":
...}``); a crashing role writes ``{"survived": true}`` only if it was not killed.

The parent imports the agents from here (:func:`tree_agent`, :func:`spawn_then_crash_agent`),
so the process that crashes and the one that recovers run the very same models and tools.
Every model call is logged to a side file (synced), to count them across a SIGKILL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentledger import (
    Agent,
    AgentBuilder,
    Role,
    SubagentSpec,
    ToolCall,
    ToolContext,
    Usage,
    tool,
)
from agentledger._loop import SPAWN_TOOL_NAME
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support import crash_child, forked
from support.crash_child import (
    FULL_ANSWER,
    barrier,
    die,
    lookup_tool,
    play_role,
    rendezvous,
    scripted_model,
    summary,
    tool_results_of_this_run,
    write_json,
)
from support.forked import Finished

Model = Callable[[InferenceRequest], InferenceResponse]

QUESTION = "Find three facts about otters, through your team."
CHILD_TASK = "Ask the grandchild for three facts about otters."
GRANDCHILD_TASK = "Look up three facts about otters."
GRANDCHILD_ANSWER = FULL_ANSWER
CHILD_ANSWER = "child: " + GRANDCHILD_ANSWER
ROOT_ANSWER = "root: " + CHILD_ANSWER

ROOT_USAGE = Usage(input_tokens=100, output_tokens=10)
CHILD_USAGE = Usage(input_tokens=20, output_tokens=2)
GRANDCHILD_USAGE = Usage(input_tokens=10, output_tokens=3)  # scripted_model's
"""Each level spends differently per model call, so the run tree's sums tell them apart."""

BOOM_RESULT = "boom done"
SPAWN_THEN_BOOM_ANSWER = f"root: {FULL_ANSWER} / {BOOM_RESULT}"

WORKERS = 4
"""Subagents the fan-out root spawns in one step."""


def log_line(path: Path | None, entry: dict[str, Any]) -> None:
    """Append one JSON line to ``path``, synced: it survives the SIGKILL that may follow."""
    if path is None:
        return
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def logged(agent: str, model: Model, models_file: Path | None) -> ScriptedLLM:
    """``model`` as a ScriptedLLM that logs every call (which agent, how many tool results of
    its run it had seen) before answering."""

    def respond(request: InferenceRequest) -> InferenceResponse:
        seen = len(tool_results_of_this_run(request))
        log_line(models_file, {"pid": os.getpid(), "agent": agent, "seen": seen})
        return model(request)

    return ScriptedLLM([respond] * 1000)


def spawn_call(subagent: str, task: str, call_id: str) -> ToolCall:
    return ToolCall(
        id=call_id, name=SPAWN_TOOL_NAME, arguments={"subagent": subagent, "task": task}
    )


def relay_model(*, to: str, task: str, prefix: str, usage: Usage) -> Model:
    """Spawns ``to`` with ``task`` (always the same call id, so a redone step has the same
    idempotency key), then answers ``prefix`` + what it got back."""

    def respond(request: InferenceRequest) -> InferenceResponse:
        results = tool_results_of_this_run(request)
        if not results:
            call = spawn_call(to, task, f"spawn-{to}")
            return InferenceResponse(tool_calls=[call], usage=usage, finish_reason="tool_calls")
        return InferenceResponse(content=prefix + results[0], usage=usage, finish_reason="stop")

    return respond


def tree_agent(
    ledger: Ledger, *, tools_file: Path, models_file: Path, crash: bool = False
) -> tuple[Agent, dict[str, ScriptedLLM]]:
    """Root → child → grandchild. The grandchild calls ``lookup`` three times, then answers;
    with ``crash``, its ``lookup`` of step 1 kills the process."""
    llms = {
        "root": logged(
            "root",
            relay_model(to="child", task=CHILD_TASK, prefix="root: ", usage=ROOT_USAGE),
            models_file,
        ),
        "child": logged(
            "child",
            relay_model(to="grandchild", task=GRANDCHILD_TASK, prefix="child: ", usage=CHILD_USAGE),
            models_file,
        ),
        "grandchild": logged("grandchild", scripted_model(), models_file),
    }
    grandchild = SubagentSpec(
        name="grandchild",
        description="Looks facts up.",
        tools=[lookup_tool(tools_file, crash_at_step=1 if crash else None)],
        llm=llms["grandchild"],
    )
    child = SubagentSpec(
        name="child",
        description="Delegates to the grandchild.",
        llm=llms["child"],
        subagents=[grandchild],
    )
    agent = (
        AgentBuilder()
        .with_llm(llms["root"])
        .with_subagents([child])
        .with_name("root")
        .with_ledger(ledger)
        .build()
    )
    return agent, llms


def boom_tool(tools_file: Path, *, crash: bool) -> Any:
    @tool
    def boom(context: ToolContext) -> str:
        """Does something ordinary (and, in the crashing process, dies)."""
        log_line(
            tools_file,
            {
                "pid": os.getpid(),
                "tool": "boom",
                "run_id": context.run_id,
                "step_index": context.step_index,
                "idempotency_key": context.idempotency_key,
            },
        )
        if crash:
            die()
        return BOOM_RESULT

    return boom


def spawn_then_boom_model(request: InferenceRequest) -> InferenceResponse:
    """Step 0: ``spawn_subagent`` then ``boom``, in that order; then the answer quoting both."""
    results = tool_results_of_this_run(request)
    if not results:
        calls = [
            spawn_call("child", GRANDCHILD_TASK, "spawn-child"),
            ToolCall(id="boom", name="boom", arguments={}),
        ]
        return InferenceResponse(tool_calls=calls, usage=ROOT_USAGE, finish_reason="tool_calls")
    return InferenceResponse(
        content="root: " + " / ".join(results), usage=ROOT_USAGE, finish_reason="stop"
    )


def spawn_then_crash_agent(
    ledger: Ledger, *, tools_file: Path, models_file: Path, crash: bool = False
) -> tuple[Agent, dict[str, ScriptedLLM]]:
    """A root that spawns a child (three ``lookup`` steps, then its answer) and then calls
    ``boom``, sequentially; with ``crash``, ``boom`` kills the process."""
    llms = {
        "root": logged("root", spawn_then_boom_model, models_file),
        "child": logged("child", scripted_model(), models_file),
    }
    child = SubagentSpec(
        name="child",
        description="Looks facts up.",
        tools=[lookup_tool(tools_file)],
        llm=llms["child"],
    )
    agent = (
        AgentBuilder()
        .with_llm(llms["root"])
        .with_tools([boom_tool(tools_file, crash=crash)])
        .with_subagents([child])
        .with_parallel_tools(1)
        .with_name("root")
        .with_ledger(ledger)
        .build()
    )
    return agent, llms


def first_user_message(request: InferenceRequest) -> str:
    return next(m.content for m in request.messages if m.role is Role.USER)


def fan_out_model(request: InferenceRequest) -> InferenceResponse:
    """Spawns ``WORKERS`` workers in one step, then answers with all their answers, in order."""
    results = tool_results_of_this_run(request)
    if not results:
        text = [m.content for m in request.messages if m.role is Role.USER][-1]
        calls = [spawn_call("worker", f"part {n} of {text}", f"spawn-{n}") for n in range(WORKERS)]
        return InferenceResponse(tool_calls=calls, usage=ROOT_USAGE, finish_reason="tool_calls")
    return InferenceResponse(
        content="summary: " + " | ".join(results), usage=ROOT_USAGE, finish_reason="stop"
    )


def worker_model(delay: float) -> Model:
    """``scripted_model``'s three lookups, with an answer that names the worker's task."""
    lookups = scripted_model(delay=delay)

    def respond(request: InferenceRequest) -> InferenceResponse:
        response = lookups(request)
        if response.tool_calls:
            return response
        return response.model_copy(
            update={"content": f"{first_user_message(request)} -> {response.content}"}
        )

    return respond


def fan_out_answer(text: str) -> str:
    """What a fan-out root run on ``text`` answers."""
    return "summary: " + " | ".join(f"part {n} of {text} -> {FULL_ANSWER}" for n in range(WORKERS))


def fan_out_agent(ledger: Ledger, *, delay: float = 0.0) -> Agent:
    worker = SubagentSpec(
        name="worker",
        description="Looks facts up.",
        tools=[lookup_tool(None)],
        llm=ScriptedLLM([worker_model(delay)] * 1000),
    )
    return (
        AgentBuilder()
        .with_llm(ScriptedLLM([fan_out_model] * 1000))
        .with_subagents([worker])
        .with_parallel_tools(WORKERS)
        .with_name("root")
        .with_ledger(ledger)
        .build()
    )


# --- the roles ----------------------------------------------------------------------------------


def _run_until_the_crash(build: Callable[..., tuple[Agent, Any]], spec: dict[str, Any]) -> None:
    """Run the agent ``build`` makes with its crash armed; the result file says if it survived."""
    ledger = Ledger.open(spec["url"])
    agent, _ = build(
        ledger,
        tools_file=Path(spec["tools_file"]),
        models_file=Path(spec["models_file"]),
        crash=True,
    )
    result = agent.run(QUESTION)
    write_json(Path(spec["result_file"]), {"ok": summary(result), "survived": True})


def tree_crash(spec: dict[str, Any]) -> None:
    _run_until_the_crash(tree_agent, spec)


def spawn_then_crash(spec: dict[str, Any]) -> None:
    _run_until_the_crash(spawn_then_crash_agent, spec)


def fan_out(spec: dict[str, Any]) -> list[dict[str, Any]]:
    barrier(spec)
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        agent = fan_out_agent(ledger, delay=spec.get("delay", 0.0))
        rendezvous(spec, "opened")
        conversation_id = None
        acknowledged = []
        for turn in range(spec["turns"]):
            text = f"turn {turn} of process {spec['name']}"
            result = agent.run(text, conversation_id)
            conversation_id = result.conversation_id
            acknowledged.append(
                {
                    **summary(result),
                    "text": text,
                    "child_run_ids": list(result.child_run_ids),
                    "spend": result.spend.model_dump(mode="json"),
                }
            )
        return acknowledged


CRASHING: dict[str, Callable[[dict[str, Any]], None]] = {
    "tree-crash": tree_crash,
    "spawn-then-crash": spawn_then_crash,
}
ROLES: dict[str, Callable[[dict[str, Any]], Any]] = {"fan-out": fan_out}


def play(spec: dict[str, Any]) -> None:
    """What a child does: play ``spec["role"]``."""
    if spec["role"] in CRASHING:
        CRASHING[spec["role"]](spec)
    else:
        play_role(ROLES, spec)


# --- the parent's side ------------------------------------------------------------------------


def run_child(spec: dict[str, Any], workdir: Path, name: str) -> Finished:
    """Run one child playing a role of this module to its end (or its kill)."""
    return forked.run(play, spec, workdir, name)


def run_together(specs: dict[str, dict[str, Any]], workdir: Path) -> dict[str, Finished]:
    """Start children playing roles of this module and release them at once
    (``forked.run_together``)."""
    return forked.run_together(play, specs, workdir)


read_lines = crash_child.read_side_file

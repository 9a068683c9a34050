"""The agent loop's own overhead, no database.

One turn of an agent (a user message, three tool-calling steps, a final answer; tool results of
about 1 KB) with a scripted model, against a bare loop that makes the same model calls and tool
calls by hand with no bookkeeping at all. The ratio is the price of the immutable state, the
processors and the continuation criteria.
"""

from __future__ import annotations

import time

from agentledger import AgentBuilder, AgentState, Message, Messages
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM

from ._common import Sizes, interleaved, lookup, script, us
from ._report import Row, Section

TOOL_STEPS_PER_TURN = 3
STEPS_PER_TURN = TOOL_STEPS_PER_TURN + 1


def _turns_script(turns: int) -> list[InferenceResponse]:
    return script(TOOL_STEPS_PER_TURN, 1) * turns


def agent_loop(turns: int) -> float:
    agent = AgentBuilder().with_llm(ScriptedLLM(_turns_script(turns))).with_tools([lookup]).build()
    state = AgentState.empty()
    started = time.perf_counter()
    for i in range(turns):
        state = agent.execute(state.with_user_message(f"question {i}"))
    return time.perf_counter() - started


def bare_loop(turns: int) -> float:
    """The same model and tool calls, messages kept in a plain list: the floor."""
    llm = ScriptedLLM(_turns_script(turns))
    conversation: list[Message] = []
    started = time.perf_counter()
    for i in range(turns):
        conversation.append(Message.user(f"question {i}"))
        trace: list[Message] = []
        while True:
            response = llm.complete(
                InferenceRequest(messages=Messages(tuple(conversation + trace)))
            )
            if not response.tool_calls:
                conversation.append(Message.assistant(response.content))
                break
            trace.append(Message.assistant(tool_calls=response.tool_calls))
            for call in response.tool_calls:
                result = lookup.function(**call.arguments)
                trace.append(Message.tool(str(result), tool_call_id=call.id, name=call.name))
    return time.perf_counter() - started


def run(sizes: Sizes) -> Section:
    turns, reps = sizes.loop_turns, sizes.loop_reps
    samples = interleaved(
        {"agent loop": lambda: agent_loop(turns), "bare loop": lambda: bare_loop(turns)}, reps
    )
    steps = turns * STEPS_PER_TURN
    agent, bare = samples.median("agent loop") / steps, samples.median("bare loop") / steps
    return Section(
        title="1. The agent loop, no database",
        about=(
            f"{turns} turns of {STEPS_PER_TURN} steps (3 tool-calling steps with ~1 KB results, "
            f"an answer), scripted model, in memory; {reps} interleaved repetitions. "
            "`Agent.execute` against a bare loop making the same model and tool calls."
        ),
        rows=[
            Row("agent loop: time per step", us(agent), ""),
            Row("bare loop: time per step", us(bare), ""),
            Row("agent loop / bare loop, per step", "", f"{agent / bare:.2f}x", headline=True),
            Row("agent loop: steps per second", f"{1 / agent:,.0f}", ""),
        ],
    )

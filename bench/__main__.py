"""Benchmarks, reported as ratios measured in one run (machines are shared and noisy).

``python -m bench [--quick | --full]`` prints a table and writes ``bench/RESULTS.md``.

The agent loop's own overhead: one turn of an agent (a user message, three tool-calling steps,
a final answer; tool results of about 1 KB) with a scripted model and no database, against a
bare loop that makes the same model calls and tool calls by hand with no bookkeeping at all.
The ratio is the price of the immutable state, the processors and the continuation criteria.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from agentledger import AgentBuilder, AgentState, Message, Messages, ToolCall, Usage, tool
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM

RESULT = "x" * 1024
STEPS_PER_TURN = 4


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return RESULT


def _script(turns: int) -> list[InferenceResponse]:
    usage = Usage(input_tokens=100, output_tokens=20)
    one_turn = [
        InferenceResponse(
            tool_calls=[ToolCall(id=f"c{i}", name="lookup", arguments={"key": str(i)})],
            usage=usage,
        )
        for i in range(STEPS_PER_TURN - 1)
    ]
    one_turn.append(InferenceResponse(content="done", usage=usage))
    return one_turn * turns


def agent_loop(turns: int) -> float:
    agent = AgentBuilder().with_llm(ScriptedLLM(_script(turns))).with_tools([lookup]).build()
    state = AgentState.empty()
    started = time.perf_counter()
    for i in range(turns):
        state = agent.execute(state.with_user_message(f"question {i}"))
    return time.perf_counter() - started


def bare_loop(turns: int) -> float:
    """The same model and tool calls, messages kept in a plain list: the floor."""
    llm = ScriptedLLM(_script(turns))
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


def _medians(systems: dict[str, Callable[[int], float]], turns: int, reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(reps):  # interleaved, so drift in machine load hits every system alike
        for name, run in systems.items():
            samples[name].append(run(turns))
    return {name: statistics.median(times) for name, times in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a short run, for a smoke check")
    size.add_argument("--full", action="store_true", help="more turns and repetitions")
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = parser.parse_args(argv)
    turns, reps = (20, 3) if args.quick else (400, 9) if args.full else (100, 5)
    medians = _medians({"agent loop": agent_loop, "bare loop": bare_loop}, turns, reps)
    steps = turns * STEPS_PER_TURN
    ratio = medians["agent loop"] / medians["bare loop"]
    rows = [
        "| measure | value |",
        "|---|---|",
        f"| agent loop: steps per second | {steps / medians['agent loop']:,.0f} |",
        f"| agent loop / bare loop, time per step (median of {reps}) | {ratio:.2f}x |",
    ]
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    report = "\n".join(
        [
            "# Benchmark results",
            "",
            f"Command: `{command.strip()}` ({turns} turns of {STEPS_PER_TURN} steps, "
            f"{reps} interleaved repetitions).",
            f"Machine: {platform.machine()}, {platform.system()}, Python "
            f"{platform.python_version()}, agentledger {version('agentledger')}, "
            f"pydantic {version('pydantic')}.",
            "",
            "Steps per second is noisy on shared machines; the ratio, measured in one run, is the "
            "figure to compare.",
            "",
            *rows,
            "",
        ]
    )
    print(report)
    args.output.write_text(report, encoding="utf-8")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()

"""Sections 1 and 2: what a step costs, in memory and on a ledger.

1. ``Agent.execute`` in memory against a bare loop making the same model and tool calls.
2. ``Agent.run`` of ``RUN_STEPS`` tool-calling steps on a SQLite ledger (FULL, NORMAL) against
   the same agent in memory and the floor (``bench/_raw.py``); then every step of a 200-step run
   with limits judged at each: the last against the tenth.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentledger import (
    AgentState,
    ExecutionBudget,
    InferenceRequest,
    InferenceResponse,
    Message,
    Messages,
    ScriptedLLM,
)
from agentledger.ledger import Ledger

from ._common import (
    STEPS_PER_TURN,
    TOOL_STEPS,
    Sizes,
    builder,
    interleaved,
    lookup,
    script,
    timed,
    us,
)
from ._raw import RawMessages
from ._report import Row, Section, ratio

if TYPE_CHECKING:
    from agentledger.ledger._failures import Synchronous

RUN_STEPS, CALLS, LONG_RUN = 25, 2, 200
TENTH, LAST = slice(5, 15), slice(LONG_RUN - 10, LONG_RUN)
"""The steps of the long run compared: around the tenth, and the last ten."""
LIMITS = ExecutionBudget(max_tokens=10**12, max_cost_usd=1e9)
"""Limits never reached, so that ``token_limit`` and ``cost_limit`` are judged at every step."""
MODES: tuple[Synchronous, ...] = ("FULL", "NORMAL")


@dataclass(frozen=True)
class Plan:
    loop_turns: int
    loop_reps: int
    step_reps: int


PLANS = {"quick": Plan(20, 3, 7), "default": Plan(100, 5, 15), "full": Plan(400, 9, 31)}


def agent_loop(turns: int) -> float:
    agent = builder(ScriptedLLM(script(TOOL_STEPS, 1) * turns)).build()
    state = AgentState.empty()
    started = time.perf_counter()
    for i in range(turns):
        state = agent.execute(state.with_user_message(f"question {i}"))
    return time.perf_counter() - started


def bare_loop(turns: int) -> float:
    """The same model and tool calls, messages kept in a plain list: the floor."""
    llm = ScriptedLLM(script(TOOL_STEPS, 1) * turns)
    conversation: list[Message] = []
    started = time.perf_counter()
    for i in range(turns):
        conversation.append(Message.user(f"question {i}"))
        trace: list[Message] = []
        while (response := llm.complete(_request(conversation + trace))).tool_calls:
            trace.append(Message.assistant(tool_calls=response.tool_calls))
            for call in response.tool_calls:
                result = lookup.function(**call.arguments)
                trace.append(Message.tool(str(result), tool_call_id=call.id, name=call.name))
        conversation.append(Message.assistant(response.content))
    return time.perf_counter() - started


def _request(messages: list[Message]) -> InferenceRequest:
    return InferenceRequest(messages=Messages(tuple(messages)))


def loop_section(plan: Plan) -> Section:
    turns = plan.loop_turns
    systems = {"agent loop": lambda: agent_loop(turns), "bare loop": lambda: bare_loop(turns)}
    samples = interleaved(systems, plan.loop_reps)
    agent, bare = (samples.median(n) / (turns * STEPS_PER_TURN) for n in systems)
    return Section(
        "1. The agent loop, no database",
        f"{turns} turns of {STEPS_PER_TURN} steps (3 tool-calling steps with ~1 KB results, an "
        f"answer), scripted model, in memory; {plan.loop_reps} interleaved repetitions. "
        "`Agent.execute` against a bare loop making the same model and tool calls.",
        [
            Row("agent loop: time per step", us(agent)),
            Row("bare loop: time per step", us(bare)),
            ratio("agent loop / bare loop, per step", agent / bare, headline=True),
            Row("agent loop: steps per second", f"{1 / agent:,.0f}"),
        ],
    )


class _Clocked(ScriptedLLM):
    """A scripted model that notes when each step asks it: one step's time is the time
    between two requests (its tools, its record and the next step's begin included)."""

    def __init__(self, items: list[InferenceResponse]) -> None:
        super().__init__(items)
        self.asked: list[float] = []

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        self.asked.append(time.perf_counter())
        return super().complete(request)


def step_times(ledger: Ledger | None) -> list[float]:
    """Each step's time along one run of :data:`LONG_RUN` tool-calling steps with limits."""
    llm = _Clocked(script(LONG_RUN, CALLS))
    builder(llm, ledger).with_max_steps(None).with_budget(LIMITS).build().run("go")
    return [later - earlier for earlier, later in zip(llm.asked, llm.asked[1:], strict=False)]


def _long_run_rows(plan: Plan, tmp: Path) -> list[Row]:
    rows: list[Row] = []
    with Ledger.open(tmp / "long-run.db", synchronous="NORMAL") as ledger:
        for where, target in (("in memory", None), ("on a SQLite ledger", ledger)):
            times = [step_times(target) for _ in range(max(3, plan.step_reps // 3))]
            tenth = statistics.median(t for run in times for t in run[TENTH])
            last = statistics.median(t for run in times for t in run[LAST])
            name = f"{LONG_RUN}-step run {where}"
            rows += [
                Row(f"{name}: a step around the tenth", us(tenth)),
                Row(f"{name}: one of the last ten steps", us(last)),
                ratio(f"{name}: last / tenth", last / tenth, "≤ 1.2x", headline=True),
            ]
    return rows


def _library_run(ledger: Ledger | None) -> Callable[[], float]:
    def run() -> float:
        agent = builder(ScriptedLLM(script(RUN_STEPS, CALLS)), ledger).with_max_steps(None).build()
        return timed(lambda: agent.run("go"))

    return run


def _raw_run(raw: RawMessages) -> Callable[[], float]:
    return lambda: timed(lambda: raw.run("go", None, RUN_STEPS, CALLS))


def step_section(plan: Plan, tmp: Path) -> Section:
    systems: dict[str, Callable[[], float]] = {"in memory": _library_run(None)}
    with ExitStack() as stack:
        for mode in MODES:
            ledger = stack.enter_context(Ledger.open(tmp / f"steps-{mode}.db", synchronous=mode))
            raw = RawMessages(tmp / f"steps-raw-{mode}.db", mode)
            stack.callback(raw.close)
            systems[f"agentledger {mode}"] = _library_run(ledger)
            systems[f"raw {mode}"] = _raw_run(raw)
        samples = interleaved(systems, plan.step_reps, warm_up=1)
    step = {name: samples.median(name) / RUN_STEPS for name in systems}
    rows = [Row("the same agent, no ledger (in-memory recorder), per step", us(step["in memory"]))]
    for mode in MODES:
        ours, floor = step[f"agentledger {mode}"], step[f"raw {mode}"]
        rows += [
            Row(f"{mode}: agentledger (`Agent.run` on a ledger), per step", us(ours)),
            Row(f"{mode}: raw sqlite3, the run's messages, per step", us(floor)),
            ratio(f"{mode}: agentledger / raw messages, per step", ours / floor, headline=True),
            ratio(
                f"{mode}: the ledger's part (− in memory) / raw", (ours - step["in memory"]) / floor
            ),
        ]
    rows.append(
        ratio("agentledger FULL / NORMAL", step["agentledger FULL"] / step["agentledger NORMAL"])
    )
    return Section(
        "2. The ledger's cost per step",
        f"One `Agent.run` of {RUN_STEPS} tool-calling steps ({CALLS} calls each, ~1 KB results) "
        "and an answer, on a SQLite file ledger (WAL), per tool-calling step (the run's time / "
        f"{RUN_STEPS}: its begin and commit included); {plan.step_reps} interleaved repetitions, "
        "a new conversation each. Raw: plain `sqlite3` writing the run's messages and a usage row "
        "per model call (`bench/_raw.py`), a transaction a step. Then each step of a "
        f"{LONG_RUN}-step run with the token and cost limits set, timed between two model calls "
        f"({max(3, plan.step_reps // 3)} runs each).",
        rows + _long_run_rows(plan, tmp),
    )


def run(sizes: Sizes, tmp: Path) -> list[Section]:
    print("the agent loop, and a step's cost ...", file=sys.stderr, flush=True)
    return run_plan(PLANS[sizes.name], tmp)


def run_plan(plan: Plan, tmp: Path) -> list[Section]:
    return [loop_section(plan), step_section(plan, tmp)]

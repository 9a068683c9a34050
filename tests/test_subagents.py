"""Subagents, the fractal model (seed 004): a run spawns child runs through ``spawn_subagent``;
each child works in a state of its own, is recorded as a run one level deeper in the same
tree, spends from the budget it shares with its ancestors, and shows its caller only its
answer. Scripted models throughout, one per tree (routed on the system prompt); the ledger
is checked with SQL on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    ExecutionBudget,
    Role,
    StopReason,
    SubagentPolicy,
    SubagentSpec,
    Usage,
)
from agentledger._values import ContinuationDecision, Spend, StepType
from agentledger.cli import cli
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse
from support.databases import BACKENDS, postgres_database, sqlite_url
from support.subagents import (
    SECRET,
    SPAWN,
    TOKEN_COLUMNS,
    Database,
    Router,
    Script,
    answer,
    call,
    fails,
    lookup,
    nap,
    prompt,
    spawn,
    step_of,
    task_of,
    tool_messages,
    usage,
)

QUESTION = "What is the capital of France? Have it looked up."
TASK = "Look up the capital of France in the archive."
CHILD_ANSWER = "The archive says the capital of France is Paris."
PARENT_ANSWER = "Paris, according to my researcher."

RESEARCHER = SubagentSpec(
    name="researcher",
    description="Finds facts in the archive with its lookup tool.",
    system_prompt=prompt("researcher"),
    tools=(lookup,),
)
REVIEWER = SubagentSpec(
    name="reviewer",
    description="Reviews a draft answer for mistakes.",
    system_prompt=prompt("reviewer"),
)


def lead(
    router: Router,
    *subagents: SubagentSpec,
    ledger: Ledger | None = None,
    policy: SubagentPolicy | None = None,
) -> AgentBuilder:
    """The top agent, ``lead``: the lookup tool and the given subagents."""
    builder = (
        AgentBuilder()
        .with_llm(router)
        .with_name("lead")
        .with_system_prompt(prompt("lead"))
        .with_tools([lookup])
        .with_subagents(subagents, policy=policy)
    )
    return builder.with_ledger(ledger) if ledger is not None else builder


@pytest.fixture
def db(db_url: str, ledger: Ledger) -> Iterator[Database]:
    """SQL on the ledger's database, with the subagent tests' own queries."""
    with Database(db_url) as database:
        yield database


# --- 1. the seed case: only the answer goes up ------------------------------------------------


def seed_router(parent_answer: Callable[[InferenceRequest], InferenceResponse] | None = None):
    """``lead`` spawns ``researcher``, which looks the task up and answers; ``lead`` answers."""
    return Router(
        {
            "lead": Script(
                [
                    spawn(("researcher", TASK), usage=usage(100, 10)),
                    parent_answer or answer(PARENT_ANSWER, usage=usage(120, 12)),
                ]
            ),
            "researcher": Script(
                [
                    call("lookup", topic="France", usage=usage(50, 5)),
                    answer(CHILD_ANSWER, usage=usage(60, 6)),
                ]
            ),
            "reviewer": Script([]),
        }
    )


def assert_parent_saw_only_the_answer(router: Router) -> None:
    first, second = router.requests("lead")
    assert [m.content for m in tool_messages(second)] == [CHILD_ANSWER]
    assert [m.tool_call_id for m in tool_messages(second)] == ["spawn_0"]
    for request in (first, second):
        for message in request.messages:
            assert SECRET not in message.content, message
            assert message.content != prompt("researcher"), message
            assert all(c.name == SPAWN for c in message.tool_calls), message
    # The child did see its own trace: the parent not seeing it means something.
    child_first, child_second = router.requests("researcher")
    assert [(m.role, m.content) for m in child_first.messages] == [
        (Role.SYSTEM, prompt("researcher")),
        (Role.USER, TASK),
    ]
    assert any(SECRET in m.content for m in tool_messages(child_second))
    assert router.requests("reviewer") == []


def test_without_a_ledger_the_parent_model_sees_the_child_answer_and_none_of_its_trace() -> None:
    router = seed_router()
    agent = lead(router, RESEARCHER, REVIEWER).build()

    result = agent.run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    assert result.answer == PARENT_ANSWER
    assert_parent_saw_only_the_answer(router)
    assert result.usage == usage(220, 22)  # its own two steps
    assert (result.spend.usage, result.spend.steps) == (usage(330, 33), 4)  # and the child's
    assert [(m.role, m.content) for m in result.state.messages()] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, PARENT_ANSWER),
    ]
    assert result.state.execution_buffer().root == ()
    stored = agent.recorder.load_conversation(result.conversation_id)
    assert [m.content for m in stored.messages()] == [QUESTION, PARENT_ANSWER]

    (child_id,) = result.child_run_ids
    child = agent.recorder.run_result(child_id)
    assert child.status is AgentStatus.COMPLETED
    assert child.answer == CHILD_ANSWER
    assert child.conversation_id != result.conversation_id
    assert (child.state.parent_run_id, child.state.root_run_id, child.state.depth) == (
        result.run_id,
        result.run_id,
        1,
    )
    assert [m.content for m in child.state.messages()] == [TASK, CHILD_ANSWER]


def test_the_spawn_tool_offers_subagent_and_task_and_describes_every_subagent() -> None:
    router = seed_router()
    lead(router, RESEARCHER, REVIEWER).build().run(QUESTION)

    schemas = {s.name: s for s in router.requests("lead")[0].tools}
    assert set(schemas) == {"lookup", SPAWN}
    spawn_schema = schemas[SPAWN]
    parameters: dict[str, Any] = spawn_schema.parameters
    assert set(parameters["properties"]) == {"subagent", "task"}
    assert set(parameters["required"]) == {"subagent", "task"}
    for spec in (RESEARCHER, REVIEWER):
        assert f"{spec.name}: {spec.description}" in spawn_schema.description
    # The child is offered its own tools, not the spawn tool (it has no subagents).
    assert [s.name for s in router.requests("researcher")[0].tools] == ["lookup"]


def test_the_parent_model_sees_the_child_answer_and_none_of_its_trace(
    ledger: Ledger, db: Database
) -> None:
    buffer_seen: list[dict[str, Any]] = []

    def parent_answers(request: InferenceRequest) -> InferenceResponse:
        # The parent's buffer as the ledger holds it while the parent's run goes on.
        buffer_seen.extend(db.rows("SELECT * FROM execution_buffer_rows ORDER BY run_id, seq"))
        return answer(PARENT_ANSWER, usage=usage(120, 12))

    router = seed_router(parent_answers)
    result = lead(router, RESEARCHER, REVIEWER, ledger=ledger).build().run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    assert_parent_saw_only_the_answer(router)
    assert [(r["run_id"], r["role"]) for r in buffer_seen] == [
        (result.run_id, "assistant"),
        (result.run_id, "tool"),
    ]
    assert buffer_seen[1]["content"] == CHILD_ANSWER
    assert not any(SECRET in (r["content"] or "") for r in buffer_seen)
    assert [m.content for m in ledger.trace_messages(result.run_id)] == ["", CHILD_ANSWER]


def test_the_parent_conversation_never_holds_child_messages(ledger: Ledger, db: Database) -> None:
    result = lead(seed_router(), RESEARCHER, ledger=ledger).build().run(QUESTION)
    (child_id,) = result.child_run_ids
    child = db.run(child_id)

    rows = db.messages(result.conversation_id)
    assert [(r["section"], r["role"], r["content"], r["run_id"]) for r in rows] == [
        ("messages", "user", QUESTION, result.run_id),
        ("messages", "assistant", PARENT_ANSWER, result.run_id),
    ]
    assert [m.content for m in ledger.messages(result.conversation_id)] == [QUESTION, PARENT_ANSWER]
    assert [m.content for m in result.state.messages()] == [QUESTION, PARENT_ANSWER]
    assert result.state.execution_buffer().root == ()
    child_rows = db.messages(child["conversation_id"])
    assert [(r["role"], r["content"], r["run_id"]) for r in child_rows] == [
        ("user", TASK, child_id),
        ("assistant", CHILD_ANSWER, child_id),
    ]
    assert db.scalar("SELECT COUNT(*) FROM execution_buffer_rows") == 0


def test_a_child_runs_in_a_subagent_conversation_of_its_own_linked_to_the_parent_run(
    ledger: Ledger, db: Database
) -> None:
    result = lead(seed_router(), RESEARCHER, REVIEWER, ledger=ledger).build().run(QUESTION)

    parent, child = db.runs()
    assert parent["id"] == result.run_id
    assert (parent["parent_run_id"], parent["root_run_id"], parent["depth"]) == (
        None,
        result.run_id,
        0,
    )
    assert result.child_run_ids == (child["id"],)
    assert (child["parent_run_id"], child["root_run_id"], child["depth"]) == (
        result.run_id,
        result.run_id,
        1,
    )
    assert (child["agent_name"], child["status"]) == ("researcher", "completed")
    assert child["conversation_id"] != result.conversation_id

    conversation = db.conversation(child["conversation_id"])
    assert (conversation["kind"], conversation["parent_run_id"]) == ("subagent", result.run_id)
    top = db.conversation(result.conversation_id)
    assert (top["kind"], top["parent_run_id"]) == ("main", None)

    (spawned,) = db.tool_rows(result.run_id)
    assert (spawned["tool_name"], spawned["child_run_id"], spawned["result"]) == (
        SPAWN,
        child["id"],
        CHILD_ANSWER,
    )
    assert not spawned["is_error"]
    assert [r["tool_name"] for r in db.tool_rows(child["id"])] == ["lookup"]


# --- 2. depth ---------------------------------------------------------------------------------

FACT_CHECKER = SubagentSpec(
    name="fact_checker",
    description="Checks one fact.",
    system_prompt=prompt("fact_checker"),
)
RESEARCHER_WITH_CHECKER = SubagentSpec(
    name="researcher",
    description="Finds facts, and has them checked.",
    system_prompt=prompt("researcher"),
    tools=(lookup,),
    subagents=(FACT_CHECKER,),
)


def three_level_router() -> Router:
    """``lead`` → ``researcher`` → ``fact_checker``, each answering after its spawn."""
    return Router(
        {
            "lead": Script([spawn(("researcher", TASK)), answer(PARENT_ANSWER)]),
            "researcher": Script(
                [
                    spawn(("fact_checker", "Is Paris the capital of France?")),
                    lambda request: answer(
                        f"Researched; checker said: {tool_messages(request)[-1].content}"
                    ),
                ]
            ),
            "fact_checker": Script([answer("Yes, it is.")]),
        }
    )


def test_a_spawn_deeper_than_max_depth_is_an_error_result_and_the_run_goes_on(
    ledger: Ledger, db: Database
) -> None:
    router = three_level_router()
    agent = lead(router, RESEARCHER_WITH_CHECKER, ledger=ledger, policy=SubagentPolicy(max_depth=1))

    result = agent.build().run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    assert result.answer == PARENT_ANSWER
    (child_id,) = result.child_run_ids
    assert db.run(child_id)["status"] == "completed"
    (refused,) = db.tool_rows(child_id)
    assert refused["is_error"]
    assert refused["child_run_id"] is None
    assert "depth" in refused["result"]
    assert "depth" in tool_messages(router.requests("researcher")[1])[0].content
    assert router.requests("fact_checker") == []
    assert len(db.runs()) == 2
    # The parent got the researcher's answer as an ordinary result.
    (spawned,) = db.tool_rows(result.run_id)
    assert not spawned["is_error"]
    assert spawned["result"].startswith("Researched; checker said: Error")


def test_grandchildren_sit_at_depth_two_under_the_same_root_when_max_depth_allows(
    ledger: Ledger, db: Database
) -> None:
    agent = lead(
        three_level_router(),
        RESEARCHER_WITH_CHECKER,
        ledger=ledger,
        policy=SubagentPolicy(max_depth=2),
    )

    result = agent.build().run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    top, child, grandchild = db.runs()
    assert top["id"] == result.run_id
    assert (child["agent_name"], child["depth"], child["parent_run_id"]) == (
        "researcher",
        1,
        top["id"],
    )
    assert (grandchild["agent_name"], grandchild["depth"], grandchild["parent_run_id"]) == (
        "fact_checker",
        2,
        child["id"],
    )
    assert {r["root_run_id"] for r in (top, child, grandchild)} == {top["id"]}
    assert [r["status"] for r in (top, child, grandchild)] == ["completed"] * 3
    (spawned,) = db.tool_rows(child["id"])
    assert (spawned["child_run_id"], spawned["result"], spawned["is_error"]) == (
        grandchild["id"],
        "Yes, it is.",
        False,
    )
    conversation = db.conversation(grandchild["conversation_id"])
    assert (conversation["kind"], conversation["parent_run_id"]) == ("subagent", child["id"])
    assert db.tool_rows(result.run_id)[0]["result"] == "Researched; checker said: Yes, it is."


# --- 3. bad spawns ----------------------------------------------------------------------------


def test_spawning_an_unknown_subagent_is_an_error_result_naming_the_available_ones(
    ledger: Ledger, db: Database
) -> None:
    router = Router(
        {"lead": Script([spawn(("ghostwriter", "Write me a poem.")), answer(PARENT_ANSWER)])}
    )

    result = lead(router, RESEARCHER, REVIEWER, ledger=ledger).build().run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    assert result.child_run_ids == ()
    (refused,) = db.tool_rows(result.run_id)
    assert refused["is_error"]
    assert refused["child_run_id"] is None
    for name in ("ghostwriter", "researcher", "reviewer"):
        assert name in refused["result"]
    assert tool_messages(router.requests("lead")[1])[0].content == refused["result"]
    assert len(db.runs()) == 1


def test_a_spawn_without_a_task_is_an_error_result(ledger: Ledger, db: Database) -> None:
    missing_task = call(SPAWN, "spawn_0", subagent="researcher")
    router = Router({"lead": Script([missing_task, answer(PARENT_ANSWER)])})

    result = lead(router, RESEARCHER, ledger=ledger).build().run(QUESTION)

    assert result.status is AgentStatus.COMPLETED
    (refused,) = db.tool_rows(result.run_id)
    assert refused["is_error"]
    assert "task" in refused["result"]
    assert refused["child_run_id"] is None
    assert len(db.runs()) == 1


# --- 4. a child that fails --------------------------------------------------------------------


def test_a_child_whose_model_fails_is_an_error_result_and_the_parent_completes(
    ledger: Ledger, db: Database
) -> None:
    router = Router(
        {
            "lead": Script([spawn(("researcher", TASK)), answer(PARENT_ANSWER)]),
            "researcher": Script([fails(ConnectionError("the archive model is down"))]),
        }
    )

    result = lead(router, RESEARCHER, ledger=ledger).build().run(QUESTION)

    assert (result.status, result.answer) == (AgentStatus.COMPLETED, PARENT_ANSWER)
    (child_id,) = result.child_run_ids
    child = db.run(child_id)
    assert child["status"] == "failed"
    assert "the archive model is down" in child["error"]
    (spawned,) = db.tool_rows(result.run_id)
    assert spawned["is_error"]
    assert spawned["child_run_id"] == child_id
    assert "the archive model is down" in spawned["result"]
    assert "the archive model is down" in tool_messages(router.requests("lead")[1])[0].content
    assert db.run(result.run_id)["status"] == "completed"


# --- 5-7. budgets down the tree ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        (ExecutionBudget(max_steps=3), StopReason.STEPS_LIMIT),
        (ExecutionBudget(max_tokens=1000), StopReason.TOKEN_LIMIT),
    ],
    ids=["steps", "tokens"],
)
def test_a_child_stopped_by_the_shared_budget_still_answers_and_is_reported_interrupted(
    ledger: Ledger, db: Database, budget: ExecutionBudget, reason: StopReason
) -> None:
    router = Router(
        {
            "lead": Script(
                [
                    call("lookup", topic="France", usage=usage(800, 100)),
                    spawn(("researcher", TASK)),
                ],
                final=answer(PARENT_ANSWER),
            ),
            "researcher": Script(
                [
                    call("lookup", f"call_{n}", topic="Paris", usage=usage(100, 50))
                    for n in range(5)
                ],
                final=answer("Partial: Paris, probably."),
            ),
        }
    )

    result = lead(router, RESEARCHER, ledger=ledger).with_budget(budget).build().run(QUESTION)

    (child_id,) = result.child_run_ids
    child = db.run(child_id)
    assert (child["status"], child["stop_reason"]) == ("stopped", reason.value)
    steps = db.steps(child_id)
    assert steps[-1]["step_type"] == StepType.FINAL_RESPONSE.value
    assert steps[-1]["content"] == "Partial: Paris, probably."
    assert len(steps) < 5  # stopped well before its script ran out
    (_, spawned) = db.tool_rows(result.run_id)
    assert spawned["result"].startswith(f"[interrupted: {reason.value}]")
    assert spawned["result"].endswith("Partial: Paris, probably.")
    assert not spawned["is_error"]
    # The parent's model saw the same, and the tree as a whole stopped on the same limit.
    seen = tool_messages(router.requests("lead")[-1])
    assert seen[-1].content == spawned["result"]
    assert (result.status, result.stop_reason) == (AgentStatus.STOPPED, reason)
    assert result.answer == PARENT_ANSWER


def test_a_parent_whose_children_use_up_its_tokens_stops_with_token_limit(
    ledger: Ledger, db: Database
) -> None:
    router = Router(
        {
            "lead": Script(
                [spawn(("researcher", TASK), usage=usage(80, 20)), spawn(("reviewer", "x"))],
                final=answer(PARENT_ANSWER, usage=usage(8, 2)),
            ),
            "researcher": Script(
                [
                    call("lookup", topic="France", usage=usage(400, 50)),
                    answer(CHILD_ANSWER, usage=usage(400, 50)),
                ]
            ),
        }
    )
    agent = lead(router, RESEARCHER, REVIEWER, ledger=ledger)

    result = agent.with_budget(ExecutionBudget(max_tokens=1000)).build().run(QUESTION)

    assert (result.status, result.stop_reason) == (AgentStatus.STOPPED, StopReason.TOKEN_LIMIT)
    assert result.usage.total_tokens == 110 < 1000
    assert result.spend.usage.total_tokens == 110 + 900
    assert result.answer == PARENT_ANSWER
    (child_id,) = result.child_run_ids
    assert db.run(child_id)["status"] == "completed"
    spawn_step, final_step = db.steps(result.run_id)
    assert (spawn_step["stop_reason"], spawn_step["decided_by"]) == ("token_limit", "token_limit")
    assert spawn_step["final_response_required"]
    assert final_step["step_type"] == StepType.FINAL_RESPONSE.value
    parent = db.run(result.run_id)
    assert (parent["status"], parent["stop_reason"]) == ("stopped", "token_limit")
    assert parent["input_tokens"] + parent["output_tokens"] == 110  # its own, not inclusive
    assert router.requests("reviewer") == []


def test_a_subagent_budget_tighter_than_what_the_parent_has_left_is_the_child_budget(
    ledger: Ledger, db: Database
) -> None:
    own = ExecutionBudget(max_steps=2, max_tokens=300, max_cost_usd=0.25)
    spec = SubagentSpec(
        name="researcher",
        description="Finds facts.",
        system_prompt=prompt("researcher"),
        tools=(lookup,),
        budget=own,
    )
    router = Router(
        {
            "lead": Script([spawn(("researcher", TASK)), answer(PARENT_ANSWER)]),
            "researcher": Script([call("lookup", f"c{n}", topic="Paris") for n in range(5)]),
        }
    )
    parent_budget = ExecutionBudget(max_steps=10, max_tokens=5000, max_cost_usd=2.0)

    result = lead(router, spec, ledger=ledger).with_budget(parent_budget).build().run(QUESTION)

    (child_id,) = result.child_run_ids
    child = db.run(child_id)
    assert child["budget"] == {"max_steps": 2, "max_tokens": 300, "max_cost_usd": 0.25}
    assert (child["status"], child["stop_reason"], child["step_count"]) == (
        "stopped",
        "steps_limit",
        3,  # two steps, then the final response
    )
    assert db.run(result.run_id)["budget"] == parent_budget.model_dump(exclude_none=True)


def test_a_subagent_budget_looser_than_an_agent_default_is_honoured_when_the_parent_has_more_left(
    ledger: Ledger, db: Database
) -> None:
    spec = SubagentSpec(
        name="researcher",
        description="Digs deep.",
        system_prompt=prompt("researcher"),
        tools=(lookup,),
        budget=ExecutionBudget(max_steps=30),
    )
    router = Router(
        {
            "lead": Script([spawn(("researcher", TASK)), answer(PARENT_ANSWER)]),
            "researcher": Script(
                [*(call("lookup", f"c{n}", topic="Paris") for n in range(24)), answer(CHILD_ANSWER)]
            ),
        }
    )

    agent = lead(router, spec, ledger=ledger).with_budget(ExecutionBudget(max_steps=100))
    result = agent.build().run(QUESTION)

    (child_id,) = result.child_run_ids
    child = db.run(child_id)
    assert child["budget"]["max_steps"] == 30
    assert (child["status"], child["step_count"]) == ("completed", 25)
    assert db.tool_rows(result.run_id)[0]["result"] == CHILD_ANSWER


def test_a_child_token_budget_leaves_out_what_the_spawning_inference_already_spent(
    ledger: Ledger, db: Database
) -> None:
    router = Router(
        {
            "lead": Script(
                [spawn(("researcher", TASK), usage=usage(250, 50)), answer(PARENT_ANSWER)]
            ),
            "researcher": Script([answer(CHILD_ANSWER)]),
        }
    )
    agent = lead(router, RESEARCHER, ledger=ledger).with_budget(ExecutionBudget(max_tokens=1000))

    result = agent.build().run(QUESTION)

    (child_id,) = result.child_run_ids
    # The spawn step's inference had spent 300 of the parent's 1000 tokens when it spawned.
    assert db.run(child_id)["budget"]["max_tokens"] == 700


# --- 8. parallel spawns -----------------------------------------------------------------------

SLEEPER = SubagentSpec(
    name="sleeper",
    description="Naps for the number of seconds in its task, then reports.",
    system_prompt=prompt("sleeper"),
    tools=(nap,),
)


def sleeper_script(request: InferenceRequest) -> InferenceResponse:
    task = task_of(request)
    if step_of(request) == 0:
        return call("nap", seconds=float(task.split()[-1]))
    return answer(f"done: {task}")


def test_parallel_spawns_overlap_in_time_and_their_results_keep_call_order(
    ledger: Ledger, db: Database
) -> None:
    router = Router(
        {
            "lead": Script(
                [spawn(("sleeper", "alpha 0.3"), ("sleeper", "beta 0.1")), answer(PARENT_ANSWER)]
            ),
            "sleeper": sleeper_script,
        }
    )
    agent = lead(router, SLEEPER, ledger=ledger).with_parallel_tools(2)

    result = agent.build().run(QUESTION)

    assert (result.status, result.answer) == (AgentStatus.COMPLETED, PARENT_ANSWER)
    first, second = db.tool_rows(result.run_id)
    assert [first["position"], second["position"]] == [0, 1]
    assert [first["result"], second["result"]] == ["done: alpha 0.3", "done: beta 0.1"]
    assert result.child_run_ids == (first["child_run_id"], second["child_run_id"])
    assert [m.content for m in tool_messages(router.requests("lead")[1])] == [
        "done: alpha 0.3",
        "done: beta 0.1",
    ]
    alpha, beta = db.run(first["child_run_id"]), db.run(second["child_run_id"])
    assert db.messages(alpha["conversation_id"])[0]["content"] == "alpha 0.3"
    assert alpha["started_at"] < beta["finished_at"]
    assert beta["started_at"] < alpha["finished_at"]
    assert beta["finished_at"] < alpha["finished_at"]  # call order, not finishing order
    for run in db.runs():
        assert (run["status"], run["error"]) == ("completed", None)
    assert db.scalar("SELECT COUNT(*) FROM execution_buffer_rows") == 0


# --- 9. inclusive usage over random trees -------------------------------------------------------


SUBAGENT_STEPS = 20
"""A subagent's steps limit when its spec gives none (the builder's default), its subtree's
steps included."""


@dataclass(frozen=True)
class Node:
    """A node of a subagent tree: it spawns its children ``batch`` at a time, one step per
    batch, then answers. ``responses`` has the usage and cost of each spawn step's response,
    in order, and of the answer (last)."""

    children: tuple[Node, ...]
    batch: int
    responses: tuple[tuple[Usage, float | None], ...]

    @property
    def steps(self) -> int:
        return math.ceil(len(self.children) / self.batch) + 1

    def used(self) -> tuple[tuple[Usage, float | None], ...]:
        """The responses its steps get: one per spawn step, then the answer's."""
        return (*self.responses[: self.steps - 1], self.responses[-1])

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)

    def subtree_steps(self) -> int:
        return self.steps + sum(child.subtree_steps() for child in self.children)

    def within(self, limit: int) -> Node:
        """This node with its last children dropped until its subtree is checked against
        ``limit`` only at its answer (the last check before it is at ``subtree_steps - 1``)."""
        node = self
        while node.subtree_steps() > limit:
            node = Node(node.children[:-1], node.batch, node.responses)
        return node


usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 500),
    output_tokens=st.integers(0, 100),
    cache_read_tokens=st.integers(0, 50),
    cache_write_tokens=st.integers(0, 50),
    reasoning_tokens=st.integers(0, 30),
)
costs = st.none() | st.integers(0, 1024).map(lambda n: n / 1024)  # exact in binary


def trees(depth: int = 0) -> st.SearchStrategy[Node]:
    """Trees of depth at most 3 with at most 3 children a node; below the root, each subtree
    fits the default steps limit, so every run answers."""
    kids = st.just(()) if depth == 3 else st.lists(trees(depth + 1), max_size=3).map(tuple)
    responses = st.lists(st.tuples(usages, costs), min_size=4, max_size=4).map(tuple)
    nodes = st.builds(Node, kids, st.integers(1, 3), responses)
    return nodes if depth == 0 else nodes.map(lambda node: node.within(SUBAGENT_STEPS))


def spec_and_scripts(node: Node, name: str, scripts: dict[str, Script]) -> SubagentSpec:
    """The spec of ``node``, named ``name``; the scripts of its subtree go in ``scripts``."""
    names = [f"{name}_{n}" for n in range(len(node.children))]
    children = tuple(
        spec_and_scripts(child, child_name, scripts)
        for child, child_name in zip(node.children, names, strict=True)
    )
    *spawning, (last_usage, last_cost) = node.used()
    batches = [names[i : i + node.batch] for i in range(0, len(names), node.batch)]
    steps: list[InferenceResponse] = [
        spawn(*((n, f"task of {n}") for n in batch), usage=u, cost_usd=c)
        for batch, (u, c) in zip(batches, spawning, strict=True)
    ]
    steps.append(answer(f"answer of {name}", usage=last_usage, cost_usd=last_cost))
    scripts[name] = Script(steps)
    return SubagentSpec(
        name=name,
        description=f"Node {name}.",
        system_prompt=prompt(name),
        subagents=children,
    )


@pytest.fixture(
    scope="module",
    params=BACKENDS,
)
def fresh_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[], contextlib.AbstractContextManager[str]]:
    """A factory of fresh, empty databases, one per hypothesis example."""
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None

    def new() -> contextlib.AbstractContextManager[str]:
        if server is None:
            return contextlib.nullcontext(sqlite_url(tmp_path_factory.mktemp("tree")))
        return postgres_database(server)

    return new


def resummed(state: AgentState) -> Spend:
    """A run's inclusive spend summed afresh from its steps and their subagents' subtrees."""
    total = Spend()
    for execution in state.step_executions:
        step = execution.step
        priced = step.cost_usd is not None or not step.called_model
        total += Spend(usage=step.usage, cost_usd=step.cost_usd, steps=1, fully_priced=priced)
        for tool in step.tool_executions:
            total += tool.subtree or Spend()
    return total


def spend_of(node: Node) -> Spend:
    """What the scripts of ``node``'s subtree spend, computed from the tree alone."""
    own = Spend()
    for u, c in node.used():
        own = own + Spend(usage=u, cost_usd=c, steps=1, fully_priced=c is not None)
    return sum((spend_of(child) for child in node.children), own)


# Each example takes a fresh database: shrinking a failure would take minutes, so it is left out.
@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(tree=trees())
def test_inclusive_usage_is_the_sum_of_exclusive_usage_over_every_subtree(
    fresh_database: Callable[[], contextlib.AbstractContextManager[str]], tree: Node
) -> None:
    scripts: dict[str, Script] = {}
    spec = spec_and_scripts(tree, "root", scripts)
    expected: dict[str, Node] = {}

    def index(node: Node, name: str) -> None:
        expected[name] = node
        for n, child in enumerate(node.children):
            index(child, f"{name}_{n}")

    index(tree, "root")
    router = Router(dict(scripts))
    kept_and_resummed: list[tuple[Spend, Spend]] = []

    def compare_totals(state: AgentState) -> ContinuationDecision:
        """At every step of the root run: the spend kept as the steps came, and re-summed."""
        kept_and_resummed.append((state.spend(), resummed(state)))
        return ContinuationDecision.abstain()

    with fresh_database() as url, Ledger.open(url) as ledger, Database(url) as db:
        agent = (
            AgentBuilder()
            .with_llm(router)
            .with_name("root")
            .with_system_prompt(prompt("root"))
            .with_subagents(spec.subagents)
            .with_max_steps(None)
            .with_ledger(ledger)
            .with_continuation_criteria(compare_totals)
            .build()
        )
        result = agent.run("Go.")
        root = ledger.run_tree(result.run_id)
        step_sums = {
            row["run_id"]: row
            for row in db.rows(
                "SELECT run_id, "
                + ", ".join(f"SUM({c}) AS {c}" for c in TOKEN_COLUMNS)
                + ", COUNT(*) AS steps FROM step_executions GROUP BY run_id"
            )
        }
        run_rows = {row["id"]: row for row in db.runs()}

    assert result.status is AgentStatus.COMPLETED
    nodes = list(root.walk())
    assert len(nodes) == len(run_rows) == tree.size()
    for node in nodes:
        name = node.run.agent_name
        assert node.run.status == "completed", name
        assert [c.run.agent_name for c in node.children] == [
            f"{name}_{n}" for n in range(len(expected[name].children))
        ]
        assert node.inclusive == sum((n.exclusive for n in node.walk()), Spend())
        assert node.inclusive == spend_of(expected[name])
        summed = step_sums[node.run.id]
        assert node.exclusive.usage == Usage(**{c: summed[c] for c in TOKEN_COLUMNS})
        assert node.exclusive.steps == summed["steps"] == expected[name].steps
        row = run_rows[node.run.id]
        assert Usage(**{c: row[c] for c in TOKEN_COLUMNS}) == node.exclusive.usage
        assert row["step_count"] == node.exclusive.steps
        assert row["cost_usd"] == node.exclusive.cost_usd
    assert result.spend.usage == root.inclusive.usage
    assert result.spend == root.inclusive
    assert len(kept_and_resummed) == expected["root"].steps
    assert all(kept == again for kept, again in kept_and_resummed)
    assert result.usage == root.exclusive.usage


# --- 10. the command line -----------------------------------------------------------------------


def test_trace_draws_the_run_tree_with_every_agent_and_its_subtree_usage(
    db_url: str, ledger: Ledger
) -> None:
    agent = lead(
        three_level_router(),
        RESEARCHER_WITH_CHECKER,
        ledger=ledger,
        policy=SubagentPolicy(max_depth=2),
    )
    result = agent.build().run(QUESTION)
    runs = ledger.run_tree(result.run_id)

    output = CliRunner().invoke(cli, ["--db", db_url, "trace", result.run_id])

    assert output.exit_code == 0, output.output
    flat = " ".join(output.output.split())
    shown = ledger.short_ids((node.run.id for node in runs.walk()), of="run")
    for node in runs.walk():
        assert node.run.agent_name in flat
        assert f"run {shown[node.run.id]} · {node.run.agent_name}" in flat
    assert flat.count("with subagents") == 2  # lead and researcher; fact_checker has none

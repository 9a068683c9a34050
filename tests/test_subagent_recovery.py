"""Run trees are transactions too: every run of a subagent tree commits on its own, a process
SIGKILLed anywhere in the tree leaves every conversation of it clean, and recovery handles the
tree whole: abandoned, every run of it is ``interrupted``; resumed, it completes without a
second copy of any subagent.

A child process (``support.subagent_crash_child``) runs the tree and kills itself; this process
recovers through the public API (``Ledger.recover()``, ``Agent.recover``) with agents
built exactly like the child's, and checks the database with SQL. The models answer from the
request (the tool results they see), so they go on from wherever the ledger says a run got to.
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentledger import AgentStatus, Usage
from agentledger._values import Spend
from agentledger.ledger import Ledger, RunTree
from support.crash_child import (
    FULL_ANSWER,
    TOOL_STEPS,
    connect,
    ledger_violations,
    rows,
    scalar,
)
from support.subagent_crash_child import (
    BOOM_RESULT,
    CHILD_ANSWER,
    CHILD_TASK,
    CHILD_USAGE,
    GRANDCHILD_ANSWER,
    GRANDCHILD_TASK,
    GRANDCHILD_USAGE,
    QUESTION,
    ROOT_ANSWER,
    ROOT_USAGE,
    SPAWN_THEN_BOOM_ANSWER,
    WORKERS,
    fan_out_answer,
    read_lines,
    run_child,
    run_together,
    spawn_then_crash_agent,
    tree_agent,
)

# --- reading the database ------------------------------------------------------------------------


def conversation(url: str, conversation_id: str) -> list[tuple[str, str]]:
    """The conversation's ``messages`` section as (role, content), by seq."""
    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT role, content FROM conversation_messages "
            "WHERE conversation_id = :id AND section = 'messages' ORDER BY seq",
            id=conversation_id,
        )
    return [(role, content) for role, content in found]


def step_indexes(url: str, run_id: str) -> list[int]:
    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT step_index FROM step_executions WHERE run_id = :id ORDER BY step_index",
            id=run_id,
        )
    return [index for (index,) in found]


def tool_rows(url: str, run_id: str) -> list[tuple[Any, ...]]:
    """(step_index, tool_call_id, tool_name, child_run_id, result) of the run's tool rows."""
    with connect(url) as conn:
        return rows(
            conn,
            "SELECT step_index, tool_call_id, tool_name, child_run_id, result "
            "FROM tool_executions WHERE run_id = :id ORDER BY step_index, position",
            id=run_id,
        )


def spawns(url: str) -> Counter[tuple[str, str]]:
    """How many runs each spawning tool call started: ``agent_runs`` rows per (parent run,
    the ``spawned_by`` idempotency key in their metadata)."""
    with connect(url) as conn:
        key = (
            "json_extract(metadata, '$.spawned_by')"
            if conn.dialect.name == "sqlite"
            else "metadata ->> 'spawned_by'"
        )
        found = rows(
            conn,
            f"SELECT parent_run_id, {key}, COUNT(*) FROM agent_runs "
            f"WHERE parent_run_id IS NOT NULL GROUP BY parent_run_id, {key}",
        )
    return Counter({(parent, spawned_by): count for parent, spawned_by, count in found})


def buffer_rows(url: str) -> int:
    with connect(url) as conn:
        return int(scalar(conn, "SELECT COUNT(*) FROM execution_buffer_rows"))


def leases(url: str) -> list[tuple[Any, ...]]:
    """The conversations still leased: (id, lease_run_id)."""
    with connect(url) as conn:
        return rows(
            conn, "SELECT id, lease_run_id FROM conversations WHERE lease_holder IS NOT NULL"
        )


def assert_tree_spend_adds_up(tree: RunTree, acknowledged: Spend) -> None:
    """Inclusive is the sum of every exclusive spend in the tree, each exclusive spend is the
    run's own totals, and what the root's caller was told it spent is that inclusive spend."""
    nodes = list(tree.walk())
    assert tree.inclusive == sum((node.exclusive for node in nodes), Spend())
    for node in nodes:
        assert node.exclusive.usage == node.run.usage, node.run.id
        assert node.exclusive.steps == node.run.step_count, node.run.id
    assert acknowledged.usage == tree.inclusive.usage
    assert acknowledged.steps == tree.inclusive.steps


def times(usage: Usage, n: int) -> Usage:
    return sum([usage] * n, Usage())


# --- a crash in a grandchild ---------------------------------------------------------------------


@dataclass(frozen=True)
class CrashedTree:
    """Root → child → grandchild, SIGKILLed in the grandchild's step 1, as the database holds it:
    ``runs`` and ``conversations`` by level."""

    runs: dict[str, str]
    conversations: dict[str, str]
    tools_file: Path
    models_file: Path

    def lookups(self) -> list[dict[str, Any]]:
        return read_lines(self.tools_file)

    def model_calls(self) -> list[dict[str, Any]]:
        return read_lines(self.models_file)


LEVELS = ("root", "child", "grandchild")
TASKS = {"root": QUESTION, "child": CHILD_TASK, "grandchild": GRANDCHILD_TASK}
ANSWERS = {"root": ROOT_ANSWER, "child": CHILD_ANSWER, "grandchild": GRANDCHILD_ANSWER}


def crash_a_tree(url: str, workdir: Path) -> CrashedTree:
    spec = {
        "role": "tree-crash",
        "url": url,
        "tools_file": str(workdir / "tools.jsonl"),
        "models_file": str(workdir / "models.jsonl"),
    }
    child = run_child(spec, workdir, "tree-crash")
    assert child.returncode == -signal.SIGKILL, child.describe()

    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT r.depth, r.id, r.conversation_id, r.status, r.parent_run_id, r.root_run_id, "
            "c.kind, c.parent_run_id, c.lease_run_id "
            "FROM agent_runs r JOIN conversations c ON c.id = r.conversation_id ORDER BY r.depth",
        )
    assert [row[0] for row in found] == [0, 1, 2], found
    runs = {level: row[1] for level, row in zip(LEVELS, found, strict=True)}
    conversations = {level: row[2] for level, row in zip(LEVELS, found, strict=True)}
    crashed = CrashedTree(runs, conversations, Path(spec["tools_file"]), Path(spec["models_file"]))

    # What the dead process left: three running runs, each holding its conversation's lease;
    # only the grandchild's step 0 recorded; every conversation with nothing but its task.
    root, child_run, grandchild = runs["root"], runs["child"], runs["grandchild"]
    assert [row[3:] for row in found] == [
        ("running", None, root, "main", None, root),
        ("running", root, root, "subagent", root, child_run),
        ("running", child_run, root, "subagent", child_run, grandchild),
    ]
    assert [step_indexes(url, runs[level]) for level in LEVELS] == [[], [], [0]]
    for level in LEVELS:
        assert conversation(url, conversations[level]) == [("user", TASKS[level])], level
    assert [(c["run_id"], c["step_index"]) for c in crashed.lookups()] == [
        (grandchild, 0),
        (grandchild, 1),
    ]
    assert ledger_violations(url) == []
    return crashed


def test_a_tree_abandoned_after_a_crash_in_its_grandchild_is_interrupted_at_every_level_and_clean(
    db_url, tmp_path
):
    crashed = crash_a_tree(db_url, tmp_path)

    with Ledger.open(db_url) as ledger:
        abandoned = ledger.recover(stale_after=0)
        assert sorted((r.id, r.status) for r in abandoned) == sorted(
            (crashed.runs[level], "interrupted") for level in LEVELS
        )
        assert ledger.recover(stale_after=0) == []
        assert ledger.stale_runs(stale_after=0) == []

    with connect(db_url) as conn:
        statuses = dict(rows(conn, "SELECT id, status FROM agent_runs"))
    assert statuses == {crashed.runs[level]: "interrupted" for level in LEVELS}
    for level in LEVELS:
        assert conversation(db_url, crashed.conversations[level]) == [("user", TASKS[level])]
    assert [step_indexes(db_url, crashed.runs[level]) for level in LEVELS] == [[], [], [0]]
    assert buffer_rows(db_url) == 0
    assert leases(db_url) == []
    assert ledger_violations(db_url) == []  # with integrity_check and foreign_key_check on SQLite

    # Nothing is left to resume, and nothing is run again.
    with Ledger.open(db_url) as ledger:
        agent, llms = tree_agent(
            ledger, tools_file=crashed.tools_file, models_file=crashed.models_file
        )
        assert agent.recover(stale_after=0) == []
    assert all(llm.requests == [] for llm in llms.values())
    assert len(crashed.lookups()) == 2


def test_a_tree_resumed_after_a_crash_in_its_grandchild_completes_without_spawning_anything_twice(
    db_url, tmp_path
):
    crashed = crash_a_tree(db_url, tmp_path)
    runs = crashed.runs

    with Ledger.open(db_url) as ledger:
        agent, llms = tree_agent(
            ledger, tools_file=crashed.tools_file, models_file=crashed.models_file
        )
        results = agent.recover(stale_after=0)
        # Whatever runs recover chose to resume itself (the root, or the children too, in any
        # order), each one it returns completed with its own answer, and the root is among them.
        by_run = {r.run_id: r for r in results}
        assert runs["root"] in by_run, results
        answers = {runs[level]: ANSWERS[level] for level in LEVELS}
        assert {(r.run_id, r.status, r.answer) for r in results} == {
            (run_id, AgentStatus.COMPLETED, answers[run_id]) for run_id in by_run
        }
        assert agent.recover(stale_after=0) == []
        assert ledger.stale_runs(stale_after=0) == []
        tree = ledger.run_tree(runs["root"])
        made = {level: len(llm.requests) for level, llm in llms.items()}

    with connect(db_url) as conn:
        statuses = dict(rows(conn, "SELECT id, status FROM agent_runs"))
    assert statuses == {runs[level]: "completed" for level in LEVELS}
    for level in LEVELS:
        assert conversation(db_url, crashed.conversations[level]) == [
            ("user", TASKS[level]),
            ("assistant", ANSWERS[level]),
        ], level

    # No child or grandchild spawned twice: one run per spawning tool call.
    assert spawns(db_url) == Counter(
        {
            (runs["root"], f"{runs['root']}:0:spawn-child"): 1,
            (runs["child"], f"{runs['child']}:0:spawn-grandchild"): 1,
        }
    )

    # The grandchild's interrupted step 1 was redone (same call, same key, another process);
    # its step 0 was not.
    lookups = crashed.lookups()
    assert {c["run_id"] for c in lookups} == {runs["grandchild"]}
    assert [c["step_index"] for c in lookups] == [0, 1, 1, 2]
    assert lookups[1]["idempotency_key"] == lookups[2]["idempotency_key"]
    assert lookups[1]["pid"] != lookups[2]["pid"]
    assert [step_indexes(db_url, runs[level]) for level in LEVELS] == [[0, 1], [0, 1], [0, 1, 2, 3]]
    assert [row[:3] for row in tool_rows(db_url, runs["grandchild"])] == [
        (n, f"call-{n}", "lookup") for n in range(TOOL_STEPS)
    ]
    assert tool_rows(db_url, runs["child"]) == [
        (0, "spawn-grandchild", "spawn_subagent", runs["grandchild"], GRANDCHILD_ANSWER)
    ]
    assert tool_rows(db_url, runs["root"]) == [
        (0, "spawn-child", "spawn_subagent", runs["child"], CHILD_ANSWER)
    ]
    # Each level's model was asked again only for the step in flight and what came after it.
    assert made == {"root": 2, "child": 2, "grandchild": 3}
    assert Counter(c["agent"] for c in crashed.model_calls()) == {
        "root": 3,
        "child": 3,
        "grandchild": 5,
    }

    # The run tree: one path, its usage from the recorded steps only, adding up.
    assert [(node.run.id, len(node.children)) for node in tree.walk()] == [
        (runs["root"], 1),
        (runs["child"], 1),
        (runs["grandchild"], 0),
    ]
    assert [node.exclusive.usage for node in tree.walk()] == [
        times(ROOT_USAGE, 2),
        times(CHILD_USAGE, 2),
        times(GRANDCHILD_USAGE, 4),
    ]
    assert_tree_spend_adds_up(tree, by_run[runs["root"]].spend)
    assert buffer_rows(db_url) == 0
    assert leases(db_url) == []
    assert ledger_violations(db_url) == []


# --- a crash after a child committed, before its parent's step was recorded ------------------


def test_a_parent_resumed_after_its_child_committed_reports_that_child_instead_of_spawning_again(
    db_url, tmp_path
):
    tools_file, models_file = tmp_path / "tools.jsonl", tmp_path / "models.jsonl"
    spec = {
        "role": "spawn-then-crash",
        "url": db_url,
        "tools_file": str(tools_file),
        "models_file": str(models_file),
    }
    crashed = run_child(spec, tmp_path, "spawn-then-crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.describe()

    with connect(db_url) as conn:
        ((root, root_conversation),) = rows(
            conn, "SELECT id, conversation_id FROM agent_runs WHERE parent_run_id IS NULL"
        )
        child_rows = rows(
            conn,
            "SELECT id, conversation_id, status, step_count, finished_at FROM agent_runs "
            "WHERE parent_run_id = :id",
            id=root,
        )
    ((child, child_conversation, child_status, child_steps, _),) = child_rows
    # The child committed its answer; the root's step 0 (spawn, then boom) never was.
    assert (child_status, child_steps) == ("completed", TOOL_STEPS + 1)
    assert conversation(db_url, child_conversation) == [
        ("user", GRANDCHILD_TASK),
        ("assistant", FULL_ANSWER),
    ]
    assert step_indexes(db_url, root) == []
    assert conversation(db_url, root_conversation) == [("user", QUESTION)]
    assert [c.get("tool", "lookup") for c in read_lines(tools_file)] == ["lookup"] * 3 + ["boom"]
    assert ledger_violations(db_url) == []

    with Ledger.open(db_url) as ledger:
        agent, llms = spawn_then_crash_agent(ledger, tools_file=tools_file, models_file=models_file)
        results = agent.recover(stale_after=0)
        assert [(r.run_id, r.status, r.answer) for r in results] == [
            (root, AgentStatus.COMPLETED, SPAWN_THEN_BOOM_ANSWER)
        ]
        assert results[0].child_run_ids == (child,)
        assert agent.recover(stale_after=0) == []
        tree = ledger.run_tree(root)

    # One child run, left as it was: its model asked only what its script needed (three
    # lookups and the answer, all in the crashed process), its tool not run again.
    with connect(db_url) as conn:
        assert (
            rows(
                conn,
                "SELECT id, conversation_id, status, step_count, finished_at FROM agent_runs "
                "WHERE parent_run_id = :id",
                id=root,
            )
            == child_rows
        )
        assert scalar(conn, "SELECT COUNT(*) FROM agent_runs") == 2
    assert llms["child"].requests == []
    child_calls = [c for c in read_lines(models_file) if c["agent"] == "child"]
    assert [c["seen"] for c in child_calls] == list(range(TOOL_STEPS + 1))
    assert {c["pid"] for c in child_calls} == {read_lines(tools_file)[0]["pid"]}
    assert spawns(db_url) == Counter({(root, f"{root}:0:spawn-child"): 1})

    # The redone step 0 reported the existing child's answer and ran boom again, same key.
    assert tool_rows(db_url, root) == [
        (0, "spawn-child", "spawn_subagent", child, FULL_ANSWER),
        (0, "boom", "boom", None, BOOM_RESULT),
    ]
    booms = [c for c in read_lines(tools_file) if c.get("tool") == "boom"]
    assert [c["idempotency_key"] for c in booms] == [f"{root}:0:boom"] * 2
    assert len({c["pid"] for c in booms}) == 2
    assert len(llms["root"].requests) == 2  # the redone step 0 and the answer
    assert step_indexes(db_url, root) == [0, 1]
    assert conversation(db_url, root_conversation) == [
        ("user", QUESTION),
        ("assistant", SPAWN_THEN_BOOM_ANSWER),
    ]
    assert conversation(db_url, child_conversation) == [
        ("user", GRANDCHILD_TASK),
        ("assistant", FULL_ANSWER),
    ]
    assert [node.run.id for node in tree.walk()] == [root, child]
    assert_tree_spend_adds_up(tree, results[0].spend)
    assert buffer_rows(db_url) == 0
    assert leases(db_url) == []
    assert ledger_violations(db_url) == []


# --- parallel subagents in several processes at once ---------------------------------------------

PROCESSES = 3
TURNS = 2


def test_three_processes_running_parallel_subagents_on_one_ledger_commit_every_acknowledged_run(
    db_url, tmp_path
):
    worker = {
        "role": "fan-out",
        "url": db_url,
        "turns": TURNS,
        "peers": PROCESSES,
        "delay": 0.01,  # each worker model call: the four workers of a step overlap
        "lease_seconds": 1.5,  # a heartbeat every half second: more writers in the fray
    }
    finished = run_together({f"process-{n}": worker for n in range(PROCESSES)}, tmp_path)

    failures = {
        name: child.result["error"]["traceback"]
        if child.result and "error" in child.result
        else child.describe()
        for name, child in finished.items()
        if child.returncode != 0 or not child.result or "ok" not in child.result
    }
    assert failures == {}, "\n".join(f"--- {n} ---\n{text}" for n, text in failures.items())
    for child in finished.values():
        assert "locked" not in child.stderr, child.stderr
    acknowledged = {name: child.result["ok"] for name, child in finished.items()}
    roots = [run for runs in acknowledged.values() for run in runs]
    assert len(roots) == PROCESSES * TURNS
    assert [(r["status"], r["answer"]) for r in roots] == [
        ("completed", fan_out_answer(r["text"])) for r in roots
    ]
    assert all(len(r["child_run_ids"]) == WORKERS for r in roots)
    children = {c: r["run_id"] for r in roots for c in r["child_run_ids"]}
    assert len(children) == PROCESSES * TURNS * WORKERS
    root_conversations = {r["conversation_id"] for r in roots}
    assert len(root_conversations) == PROCESSES

    with connect(db_url) as conn:
        stored = {
            run_id: (status, parent, depth)
            for run_id, status, parent, depth in rows(
                conn, "SELECT id, status, parent_run_id, depth FROM agent_runs"
            )
        }
        assert stored == {
            **{r["run_id"]: ("completed", None, 0) for r in roots},
            **{c: ("completed", parent, 1) for c, parent in children.items()},
        }
        versions = dict(rows(conn, "SELECT id, version FROM conversations WHERE kind = 'main'"))
        assert versions == dict.fromkeys(root_conversations, TURNS)
        sequences = {
            conversation_id: tuple(counts)
            for conversation_id, *counts in rows(
                conn,
                "SELECT conversation_id, COUNT(*), COUNT(DISTINCT seq), MIN(seq), MAX(seq) "
                "FROM conversation_messages GROUP BY conversation_id",
            )
        }
        subagent_conversations = rows(
            conn,
            "SELECT c.id, c.parent_run_id, r.parent_run_id, c.version FROM conversations c "
            "JOIN agent_runs r ON r.conversation_id = c.id WHERE c.kind = 'subagent'",
        )
        steps = dict(rows(conn, "SELECT run_id, COUNT(*) FROM step_executions GROUP BY run_id"))
        tools = dict(rows(conn, "SELECT run_id, COUNT(*) FROM tool_executions GROUP BY run_id"))
        spans = {
            run_id: (start, end)
            for run_id, start, end in rows(
                conn, "SELECT id, started_at, finished_at FROM agent_runs"
            )
        }
    assert sequences == {
        **dict.fromkeys(root_conversations, (2 * TURNS, 2 * TURNS, 0, 2 * TURNS - 1)),
        **{c: (2, 2, 0, 1) for c, *_ in subagent_conversations},
    }
    assert len(subagent_conversations) == len(children)
    assert all(
        conversation_parent == run_parent and version == 1
        for _, conversation_parent, run_parent, version in subagent_conversations
    )
    assert steps == {
        **{r["run_id"]: r["steps"] for r in roots},
        **dict.fromkeys(children, TOOL_STEPS + 1),
    }
    assert all(r["steps"] == 2 for r in roots)
    assert tools == {
        **{r["run_id"]: r["tool_executions"] for r in roots},
        **dict.fromkeys(children, TOOL_STEPS),
    }
    assert all(r["tool_executions"] == WORKERS for r in roots)
    assert buffer_rows(db_url) == 0
    assert leases(db_url) == []
    assert ledger_violations(db_url) == []

    with Ledger.open(db_url) as ledger:
        for r in roots:
            tree = ledger.run_tree(r["run_id"])
            assert sorted(child.run.id for child in tree.children) == sorted(r["child_run_ids"])
            assert_tree_spend_adds_up(tree, Spend.model_validate(r["spend"]))

    # Worth something only if the writers really overlapped: the workers of a step with each
    # other, and the processes with each other.
    for r in roots:
        windows = [spans[c] for c in r["child_run_ids"]]
        assert max(start for start, _ in windows) < min(end for _, end in windows), windows
    process_windows = [
        (min(spans[r["run_id"]][0] for r in runs), max(spans[r["run_id"]][1] for r in runs))
        for runs in acknowledged.values()
    ]
    assert max(s for s, _ in process_windows) < min(e for _, e in process_windows), process_windows

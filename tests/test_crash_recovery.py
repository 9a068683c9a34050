"""Runs are transactions: a process SIGKILLed at any point of a run leaves a ledger that keeps
every rule, and the run can be abandoned or resumed from another process.

A child process (``support.crash_child``) runs a scripted agent (three tool-calling steps, then
an answer) and kills itself with SIGKILL at one of four points:

a. inside the tool of step 1, before that step is recorded;
b. at the start of the model call of step 2, after step 1 was recorded;
c. in the middle of the run's commit transaction (on ``DELETE FROM execution_buffer_rows``);
d. after ``run`` returned, the run committed.

This process then recovers the run through the public API (``Ledger.recover()``,
``Agent.recover`` / ``Agent.resume``) and checks the database with SQL.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentledger import AgentStatus, ConversationBusyError, UsageError
from agentledger.ledger import Ledger
from support.crash_child import (
    FULL_ANSWER,
    QUESTION,
    build_agent,
    connect,
    ledger_violations,
    read_side_file,
    rows,
    run_child,
    run_together,
    scalar,
)

FOLLOW_UP = "And one more, please."


@dataclass(frozen=True)
class Crashed:
    """A run whose process was SIGKILLed, as the database holds it."""

    run_id: str
    conversation_id: str
    side_file: Path

    def tool_calls(self) -> list[dict[str, Any]]:
        return read_side_file(self.side_file)

    def tool_steps(self) -> list[int]:
        return [entry["step_index"] for entry in self.tool_calls()]


def crash_a_run(
    url: str, point: str, workdir: Path, *, separated: bool = True, lease_seconds: float = 60.0
) -> Crashed:
    side_file = workdir / f"tools-{point}.jsonl"
    spec = {
        "role": "crash",
        "url": url,
        "point": point,
        "side_file": str(side_file),
        "separated": separated,
        "lease_seconds": lease_seconds,
    }
    child = run_child(spec, workdir, f"crash-{point}")
    assert child.returncode == -signal.SIGKILL, child.describe()
    with connect(url) as conn:
        ((run_id, conversation_id),) = rows(conn, "SELECT id, conversation_id FROM agent_runs")
    crashed = Crashed(run_id, conversation_id, side_file)
    if point in LEFT_BEHIND:
        assert_left_running(url, crashed, *LEFT_BEHIND[point], separated=separated)
    return crashed


LEFT_BEHIND = {
    # point: (recorded steps, buffer rows, steps whose tool ran)
    "a": ([0], 2, [0, 1]),  # step 1's tool ran, its step was never recorded
    "b": ([0, 1], 4, [0, 1]),
    "c": ([0, 1, 2, 3], 7, [0, 1, 2]),  # three calls, three results, the answer: all buffered
}


def assert_left_running(
    url: str,
    crashed: Crashed,
    steps: list[int],
    buffered: int,
    tools_ran: list[int],
    *,
    separated: bool,
) -> None:
    """What a process killed before its commit leaves: a running run holding the lease, its
    recorded steps and their buffer, and a conversation with the user message and nothing of
    the run (so a commit cut short left no part of itself either)."""
    assert run_status(url, crashed.run_id) == "running"
    assert step_indexes(url, crashed.run_id) == steps
    assert buffer_size(url, crashed.run_id) == buffered
    assert crashed.tool_steps() == tools_ran
    assert conversation(url, crashed.conversation_id) == [("user", QUESTION)]
    with connect(url) as conn:
        lease = rows(
            conn,
            "SELECT lease_run_id, version FROM conversations WHERE id = :id",
            id=crashed.conversation_id,
        )
    assert lease == [(crashed.run_id, 0)]
    assert ledger_violations(url, separated=separated) == []


def run_status(url: str, run_id: str) -> str:
    with connect(url) as conn:
        return str(scalar(conn, "SELECT status FROM agent_runs WHERE id = :id", id=run_id))


def step_indexes(url: str, run_id: str) -> list[int]:
    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT step_index FROM step_executions WHERE run_id = :id ORDER BY step_index",
            id=run_id,
        )
    return [index for (index,) in found]


def buffer_size(url: str, run_id: str) -> int:
    with connect(url) as conn:
        return int(
            scalar(conn, "SELECT COUNT(*) FROM execution_buffer_rows WHERE run_id = :id", id=run_id)
        )


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


def lease_holder(url: str, conversation_id: str) -> str | None:
    with connect(url) as conn:
        return scalar(
            conn, "SELECT lease_holder FROM conversations WHERE id = :id", id=conversation_id
        )


def abandon(url: str, crashed: Crashed) -> None:
    """Abandon the crashed run, check what that leaves, and that the conversation goes on."""
    with Ledger.open(url) as ledger:
        abandoned = ledger.recover(stale_after=0)
        assert [(r.id, r.status) for r in abandoned] == [(crashed.run_id, "interrupted")]
        assert ledger.recover(stale_after=0) == []
        assert lease_holder(url, crashed.conversation_id) is None
        assert buffer_size(url, crashed.run_id) == 0
        assert conversation(url, crashed.conversation_id) == [("user", QUESTION)]
        assert ledger_violations(url) == []

        agent, _ = build_agent(ledger, side_file=crashed.side_file)
        with pytest.raises(UsageError, match="interrupted"):
            agent.resume(crashed.run_id, stale_after=0)
        follow_up = agent.run(FOLLOW_UP, crashed.conversation_id)
    assert follow_up.status is AgentStatus.COMPLETED
    assert conversation(url, crashed.conversation_id) == [
        ("user", QUESTION),
        ("user", FOLLOW_UP),
        ("assistant", FULL_ANSWER),
    ]
    assert ledger_violations(url) == []


def resume(url: str, crashed: Crashed, *, separated: bool = True) -> int:
    """Resume the crashed run with ``Agent.recover``; check it completed; the model calls the
    resumed run made."""
    with Ledger.open(url) as ledger:
        agent, llm = build_agent(ledger, side_file=crashed.side_file, separated=separated)
        results = agent.recover(stale_after=0)
        model_calls = len(llm.requests)
        assert [(r.run_id, r.status, r.answer) for r in results] == [
            (crashed.run_id, AgentStatus.COMPLETED, FULL_ANSWER)
        ]
        assert agent.recover(stale_after=0) == []
        assert run_status(url, crashed.run_id) == "completed"
        assert buffer_size(url, crashed.run_id) == 0
        assert lease_holder(url, crashed.conversation_id) is None
        assert ledger_violations(url, separated=separated) == []

        follow_up = agent.run(FOLLOW_UP, crashed.conversation_id)
    assert follow_up.status is AgentStatus.COMPLETED
    answers = [c for role, c in conversation(url, crashed.conversation_id) if role == "assistant"]
    if separated:
        assert answers == [FULL_ANSWER, FULL_ANSWER]
    else:
        assert answers.count(FULL_ANSWER) == 2
    assert ledger_violations(url, separated=separated) == []
    return model_calls


# --- a: killed inside a tool, before the step is recorded ----------------------------------------


@pytest.mark.parametrize("separated", [True, False], ids=["separated", "inline"])
def test_a_run_resumed_after_a_crash_inside_a_tool_redoes_that_step_with_the_same_key(
    db_url, tmp_path, separated
):
    crashed = crash_a_run(db_url, "a", tmp_path, separated=separated)

    model_calls = resume(db_url, crashed, separated=separated)

    assert model_calls == 3  # steps 1 and 2, then the answer
    assert step_indexes(db_url, crashed.run_id) == [0, 1, 2, 3]
    calls = [c for c in crashed.tool_calls() if c["run_id"] == crashed.run_id]
    assert [c["step_index"] for c in calls] == [0, 1, 1, 2]
    first, again = calls[1], calls[2]
    assert first["pid"] != again["pid"]  # the dead child, then this process
    assert first["idempotency_key"] == again["idempotency_key"] == f"{crashed.run_id}:1:call-1"
    with connect(db_url) as conn:
        recorded = rows(
            conn,
            "SELECT step_index, tool_call_id FROM tool_executions WHERE run_id = :id "
            "ORDER BY step_index",
            id=crashed.run_id,
        )
    assert recorded == [(0, "call-0"), (1, "call-1"), (2, "call-2")]


def test_a_run_abandoned_after_a_crash_inside_a_tool_keeps_its_steps_and_frees_the_conversation(
    db_url, tmp_path
):
    crashed = crash_a_run(db_url, "a", tmp_path)

    abandon(db_url, crashed)

    assert run_status(db_url, crashed.run_id) == "interrupted"
    assert step_indexes(db_url, crashed.run_id) == [0]


# --- b: killed after a step was recorded ---------------------------------------------------------


def test_a_run_resumed_after_a_crash_between_steps_goes_on_without_repeating_a_tool(
    db_url, tmp_path
):
    crashed = crash_a_run(db_url, "b", tmp_path)

    model_calls = resume(db_url, crashed)

    assert model_calls == 2  # step 2, then the answer
    assert step_indexes(db_url, crashed.run_id) == [0, 1, 2, 3]
    calls = [c for c in crashed.tool_calls() if c["run_id"] == crashed.run_id]
    assert [c["step_index"] for c in calls] == [0, 1, 2]


def test_a_run_abandoned_after_a_crash_between_steps_keeps_both_recorded_steps(db_url, tmp_path):
    crashed = crash_a_run(db_url, "b", tmp_path)

    abandon(db_url, crashed)

    assert run_status(db_url, crashed.run_id) == "interrupted"
    assert step_indexes(db_url, crashed.run_id) == [0, 1]


@pytest.mark.serial  # the checks must all run within the 3 s lease
def test_a_killed_run_keeps_its_lease_until_it_expires_and_is_abandoned_after(db_url, tmp_path):
    lease = 3.0
    crashed = crash_a_run(db_url, "b", tmp_path, lease_seconds=lease)

    with Ledger.open(db_url) as ledger:
        expires = ledger.conversation(crashed.conversation_id).lease_expires_at
        assert expires is not None
        agent, _ = build_agent(ledger)
        assert ledger.stale_runs() == []
        assert ledger.recover() == []
        with pytest.raises(ConversationBusyError):
            agent.resume(crashed.run_id)
        with pytest.raises(ConversationBusyError):
            agent.run(FOLLOW_UP, crashed.conversation_id)
        assert datetime.now(UTC) < expires, "the checks above ran after the lease had expired"
        assert run_status(db_url, crashed.run_id) == "running"

        deadline = time.monotonic() + lease + 10
        while not ledger.stale_runs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert datetime.now(UTC) >= expires
        abandoned = ledger.recover()
    assert [r.id for r in abandoned] == [crashed.run_id]
    assert run_status(db_url, crashed.run_id) == "interrupted"
    assert conversation(db_url, crashed.conversation_id) == [("user", QUESTION)]  # no follow-up
    assert ledger_violations(db_url) == []


# --- c: killed in the middle of the commit transaction -------------------------------------------


@pytest.mark.parametrize("separated", [True, False], ids=["separated", "inline"])
def test_a_run_resumed_after_a_crash_inside_its_commit_commits_without_asking_the_model_again(
    db_url, tmp_path, separated
):
    crashed = crash_a_run(db_url, "c", tmp_path, separated=separated)

    model_calls = resume(db_url, crashed, separated=separated)

    assert model_calls == 0
    assert crashed.tool_steps()[:3] == [0, 1, 2]  # the follow-up run adds its own three
    assert step_indexes(db_url, crashed.run_id) == [0, 1, 2, 3]
    roles = [role for role, _ in conversation(db_url, crashed.conversation_id)]
    if separated:
        assert roles == ["user", "assistant", "user", "assistant"]
    else:
        run = ["assistant", "tool"] * 3 + ["assistant"]
        assert roles == ["user", *run, "user", *run]


def test_a_run_abandoned_after_a_crash_inside_its_commit_leaves_only_the_user_message(
    db_url, tmp_path
):
    crashed = crash_a_run(db_url, "c", tmp_path)

    abandon(db_url, crashed)

    assert run_status(db_url, crashed.run_id) == "interrupted"
    assert step_indexes(db_url, crashed.run_id) == [0, 1, 2, 3]


# --- d: killed after the commit ------------------------------------------------------------------


def test_a_crash_after_the_commit_leaves_nothing_to_recover_either_way(db_url, tmp_path):
    crashed = crash_a_run(db_url, "d", tmp_path)
    acknowledged = json.loads((tmp_path / "crash-d.result.json").read_text())["ok"]
    assert (acknowledged["run_id"], acknowledged["status"], acknowledged["answer"]) == (
        crashed.run_id,
        "completed",
        FULL_ANSWER,
    )

    with Ledger.open(db_url) as ledger:
        agent, llm = build_agent(ledger, side_file=crashed.side_file)
        assert ledger.stale_runs(stale_after=0) == []
        assert ledger.recover(stale_after=0) == []
        assert agent.recover(stale_after=0) == []
        assert llm.requests == []
    assert run_status(db_url, crashed.run_id) == "completed"
    assert conversation(db_url, crashed.conversation_id) == [
        ("user", QUESTION),
        ("assistant", FULL_ANSWER),
    ]
    assert buffer_size(db_url, crashed.run_id) == 0
    assert lease_holder(db_url, crashed.conversation_id) is None
    assert crashed.tool_steps() == [0, 1, 2]
    assert ledger_violations(db_url) == []


# --- two recoverers at once ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "stale_after", [None, 0], ids=["after-the-lease-expired", "with-stale-after-0"]
)
def test_two_processes_resuming_the_same_stale_run_at_once_let_exactly_one_finish_it(
    db_url, tmp_path, stale_after
):
    if stale_after is None:  # wait for the dead process's lease to run out
        crashed = crash_a_run(db_url, "b", tmp_path, lease_seconds=1.0)
        with Ledger.open(db_url) as ledger:
            deadline = time.monotonic() + 15
            while not ledger.stale_runs() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [r.id for r in ledger.stale_runs()] == [crashed.run_id]
    else:  # the operator knows the process is dead: no waiting
        crashed = crash_a_run(db_url, "b", tmp_path)

    resumer = {
        "role": "resume",
        "url": db_url,
        "run_id": crashed.run_id,
        "stale_after": stale_after,
        "side_file": str(crashed.side_file),
        "delay": 0.3,  # each model call: the winner still holds the run when the loser claims
    }
    finished = run_together({"first": resumer, "second": resumer}, tmp_path)

    results = {name: child.result for name, child in finished.items()}
    assert all(child.returncode == 0 for child in finished.values()), results
    winners = [r["ok"] for r in results.values() if r is not None and "ok" in r]
    losers = [r["error"] for r in results.values() if r is not None and "error" in r]
    assert [(w["run_id"], w["status"], w["answer"]) for w in winners] == [
        (crashed.run_id, "completed", FULL_ANSWER)
    ], results
    assert [loser["type"] for loser in losers] == ["ConversationBusyError"], results
    assert run_status(db_url, crashed.run_id) == "completed"
    assert conversation(db_url, crashed.conversation_id) == [
        ("user", QUESTION),
        ("assistant", FULL_ANSWER),
    ]
    assert crashed.tool_steps() == [0, 1, 2]  # the loser ran no tool
    assert ledger_violations(db_url) == []

"""Random kills: a mixed workload (several conversations; runs with no tool, with tools one step
after another, with parallel tool calls, with subagents) SIGKILLed at random moments, then
recovered, over and over on one database.

Each round forks a fresh workload child (``support.workload``), lets it run for a random time
(seeded: the seed is in the report line and in every failure; set ``AGENTLEDGER_KILL_SEED`` to
replay it), SIGKILLs it, and recovers what it left in flight, abandoning it
(``Ledger.recover()``) and resuming it (``Agent.recover``, with the child's very agent)
in turn. After every round, on the cumulative database: every invariant holds
(:func:`support.invariants.violations`), no run is left in flight, every run the children
acknowledged is completed with exactly the answer they were given, and every completed run
(resumed ones too) has the answer its text calls for.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Any

import pytest

from agentledger import AgentStatus
from agentledger.ledger import Ledger
from support.crash_child import connect, rows
from support.invariants import violations
from support.sizes import size
from support.workload import ForkServer, answer_problems, build_agent, expected_answer, read_journal

# Where a kill lands depends on how fast a child runs: nothing else beside it.
pytestmark = pytest.mark.serial

KILLS = size(20, 1000)
MAX_DELAY = 0.3
"""Seconds a child may run before its kill: it opens the ledger in ~0.05 s, a run takes
~0.02 s, so a kill lands anywhere from the open to the tenth run or so."""


def seed() -> int:
    chosen = os.environ.get("AGENTLEDGER_KILL_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(2**32)


def in_flight(url: str) -> Counter[str]:
    """Runs still running (or failed), top-level and subagent, by status."""
    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT status, parent_run_id IS NULL FROM agent_runs "
            "WHERE status IN ('running', 'failed')",
        )
    return Counter(f"{status} {'root' if top else 'subagent'}" for status, top in found)


def user_text(url: str, run_id: str) -> str:
    with connect(url) as conn:
        ((content,),) = rows(
            conn,
            "SELECT content FROM conversation_messages WHERE run_id = :id AND role = 'user'",
            id=run_id,
        )
    return str(content)


def test_a_mixed_workload_killed_at_random_moments_keeps_every_invariant_after_each_recovery(
    db_url, tmp_path, reliability_report
):
    chosen = seed()
    rng = random.Random(chosen)
    replay = f"seed {chosen} (AGENTLEDGER_KILL_SEED={chosen} replays it)"
    acknowledged: list[dict[str, Any]] = []
    tally: Counter[str] = Counter()
    began = time.monotonic()
    with Ledger.open(db_url) as ledger, ForkServer(tmp_path) as fork_server:
        agent = build_agent(ledger)
        for kill in range(KILLS):
            journal = tmp_path / f"journal-{kill}.jsonl"
            pid = fork_server.spawn(
                {
                    "role": "mixed",
                    "name": f"k{kill}",
                    "seed": rng.randrange(2**32),
                    "url": db_url,
                    "journal": str(journal),
                }
            )
            time.sleep(rng.uniform(0, MAX_DELAY))
            ended = fork_server.kill(pid)
            where = f"kill {kill}, {replay}"
            assert ended.killed, f"{where}: the child ended before its kill\n{ended.describe()}"

            left = in_flight(db_url)
            tally.update(left)
            tally["kills mid-run"] += bool(left)
            if kill % 2 == 0:
                abandoned = ledger.recover(stale_after=0)
                assert len(abandoned) == left.total(), (where, left, abandoned)
                assert {r.status for r in abandoned} <= {"interrupted"}, where
                tally["abandoned"] += len(abandoned)
            else:
                resumed = agent.recover(stale_after=0)
                assert len(resumed) == left["running root"], (where, left, resumed)
                for result in resumed:
                    assert result.status is AgentStatus.COMPLETED, (where, result.error)
                    assert result.answer == expected_answer(user_text(db_url, result.run_id))
                tally["resumed"] += len(resumed)
            assert ledger.recover(stale_after=0) == [], where
            assert in_flight(db_url) == Counter(), where

            acknowledged += read_journal(journal)
            assert violations(db_url) == [], where
            assert answer_problems(db_url, acknowledged) == [], where
        elapsed = time.monotonic() - began

    assert tally["kills mid-run"] >= KILLS // 5, f"too few kills landed in a run: {tally}"
    with connect(db_url) as conn:
        statuses = dict(rows(conn, "SELECT status, COUNT(*) FROM agent_runs GROUP BY status"))
        conversations = dict(rows(conn, "SELECT kind, COUNT(*) FROM conversations GROUP BY kind"))
    reliability_report(
        f"{KILLS} SIGKILLs at random moments ({replay}) in {elapsed:.1f}s, "
        f"{tally['kills mid-run']} mid-run; {tally['abandoned']} runs abandoned, "
        f"{tally['resumed']} root runs resumed (with their subagents); "
        f"{len(acknowledged)} acknowledged runs all completed with their answers; "
        f"runs by status {statuses}, conversations {conversations}; "
        "invariants and answers checked after every recovery"
    )

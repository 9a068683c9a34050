"""Several processes writing one ledger at once: SQLite's single writer (WAL, ``BEGIN
IMMEDIATE``, busy timeout, bounded retries) and PostgreSQL's row locks must both serialize
them without an error and without losing or tearing a run.

Each child (``support.crash_child``) is released at the same instant as its siblings (a barrier
file), then reports what it acknowledged (the ``RunResult`` of every run it finished) or the
exception it met; the database is then checked with SQL.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agentledger.ledger import Ledger
from support.crash_child import (
    FULL_ANSWER,
    QUESTION,
    connect,
    ledger_violations,
    rows,
    run_together,
    scalar,
)

PROCESSES = 4
CONVERSATIONS = 4
RUNS = 4


def acknowledged_by(finished: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each child's acknowledged runs; fails on any child that did not end cleanly."""
    failures = {
        name: child.result["error"]["traceback"]
        if child.result and "error" in child.result
        else child.describe()
        for name, child in finished.items()
        if child.returncode != 0 or not child.result or "ok" not in child.result
    }
    assert failures == {}, "\n".join(f"--- {n} ---\n{text}" for n, text in failures.items())
    return {name: child.result["ok"] for name, child in finished.items()}


def test_four_processes_creating_and_writing_one_ledger_at_once_commit_every_acknowledged_run(
    db_url, tmp_path
):
    worker = {
        "role": "workload",
        "url": db_url,
        "conversations": CONVERSATIONS,
        "runs": RUNS,
        "peers": PROCESSES,
        "lease_seconds": 1.5,  # a heartbeat every half second: more writers in the fray
    }
    finished = run_together({f"worker-{n}": worker for n in range(PROCESSES)}, tmp_path)

    acknowledged = acknowledged_by(finished)
    for child in finished.values():
        assert "locked" not in child.stderr, child.stderr
    runs = [run for worker_runs in acknowledged.values() for run in worker_runs]
    assert len(runs) == PROCESSES * CONVERSATIONS * RUNS
    assert {(r["status"], r["answer"]) for r in runs} == {("completed", FULL_ANSWER)}
    run_ids = {r["run_id"] for r in runs}
    conversation_ids = {r["conversation_id"] for r in runs}
    assert len(run_ids) == len(runs)
    assert len(conversation_ids) == PROCESSES * CONVERSATIONS

    with connect(db_url) as conn:
        stored = dict(rows(conn, "SELECT id, status FROM agent_runs"))
        assert stored == dict.fromkeys(run_ids, "completed")
        assert dict(rows(conn, "SELECT id, version FROM conversations")) == dict.fromkeys(
            conversation_ids, RUNS
        )
        sequences = rows(
            conn,
            "SELECT conversation_id, COUNT(*), COUNT(DISTINCT seq), MIN(seq), MAX(seq) "
            "FROM conversation_messages GROUP BY conversation_id",
        )
        assert {c: tuple(counts) for c, *counts in sequences} == dict.fromkeys(
            conversation_ids, (2 * RUNS, 2 * RUNS, 0, 2 * RUNS - 1)
        )
        assert scalar(conn, "SELECT COUNT(*) FROM step_executions") == sum(r["steps"] for r in runs)
        assert scalar(conn, "SELECT COUNT(*) FROM tool_executions") == sum(
            r["tool_executions"] for r in runs
        )
        assert scalar(conn, "SELECT COUNT(*) FROM execution_buffer_rows") == 0
        assert scalar(conn, "SELECT COUNT(*) FROM agentledger_version") == 1  # migrated once
        spans = rows(conn, "SELECT id, started_at, finished_at FROM agent_runs")
    assert ledger_violations(db_url) == []

    # The test is only worth something if the processes really wrote at the same time.
    by_run = {run_id: (start, end) for run_id, start, end in spans}
    windows = [
        (
            min(by_run[r["run_id"]][0] for r in worker_runs),
            max(by_run[r["run_id"]][1] for r in worker_runs),
        )
        for worker_runs in acknowledged.values()
    ]
    assert max(start for start, _ in windows) < min(end for _, end in windows), windows


def test_two_processes_racing_to_run_on_one_conversation_leave_one_whole_run_and_a_busy_error(
    db_url, tmp_path
):
    with Ledger.open(db_url) as ledger:
        conversation_id = ledger.create_conversation(title="contested").id
    racer = {
        "role": "race",
        "url": db_url,
        "conversation_id": conversation_id,
        "text": QUESTION,
        "delay": 0.5,  # each model call: the winner still holds the conversation
    }
    finished = run_together({"left": racer, "right": racer}, tmp_path)

    results = {name: child.result for name, child in finished.items()}
    assert all(child.returncode == 0 for child in finished.values()), results
    won = [r["ok"] for r in results.values() if r and "ok" in r]
    lost = [r["error"] for r in results.values() if r and "error" in r]
    assert [(r["status"], r["answer"]) for r in won] == [("completed", FULL_ANSWER)], results
    assert [e["type"] for e in lost] == ["ConversationBusyError"], results
    assert "busy" in lost[0]["message"]

    with connect(db_url) as conn:
        runs = rows(
            conn,
            "SELECT id, status FROM agent_runs WHERE conversation_id = :id",
            id=conversation_id,
        )
        messages = rows(
            conn,
            "SELECT seq, role, content, run_id FROM conversation_messages "
            "WHERE conversation_id = :id ORDER BY seq",
            id=conversation_id,
        )
        steps = defaultdict(int)
        for (run_id,) in rows(conn, "SELECT run_id FROM step_executions"):
            steps[run_id] += 1
    winner = won[0]["run_id"]
    assert runs == [(winner, "completed")]
    assert messages == [
        (0, "user", QUESTION, winner),
        (1, "assistant", FULL_ANSWER, winner),
    ]
    assert dict(steps) == {winner: 4}
    assert ledger_violations(db_url) == []


def test_a_write_kept_waiting_by_another_writer_is_tried_again_counted_and_never_fails(tmp_path):
    """A writer that holds SQLite's write lock past the busy timeout makes the ledger try its
    transaction again (not fail it): the retry is counted in ``lock_retries``, every attempt in
    ``transactions``, and the write commits once the lock is free."""
    import sqlite3
    import threading

    path = tmp_path / "ledger.db"
    with Ledger.open(path, busy_timeout=0.05) as ledger:
        before = ledger.transactions
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        threading.Timer(0.3, holder.rollback).start()
        conversation = ledger.create_conversation(title="waited")
        holder.close()
        assert ledger.lock_retries >= 1
        assert ledger.transactions - before >= 1 + ledger.lock_retries
        assert [c.title for c in ledger.conversations()] == ["waited"]
        assert ledger.conversation(conversation.id).title == "waited"

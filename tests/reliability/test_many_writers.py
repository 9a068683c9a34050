"""Many writers: processes running the mixed workload (``support.workload``) on one database at
once.

SQLite: eight writers and two readers on one file. A writer runs on its own conversations and,
now and then, on two shared ones, where a second run fails fast with ``ConversationBusyError``
(a clean, expected outcome: counted); no writer or reader may ever meet "database is locked" or
``LedgerBusyError``, and a reader must never see a conversation half way through a commit.

PostgreSQL: four writers on one database of a server of their own, restarted (``pg_ctl restart
-m fast``) in the middle. Runs in flight when it went away fail with the database error; the
writers go on, and write again once it is back; what was in flight is resumed afterwards.

Either way, at the end: every run a writer acknowledged is completed with exactly its answer,
every completed run has the answer its text calls for, and every invariant holds.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger.ledger import Ledger
from support.crash_child import connect, rows
from support.invariants import violations
from support.postgres import PostgresServer
from support.sizes import seconds
from support.workload import (
    DISCONNECTED,
    ForkServer,
    answer_problems,
    build_agent,
    journals,
    read_journal,
    run_all,
)

# Ten processes at full speed, a server restarted at a given moment: nothing else beside them.
pytestmark = pytest.mark.serial

WRITERS = 8
READERS = 2
SQLITE_SECONDS = seconds(4, 60)
PG_WRITERS = 4
PG_SECONDS = seconds(4, 30)


def totals(results: dict[str, dict[str, Any]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for result in results.values():
        total.update(result["counts"])
    return total


def statuses(url: str) -> dict[str, int]:
    with connect(url) as conn:
        return dict(rows(conn, "SELECT status, COUNT(*) FROM agent_runs GROUP BY status"))


def test_eight_writers_and_two_readers_on_one_sqlite_file_never_meet_a_locked_database(
    tmp_path, reliability_report
):
    url = f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    with Ledger.open(url) as ledger:
        shared = [ledger.create_conversation(title=f"shared {n}").id for n in range(2)]
    writer = {"role": "writer", "url": url, "seconds": SQLITE_SECONDS, "shared": shared}
    specs = {
        f"writer-{n}": {**writer, "seed": n, "journal": str(tmp_path / f"writer-{n}.jsonl")}
        for n in range(WRITERS)
    }
    specs |= {
        f"reader-{n}": {"role": "reader", "url": url, "seconds": SQLITE_SECONDS, "seed": 100 + n}
        for n in range(READERS)
    }
    with ForkServer(tmp_path) as fork_server:
        results = run_all(fork_server, specs, timeout=SQLITE_SECONDS + 60)

    writers = {n: r for n, r in results.items() if n.startswith("writer")}
    readers = {n: r for n, r in results.items() if n.startswith("reader")}
    assert {n: r["errors"] for n, r in results.items() if r["errors"]} == {}
    assert {n: r["torn"] for n, r in readers.items() if r["torn"]} == {}
    wrote, read = totals(writers), totals(readers)
    for busy in ("ledger_busy", "locked", "busy_own"):
        assert wrote[busy] == read[busy] == 0, (busy, wrote, read)
    logs = {path.name: path.read_text() for path in tmp_path.glob("*.log")}
    assert {name: log for name, log in logs.items() if "locked" in log.lower()} == {}
    assert all(r["counts"].get("acknowledged", 0) > 0 for r in writers.values()), writers
    assert read["snapshots"] > 0

    acknowledged = journals(tmp_path / f"{name}.jsonl" for name in writers)
    assert len(acknowledged) == wrote["acknowledged"]
    assert answer_problems(url, acknowledged) == []
    assert violations(url) == []
    with connect(url) as conn:
        on_shared = rows(
            conn,
            "SELECT COUNT(*) FROM agent_runs WHERE conversation_id IN (:a, :b)",
            a=shared[0],
            b=shared[1],
        )[0][0]
    reliability_report(
        f"{WRITERS} writer and {READERS} reader processes on one SQLite file for "
        f"{SQLITE_SECONDS:.0f}s: {wrote['acknowledged']} runs acknowledged "
        f"({wrote['acknowledged'] / SQLITE_SECONDS:.1f} runs/s, {wrote['team']} with subagents, "
        f"{on_shared} on the 2 shared conversations), {wrote['busy_shared']} ConversationBusyError "
        f"on shared ones (expected), 0 'database is locked', 0 LedgerBusyError; "
        f"{read['reads']} API reads and {read['snapshots']} snapshot reads, none torn; "
        f"runs by status {statuses(url)}; every acknowledged run completed with its answer, "
        "invariants hold"
    )


@pytest.fixture
def own_pg_server(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test alone (restarting the session's would cut off whatever
    else holds connections to it); ``pg_server`` only lends its availability checks."""
    server = PostgresServer(bindir=str(pg_server.bindir)).start()
    try:
        yield server
    finally:
        server.stop()


def test_four_writers_on_postgresql_survive_a_server_restart_and_lose_no_acknowledged_run(
    own_pg_server, tmp_path, reliability_report
):
    url = own_pg_server.create_database()
    Ledger.open(url).close()  # migrated once, before the writers
    writer = {
        "role": "writer",
        "url": url,
        "seconds": PG_SECONDS,
        "tolerate_disconnects": True,
        # No subagent runs here: see the report on subagents cut off by a database error.
        "weights": [3, 4, 2, 0],
    }
    journal_files = [tmp_path / f"writer-{n}.jsonl" for n in range(PG_WRITERS)]
    specs = {
        f"writer-{n}": {**writer, "seed": n, "journal": str(journal_files[n])}
        for n in range(PG_WRITERS)
    }
    with ForkServer(tmp_path) as fork_server:
        restarted: dict[str, float] = {}

        def restart_in_the_middle() -> None:
            time.sleep(PG_SECONDS / 2)
            assert all(read_journal(path) for path in journal_files), "a writer never wrote"
            restarted["at"] = time.time()
            own_pg_server.restart()
            restarted["back"] = time.time()

        results = run_all(
            fork_server, specs, timeout=PG_SECONDS + 60, meanwhile=restart_in_the_middle
        )

    wrote = totals(results)
    for busy in ("ledger_busy", "locked", "busy_own"):
        assert wrote[busy] == 0, (busy, wrote)
    acknowledged = journals(journal_files)
    assert len(acknowledged) == wrote["acknowledged"]
    for name, path in zip(results, journal_files, strict=True):
        after = [e for e in read_journal(path) if e["at"] > restarted["back"]]
        assert after, f"{name} wrote nothing after the restart: {results[name]}"
    cut_off = [e for r in results.values() for e in r["errors"]]
    assert len(cut_off) == wrote[DISCONNECTED]
    assert all(restarted["at"] - 1 <= float(e.split()[0]) <= restarted["back"] + 5 for e in cut_off)

    left = {s: n for s, n in statuses(url).items() if s in ("running", "failed")}
    with Ledger.open(url) as ledger:
        agent = build_agent(ledger)
        resumed = agent.recover(stale_after=0)
        failed = [run.id for run in ledger.runs(status="failed") if run.parent_run_id is None]
        resumed += [agent.resume(run_id) for run_id in failed]
    assert answer_problems(url, acknowledged) == []
    assert violations(url) == []
    kinds = Counter(e.split(" ", 2)[1].rstrip(":") for e in cut_off)
    reliability_report(
        f"{PG_WRITERS} writer processes on one PostgreSQL database for {PG_SECONDS:.0f}s, the "
        f"server restarted (-m fast) in the middle ({restarted['back'] - restarted['at']:.2f}s "
        f"down): {wrote['acknowledged']} runs acknowledged, every writer wrote again after the "
        f"restart; {wrote[DISCONNECTED]} runs cut off by the restart ({dict(kinds)}), leaving "
        f"{left or 'nothing'} in flight; {len(resumed)} resumed to completion; every "
        f"acknowledged run completed with its answer; runs by status {statuses(url)}; "
        "invariants hold"
    )

"""Every write of a run, killed. A child process dies at each named crash point of
``support.crash_points.POINTS`` (begin; a step's tool, rows, buffer and COMMIT; the answer step;
each statement of the commit; after the commit before ``run`` returns; inside and after a
resume's claim; inside and after an abandon), by ``os._exit`` and by SIGKILL, on SQLite and
PostgreSQL.

After every kill the run is either open (running, its steps and buffer as far as they were
committed, the conversation holding nothing of it but the user message) or finished (buffer
empty, the answer once), as the point says; the run the child acknowledged before is still
completed; the invariants (``support.invariants.violations``) hold. Then the database is copied
and the run recovered both ways: resumed in the original (one answer; every tool ran at least
once, with the same idempotency key each time) and abandoned in the copy (interrupted, the
conversation without half a run). A kill during a recovery is finished by the next recovery.

Last, a resume and an abandon race for one stale run in two processes: exactly one wins. On
PostgreSQL an abandon that finds the run resumed or finished meanwhile leaves it alone, and the
two lock the conversation's row and the run's in the same order, so they never deadlock.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

import agentledger
from agentledger import AgentLedgerError, AgentStatus, UsageError
from agentledger.ledger import Ledger
from support.crash_child import (
    FULL_ANSWER,
    QUESTION,
    TOOL_STEPS,
    build_agent,
    connect,
    read_side_file,
    rows,
)
from support.crash_points import (
    BY_NAME,
    FOLLOW_UP,
    KILL_MODES,
    POINTS,
    PREPARED_BY,
    CrashPoint,
    expected_status,
    run_forked,
    run_forked_together,
    wait_until,
)
from support.databases import BACKENDS, fresh_database
from support.invariants import violations
from support.sizes import SOAK, size

ACKNOWLEDGED_TURN = [("user", QUESTION), ("assistant", FULL_ANSWER)]
"""The run each child finishes (and acknowledges) before the one it dies in."""
CLAIM_LEASE = 0.5
"""Seconds the lease of a resumer killed after its claim lasts: the next resume waits that long."""


@dataclass(frozen=True)
class Killed:
    """A conversation whose second run a child killed at a crash point."""

    point: CrashPoint
    conversation_id: str
    acknowledged: dict[str, Any]
    run_id: str | None  # None when the kill left nothing of the run
    side_file: Path
    returned: dict[str, Any] | None  # what the child acknowledged of the killed run, if anything

    def tool_steps(self) -> list[int]:
        calls = read_side_file(self.side_file)
        return [c["step_index"] for c in calls if c["run_id"] == self.run_id]


# --- reading the database ------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """A conversation as the database holds it, read through one connection."""

    messages: list[tuple[str, str]]
    runs: dict[str, str]  # id -> status
    steps: dict[str, list[int]]
    buffered: dict[str, int]
    lease_holder: str | None
    leased_to: str | None


def look(url: str, conversation_id: str) -> Seen:
    by_conversation = {"id": conversation_id}
    with connect(url) as conn:
        messages = rows(
            conn,
            "SELECT role, content FROM conversation_messages "
            "WHERE conversation_id = :id AND section = 'messages' ORDER BY seq",
            **by_conversation,
        )
        runs = rows(
            conn, "SELECT id, status FROM agent_runs WHERE conversation_id = :id", **by_conversation
        )
        steps = rows(
            conn,
            "SELECT s.run_id, s.step_index FROM step_executions s "
            "JOIN agent_runs r ON r.id = s.run_id WHERE r.conversation_id = :id "
            "ORDER BY s.run_id, s.step_index",
            **by_conversation,
        )
        buffered = rows(
            conn,
            "SELECT b.run_id, COUNT(*) FROM execution_buffer_rows b "
            "JOIN agent_runs r ON r.id = b.run_id WHERE r.conversation_id = :id "
            "GROUP BY b.run_id",
            **by_conversation,
        )
        ((holder, leased_to),) = rows(
            conn,
            "SELECT lease_holder, lease_run_id FROM conversations WHERE id = :id",
            **by_conversation,
        )
    by_run: dict[str, list[int]] = {run_id: [] for run_id, _ in runs}
    for run_id, index in steps:
        by_run[run_id].append(index)
    return Seen(
        messages=[(role, content) for role, content in messages],
        runs=dict(runs),
        steps=by_run,
        buffered={run_id: int(count) for run_id, count in buffered},
        lease_holder=holder,
        leased_to=leased_to,
    )


def recorded_tool_calls(url: str, run_id: str) -> list[tuple[int, str]]:
    with connect(url) as conn:
        return rows(
            conn,
            "SELECT step_index, tool_call_id FROM tool_executions WHERE run_id = :id "
            "ORDER BY step_index, position",
            id=run_id,
        )


# --- killing -------------------------------------------------------------------------------------


def kill_at(
    url: str, point: CrashPoint, mode: str, workdir: Path, *, lease_seconds: float = 60.0
) -> Killed:
    """A child makes an acknowledged run, then dies at ``point`` of its next run. For a resume
    or abandon point, the child dies at ``PREPARED_BY`` and a second child dies taking over
    the run the first one left."""
    workdir.mkdir(exist_ok=True)
    files = {name: workdir / f"{name}.json" for name in ("acknowledged", "returned")}
    spec = {
        "role": "crash-point",
        "url": url,
        "kill": mode,
        "side_file": str(workdir / "tools.jsonl"),
        "ack_file": str(files["acknowledged"]),
        "returned_file": str(files["returned"]),
        "lease_seconds": lease_seconds,
    }
    first = point if point.phase == "run" else PREPARED_BY
    child = run_forked({**spec, "point": first.name}, workdir, "run")
    assert child.returncode == expected_status(mode), f"{child.result}\n{child.describe()}"
    acknowledged = json.loads(files["acknowledged"].read_text())
    conversation_id = acknowledged["conversation_id"]
    later = [r for r in look(url, conversation_id).runs if r != acknowledged["run_id"]]
    assert len(later) <= 1, later
    run_id = later[0] if later else None
    if point.phase != "run":
        taker = {**spec, "point": point.name, "run_id": run_id, "lease_seconds": CLAIM_LEASE}
        child = run_forked(taker, workdir, point.phase)
        assert child.returncode == expected_status(mode), f"{child.result}\n{child.describe()}"
    returned = json.loads(files["returned"].read_text()) if files["returned"].exists() else None
    return Killed(point, conversation_id, acknowledged, run_id, Path(spec["side_file"]), returned)


def assert_acknowledged_runs_survived(url: str, killed: Killed) -> Seen:
    seen = look(url, killed.conversation_id)
    assert seen.runs[killed.acknowledged["run_id"]] == "completed"
    assert seen.messages[:2] == ACKNOWLEDGED_TURN
    if killed.returned is not None:  # the child acknowledged the killed run too
        assert killed.returned["status"] == "completed"
        assert seen.runs[killed.returned["run_id"]] == "completed"
        assert seen.messages.count(("assistant", FULL_ANSWER)) == 2
    return seen


def assert_left_as_the_point_says(url: str, killed: Killed) -> None:
    """Open (running, its recorded steps and buffer, holding the lease, the conversation with
    only its user message) or finished (buffer empty, the answer once), as the point says."""
    point = killed.point
    seen = assert_acknowledged_runs_survived(url, killed)
    if point.left == "nothing":
        assert killed.run_id is None
        assert seen.messages == ACKNOWLEDGED_TURN
        assert seen.lease_holder is None
    else:
        assert killed.run_id is not None
        assert seen.runs[killed.run_id] == ("running" if point.left == "open" else point.left)
        answer = [("assistant", FULL_ANSWER)] if point.left == "completed" else []
        assert seen.messages == [*ACKNOWLEDGED_TURN, ("user", FOLLOW_UP), *answer]
    if point.left == "open":
        assert seen.steps[killed.run_id] == list(range(point.steps))
        assert seen.buffered.get(killed.run_id, 0) == point.buffered
        assert seen.leased_to == killed.run_id
        assert str(seen.lease_holder).startswith("resume:") == point.claimed
        assert killed.tool_steps() == list(range(point.tools))
    elif point.left != "nothing":
        assert seen.buffered.get(killed.run_id, 0) == 0
        assert seen.lease_holder is None
    assert violations(url) == []


# --- recovering ----------------------------------------------------------------------------------


def resume_it(url: str, killed: Killed) -> None:
    """``Agent.recover`` resumes an open run to one answer, its tools run at least once with
    the same key each time; it leaves a finished run (or none) alone."""
    point = killed.point
    with Ledger.open(url) as ledger:
        agent, llm = build_agent(ledger, side_file=killed.side_file)
        if point.claimed:  # its resumer died holding the lease: recoverable once that expires
            wait_until(lambda: ledger.stale_runs() != [], 15, "the dead resumer's lease expiry")
        results = [(r.run_id, r.status, r.answer) for r in agent.recover(stale_after=0)]
        assert agent.recover(stale_after=0) == []
        if point.left == "interrupted":
            with pytest.raises(UsageError, match="interrupted"):
                agent.resume(killed.run_id or "", stale_after=0)
    if point.left != "open":
        assert results == []
        assert llm.requests == []
        assert_left_as_the_point_says(url, killed)
        return
    assert killed.run_id is not None
    assert results == [(killed.run_id, AgentStatus.COMPLETED, FULL_ANSWER)]
    seen = assert_acknowledged_runs_survived(url, killed)
    assert seen.runs[killed.run_id] == "completed"
    assert (seen.buffered.get(killed.run_id, 0), seen.lease_holder) == (0, None)
    assert seen.steps[killed.run_id] == [0, 1, 2, 3]
    assert seen.messages == [*ACKNOWLEDGED_TURN, ("user", FOLLOW_UP), ("assistant", FULL_ANSWER)]
    redone = [step for step in range(TOOL_STEPS) if step >= point.steps]
    assert killed.tool_steps() == [*range(point.tools), *redone]  # at least once each
    keys = {
        (c["step_index"], c["idempotency_key"])
        for c in read_side_file(killed.side_file)
        if c["run_id"] == killed.run_id
    }
    assert keys == {(s, f"{killed.run_id}:{s}:call-{s}") for s in range(TOOL_STEPS)}
    assert recorded_tool_calls(url, killed.run_id) == [(s, f"call-{s}") for s in range(3)]
    assert violations(url) == []


def abandon_it(url: str, killed: Killed) -> None:
    """``Ledger.recover()`` interrupts an open run, flushes its buffer and frees the
    conversation, which keeps no part of the run; it leaves a finished run (or none) alone."""
    point = killed.point
    with Ledger.open(url) as ledger:
        abandoned = [(r.id, r.status) for r in ledger.recover(stale_after=0)]
        assert ledger.recover(stale_after=0) == []
    if point.left != "open":
        assert abandoned == []
        assert_left_as_the_point_says(url, killed)
        return
    assert killed.run_id is not None
    assert abandoned == [(killed.run_id, "interrupted")]
    seen = assert_acknowledged_runs_survived(url, killed)
    assert seen.runs[killed.run_id] == "interrupted"
    assert (seen.buffered.get(killed.run_id, 0), seen.lease_holder) == (0, None)
    assert seen.steps[killed.run_id] == list(range(point.steps))
    assert seen.messages == [*ACKNOWLEDGED_TURN, ("user", FOLLOW_UP)]
    assert violations(url) == []


@pytest.fixture
def copy_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``copy_of(url)``: a copy of the database (SQLite: the backup API, which reads the WAL
    too; PostgreSQL: ``CREATE DATABASE ... TEMPLATE``), dropped after the test."""
    made: list[str] = []

    def copy(url: str) -> str:
        if url.startswith("sqlite"):
            target = tmp_path / f"copy-{len(made)}.db"
            source = make_url(url).database or ""
            with (
                contextlib.closing(sqlite3.connect(source)) as original,
                contextlib.closing(sqlite3.connect(target)) as duplicate,
            ):
                original.backup(duplicate)
            return f"sqlite:///{target.as_posix()}"
        server = request.getfixturevalue("pg_server")
        name, source = f"copy_{uuid.uuid4().hex[:12]}", urlsplit(url).path.lstrip("/")
        with server.connect() as conn:  # waits for the killed child's session to end
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        made.append(server.url(name))
        return made[-1]

    yield copy
    if made:
        server = request.getfixturevalue("pg_server")
        for url in made:
            with contextlib.suppress(Exception):
                server.drop_database(url)


# --- every point, both kills, both recoveries ----------------------------------------------------


def test_the_crash_points_are_named_once_and_say_what_they_leave():
    assert len(BY_NAME) == len(POINTS)
    assert {p.phase for p in POINTS} == {"run", "resume", "abandon"}
    assert {p.left for p in POINTS} == {"nothing", "open", "completed", "interrupted"}
    assert all(p.doc and (p.at or p.tool_step or p.name == "returned") for p in POINTS)
    assert PREPARED_BY.phase == "run" and PREPARED_BY.left == "open"


def kills() -> list[Any]:
    """Every point killed both ways on both backends in ``make soak``. In ``make test`` each
    point once, the ways and the backends taking turns down the table, so that every point,
    both ways and both backends are played (what a kill leaves is the kernel's and the
    database's doing; the soak plays every combination)."""
    chosen = [
        (backend, point, mode)
        for n, point in enumerate(POINTS)
        for backend in (BACKENDS if SOAK else [BACKENDS[n // 2 % 2]])
        for mode in (KILL_MODES if SOAK else [KILL_MODES[n % 2]])
    ]
    return [
        pytest.param(
            *backend.values,
            point,
            mode,
            marks=backend.marks,
            id=f"{backend.id}-{point.name}-{mode}",
        )
        for backend, point, mode in chosen
    ]


@pytest.fixture
def killed_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database on the backend the test's parameters name."""
    with fresh_database(request.param, request, tmp_path) as url:
        yield url


@pytest.mark.parametrize(("killed_url", "point", "mode"), kills(), indirect=["killed_url"])
def test_a_kill_at_any_write_leaves_the_run_open_or_finished_and_either_recovery_ends_it(
    killed_url, tmp_path, copy_of, point, mode, reliability_report
):
    db_url = killed_url
    killed = kill_at(db_url, point, mode, tmp_path)
    assert_left_as_the_point_says(db_url, killed)
    copy = copy_of(db_url)

    resume_it(db_url, killed)
    abandon_it(copy, killed)

    kills = "1 kill" if point.phase == "run" else f"2 kills ({PREPARED_BY.name}, then this)"
    reliability_report(
        f"{kills} by {mode}: run left {point.left}; resumed, and abandoned in a copy; "
        "acknowledged runs intact, invariants held after each"
    )


# --- two recoverers at once ----------------------------------------------------------------------


def _library_error(name: str) -> type[AgentLedgerError]:
    found = getattr(agentledger.errors, name, None)
    assert isinstance(found, type) and issubclass(found, AgentLedgerError), name
    return found


@pytest.mark.parametrize(
    "stale_after", [None, 0], ids=["after-the-lease-expired", "with-stale-after-0"]
)
def test_a_resume_and_an_abandon_racing_for_a_stale_run_have_exactly_one_winner(
    db_url, tmp_path, stale_after, reliability_report
):
    rounds = size(1, 12)
    wins, losers = {"resume": 0, "abandon": 0}, Counter[str]()
    for n in range(rounds):
        workdir = tmp_path / f"round-{n}"
        killed = kill_at(db_url, PREPARED_BY, "sigkill", workdir, lease_seconds=0.5)
        assert killed.run_id is not None
        if stale_after is None:  # wait until the dead process's lease ran out
            with Ledger.open(db_url) as ledger:
                wait_until(lambda: ledger.stale_runs() != [], 15, "the dead run's lease expiry")
        common = {"url": db_url, "stale_after": stale_after, "side_file": str(killed.side_file)}
        finished = run_forked_together(
            {
                "resumer": {**common, "role": "resume", "run_id": killed.run_id, "delay": 0.05},
                "abandoner": {**common, "role": "abandon"},
            },
            workdir,
        )

        results = {name: child.result for name, child in finished.items()}
        assert all(child.returncode == 0 for child in finished.values()), results
        resumer, abandoner = results["resumer"], results["abandoner"]
        assert resumer is not None and abandoner is not None, results
        assert "ok" in abandoner, results  # an abandon finds the run stale, or not
        seen = look(db_url, killed.conversation_id)
        if abandoner["ok"] == []:  # the resume won
            assert "ok" in resumer, results
            assert (resumer["ok"]["status"], resumer["ok"]["answer"]) == ("completed", FULL_ANSWER)
            assert seen.runs[killed.run_id] == "completed"
            assert seen.messages[-2:] == [("user", FOLLOW_UP), ("assistant", FULL_ANSWER)]
            wins["resume"] += 1
        else:  # the abandon won; the resume failed with a clear error
            assert abandoner["ok"] == [[killed.run_id, "interrupted"]], results
            assert "error" in resumer, results
            _library_error(resumer["error"]["type"])
            losers[resumer["error"]["type"]] += 1
            assert killed.run_id in resumer["error"]["message"], results
            assert seen.runs[killed.run_id] == "interrupted"
            assert seen.messages[-1] == ("user", FOLLOW_UP)
            wins["abandon"] += 1
        assert (seen.buffered.get(killed.run_id, 0), seen.lease_holder) == (0, None)
        assert violations(db_url) == []
    reliability_report(
        f"{rounds} stale runs, each resumed and abandoned at once by two processes: "
        f"{wins['resume']} resumed, {wins['abandon']} abandoned, never both or neither; every "
        f"losing resume raised an AgentLedgerError naming the run ({dict(losers) or 'none'}); "
        "invariants held"
    )


def _sent(statement: str, start: str) -> bool:
    return " ".join(statement.split()).startswith(start)


def test_an_abandon_never_turns_a_run_that_committed_meanwhile_into_an_interrupted_one(
    db_url, tmp_path, reliability_report
):
    killed = kill_at(db_url, PREPARED_BY, "sigkill", tmp_path)
    resumed: list[Any] = []

    def resume_now(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # the abandon's transaction has begun: a resumer finishes the run now (on SQLite it
        # waits for the abandon's write lock; on PostgreSQL for the conversation's row)
        if not resumed and _sent(statement, "SELECT agent_runs.conversation_id"):
            thread = threading.Thread(target=resume)
            resumed.append(thread)
            thread.start()
            thread.join(0.5)

    outcome: list[Any] = []

    def resume() -> None:
        try:
            with Ledger.open(db_url) as ledger:
                outcome.append(build_agent(ledger)[0].resume(killed.run_id, stale_after=0))
        except BaseException as exc:  # the resumer may lose the race: with a clear error
            outcome.append(exc)

    with Ledger.open(db_url) as abandoner:
        event.listen(abandoner.engine, "after_cursor_execute", resume_now)
        abandoned = abandoner.recover(stale_after=0)
    resumed[0].join(60)

    status = look(db_url, killed.conversation_id).runs[killed.run_id]
    (result,) = outcome
    if isinstance(result, BaseException):
        assert isinstance(result, AgentLedgerError), repr(result)
        assert status == "interrupted"
    else:
        assert result.status is AgentStatus.COMPLETED
        assert status == "completed"
    assert violations(db_url) == []
    reliability_report(
        f"abandon vs a resume inside its transaction: run ended {status}; {abandoned!r:.60}"
    )

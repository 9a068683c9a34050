"""Fault injection: the ledger's database fails in the middle of a run, at every point.

A full scripted run (three tool steps, then the answer) sends a fixed number of statements.
For N = 1, 2, ... up to that number, statement N raises the driver's own ``OperationalError``
(``sqlite3``'s "disk I/O error", psycopg's "server closed the connection"): once, or every
time from N on with the commits and rollbacks too (the database went away). A third sweep lets
the K-th COMMIT of the run go through and then raises, as a connection that drops before the
acknowledgement arrives: the caller sees an error for work that was done.

After every fault the invariants hold (``violations(url) == []``), and after the recovery a
caller can do with the public API (ask again, ``Agent.resume``, or ``Ledger.recover()``
then ask again) the conversation holds exactly one answer, no half run and no buffer.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.pool import ConnectionPoolEntry

from agentledger import Agent, AgentLedgerError, RunResult
from agentledger.ledger import Ledger
from support.crash_child import FULL_ANSWER, QUESTION, build_agent, connect, rows
from support.databases import BACKENDS, fresh_database
from support.invariants import violations
from support.sizes import SOAK

MARK = "injected fault"
"""In the message of every error this module injects: the caller must see it."""

LEASE_SECONDS = 600.0
"""Long enough that no heartbeat beats (and sends statements) during a case."""


def driver_error(dialect: str, where: str) -> Exception:
    """The DBAPI's own OperationalError, as the driver raises it when the database fails."""
    if dialect == "sqlite":
        return sqlite3.OperationalError(f"disk I/O error ({MARK} at {where})")
    import psycopg

    return psycopg.OperationalError(
        f"consuming input failed: server closed the connection unexpectedly ({MARK} at {where})"
    )


@contextlib.contextmanager
def patched(target: Any, name: str, replacement: Callable[..., Any]) -> Iterator[None]:
    """``target.name`` replaced on the instance (a SQLAlchemy dialect), restored on exit."""
    setattr(target, name, replacement)
    try:
        yield
    finally:
        delattr(target, name)


@dataclass
class FaultyDatabase:
    """Counts the statements a ledger's engine sends; statement ``at`` fails (``gone``: every
    statement, commit and rollback from ``at`` on fails, as when the server goes away)."""

    engine: Engine
    at: int | None = None
    gone: bool = False
    statements: int = 0
    fired: int = 0

    def failing(self) -> bool:
        if self.at is None:
            return False
        return self.statements >= self.at if self.gone else self.statements == self.at

    def before_execute(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self.statements += 1
        if self.failing():
            self.fired += 1
            raise driver_error(self.engine.dialect.name, f"statement {self.statements}")

    def guarded(self, original: Callable[[Any], None], what: str) -> Callable[[Any], None]:
        def call(dbapi_connection: Any) -> None:
            if self.gone and self.at is not None and self.statements >= self.at:
                raise driver_error(self.engine.dialect.name, what)
            original(dbapi_connection)

        return call

    @contextlib.contextmanager
    def installed(self) -> Iterator[FaultyDatabase]:
        dialect = self.engine.dialect
        event.listen(self.engine, "before_cursor_execute", self.before_execute)
        try:
            with (
                patched(dialect, "do_commit", self.guarded(dialect.do_commit, "COMMIT")),
                patched(dialect, "do_rollback", self.guarded(dialect.do_rollback, "ROLLBACK")),
            ):
                yield self
        finally:
            event.remove(self.engine, "before_cursor_execute", self.before_execute)


@dataclass
class LostAcknowledgement:
    """The ``at``-th COMMIT reaches the database, then the caller gets an error anyway. With
    ``unconfirmed``, the statement after it fails too: the ledger cannot ask the database
    whether the transaction took effect."""

    engine: Engine
    at: int | None = None
    unconfirmed: bool = False
    commits: int = 0
    pending: bool = False

    def before_execute(self, *_args: Any) -> None:
        if self.pending:
            self.pending = False
            raise driver_error(self.engine.dialect.name, "the statement after a lost COMMIT")

    @contextlib.contextmanager
    def installed(self) -> Iterator[LostAcknowledgement]:
        dialect = self.engine.dialect
        original = dialect.do_commit

        def commit(dbapi_connection: Any) -> None:
            original(dbapi_connection)
            self.commits += 1
            if self.commits == self.at:
                self.pending = self.unconfirmed
                raise driver_error(dialect.name, f"the acknowledgement of COMMIT {self.commits}")

        event.listen(self.engine, "before_cursor_execute", self.before_execute)
        try:
            with patched(dialect, "do_commit", commit):
                yield self
        finally:
            event.remove(self.engine, "before_cursor_execute", self.before_execute)


# --- the database, one per backend for the whole module ----------------------------------------


@pytest.fixture(
    scope="module",
    params=BACKENDS,
)
def ledger(request: pytest.FixtureRequest) -> Iterator[Ledger]:
    """One ledger per backend, shared by the cases (each on a conversation of its own): a
    fresh PostgreSQL database per case would dominate the run time. Once it is closed, every
    connection it took from its pool has been given back."""
    with fresh_database(request.param, request) as url:
        opened = Ledger.open(url, lease_seconds=LEASE_SECONDS)
        with every_connection_given_back(opened.engine), opened:
            yield opened


@contextlib.contextmanager
def every_connection_given_back(engine: Engine) -> Iterator[None]:
    """Fails unless each connection the engine's pool hands out in the block is back in it at
    the end (given back, or closed as unusable): one a fault left out stays open on the
    database until the garbage collector happens to find it."""
    out: set[ConnectionPoolEntry] = set()
    event.listen(engine, "checkout", lambda _dbapi, entry, _proxy: out.add(entry))
    event.listen(engine, "checkin", lambda _dbapi, entry: out.discard(entry))
    yield
    assert not out, f"{len(out)} connection(s) never given back to the pool: a fault left them open"


def raw_url(ledger: Ledger) -> str:
    return ledger.engine.url.render_as_string(hide_password=False)


# --- what a caller does -------------------------------------------------------------------------


def ask(agent: Agent, conversation_id: str) -> RunResult | BaseException:
    try:
        return agent.run(QUESTION, conversation_id)
    except Exception as exc:
        return exc


def recover_as_a_caller(agent: Agent, ledger: Ledger, conversation_id: str) -> RunResult:
    """What the documentation leaves a caller whose ``Agent.run`` raised: look at the
    conversation's runs. None (or one abandoned): nothing to continue, ask again. Completed:
    it was recorded and only the acknowledgement was lost, read its result. Failed, or running
    with no process behind it: ``Agent.resume`` (``stale_after=0``: this process knows nobody
    else drives it)."""
    runs = ledger.runs(conversation_id)
    if not runs or runs[-1].status == "interrupted":
        return agent.run(QUESTION, conversation_id)
    last = runs[-1]
    if last.status == "completed":
        return ledger.recorder.run_result(last.id)
    return agent.resume(last.id, stale_after=0)


def abandon_then_ask_again(agent: Agent, ledger: Ledger, conversation_id: str) -> RunResult:
    """An operator's recovery: abandon the stale runs (conversations stay clean), and the
    caller asks again."""
    for run in ledger.recover(stale_after=0):
        assert run.status == "interrupted", run
    assert [m.role for m in ledger.messages(conversation_id)] == ["user"] * len(
        ledger.runs(conversation_id)
    ), "an abandoned run left more than its user message in the conversation"
    return recover_as_a_caller(agent, ledger, conversation_id)


# --- what must hold -----------------------------------------------------------------------------


@dataclass
class Tally:
    """What the cases of one sweep did, for the report line."""

    cases: int = 0
    acknowledged: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    left: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def saw(self, outcome: RunResult | BaseException) -> None:
        self.cases += 1
        if isinstance(outcome, RunResult):
            self.acknowledged += 1
        elif isinstance(outcome, AgentLedgerError):
            self.errors[f"{type(outcome).__name__} (AgentLedgerError)"] += 1
        else:
            self.errors[f"raw {type(outcome).__module__}.{type(outcome).__name__}"] += 1

    def errors_line(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in sorted(self.errors.items())) or "none"

    def left_line(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in sorted(self.left.items()))


def error_problems(outcome: BaseException) -> list[str]:
    """A caller must get one of the library's errors that says what happened: never the
    database driver's own."""
    if not isinstance(outcome, AgentLedgerError):
        return [f"the caller got {type(outcome).__name__}: {outcome}"]
    chain, seen = [], outcome
    while seen is not None:
        chain.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    if not any(MARK in text for text in chain):
        return [f"the error does not say what happened: {type(outcome).__name__}: {outcome}"]
    return []


def state_of(ledger: Ledger, conversation_id: str) -> str:
    """How the fault left the conversation's run, before any recovery."""
    runs = ledger.runs(conversation_id)
    if not runs:
        return "nothing recorded"
    conversation = ledger.conversation(conversation_id)
    holding = " holding the lease" if conversation.lease_run_id == runs[-1].id else ""
    return f"{runs[-1].status}{holding}"


def settled_problems(ledger: Ledger, conversation_id: str, result: RunResult) -> list[str]:
    """Exactly one answer, one completed run, nothing running, no buffer left."""
    problems = []
    if (result.status, result.answer) != ("completed", FULL_ANSWER):
        problems.append(f"the recovered run is {result.status} with answer {result.answer!r}")
    messages = ledger.messages(conversation_id)
    answers = [m.content for m in messages if m.role == "assistant"]
    if answers != [FULL_ANSWER]:
        problems.append(f"the conversation holds the answers {answers}")
    if any(m.role == "user" and m.content != QUESTION for m in messages):
        problems.append("a user message changed")
    statuses = Counter(run.status for run in ledger.runs(conversation_id))
    if statuses["completed"] != 1 or statuses["running"] or statuses["failed"]:
        problems.append(f"the conversation's runs are {dict(statuses)}")
    with connect(raw_url(ledger)) as conn:
        left = rows(
            conn,
            "SELECT COUNT(*) FROM execution_buffer_rows b JOIN agent_runs r ON r.id = b.run_id "
            "WHERE r.conversation_id = :c",
            c=conversation_id,
        )
    if left != [(0,)]:
        problems.append(f"{left[0][0]} buffer rows left")
    return problems


def check_case(
    ledger: Ledger,
    tally: Tally,
    label: str,
    fault: Callable[[Agent, str], RunResult | BaseException],
    recover: Callable[[Agent, Ledger, str], RunResult],
) -> None:
    """One case: a fresh conversation, the faulty run, the invariants, the recovery, the
    invariants and the answer again. Problems are collected, not raised, so a sweep reports
    every N that breaks."""
    url = raw_url(ledger)
    conversation_id = ledger.create_conversation(title=label).id
    agent, _ = build_agent(ledger)
    outcome = fault(agent, conversation_id)
    tally.saw(outcome)
    problems: list[str] = []
    if isinstance(outcome, RunResult):
        if ledger.run(outcome.run_id).status != outcome.status:
            problems.append("an acknowledged run is not recorded as acknowledged")
        problems += settled_problems(ledger, conversation_id, outcome)
    else:
        problems += error_problems(outcome)
        tally.left[state_of(ledger, conversation_id)] += 1
        problems += [f"after the fault: {v}" for v in violations(url)]
        try:
            result = recover(agent, ledger, conversation_id)
        except Exception as exc:
            problems.append(f"the recovery raised {type(exc).__name__}: {exc}")
        else:
            problems += settled_problems(ledger, conversation_id, result)
    problems += [f"at the end: {v}" for v in violations(url)]
    tally.problems += [f"{label}: {p}" for p in problems]


def statements_of_a_run(ledger: Ledger) -> int:
    """How many statements one full scripted run sends on this backend."""
    agent, _ = build_agent(ledger)
    conversation_id = ledger.create_conversation(title="measure").id
    with FaultyDatabase(ledger.engine).installed() as counter:
        result = agent.run(QUESTION, conversation_id)
    assert result.answer == FULL_ANSWER
    return counter.statements


def commits_of_a_run(ledger: Ledger) -> int:
    agent, _ = build_agent(ledger)
    conversation_id = ledger.create_conversation(title="measure").id
    with LostAcknowledgement(ledger.engine).installed() as counter:
        agent.run(QUESTION, conversation_id)
    return counter.commits


def faulty_run(ledger: Ledger, at: int, *, gone: bool) -> Callable[[Agent, str], Any]:
    def fault(agent: Agent, conversation_id: str) -> RunResult | BaseException:
        with FaultyDatabase(ledger.engine, at=at, gone=gone).installed():
            return ask(agent, conversation_id)

    return fault


# --- the sweeps ---------------------------------------------------------------------------------


def swept(points: list[int]) -> str:
    every = points == list(range(1, len(points) + 1))
    return f"N=1..{points[-1]}" if every else f"N={', '.join(map(str, points))}"


def sweep(last: int, *, odd: bool) -> list[int]:
    """The statements a sweep fails at, 1 to ``last``: every one in ``make soak``; in ``make
    test`` the odd ones in one sweep and the even ones in the other, so that the two sweeps
    together still fail every statement (a statement failing once and the database going away
    from it on leave the same rows half written or not: the transaction is what decides)."""
    every = list(range(1, last + 1))
    if SOAK:
        return every
    return [at for at in every if at % 2 == odd] + ([last] if last % 2 != odd else [])


def test_a_statement_that_fails_once_at_any_point_of_a_run_loses_nothing_and_doubles_nothing(
    ledger, reliability_report
):
    total = statements_of_a_run(ledger)
    assert total >= 25, f"a run of three tool steps sent only {total} statements"
    tally = Tally()
    points = sweep(total + 1, odd=True)  # total + 1: no fault fires, acknowledged
    for at in points:
        check_case(
            ledger,
            tally,
            f"statement {at} fails once",
            faulty_run(ledger, at, gone=False),
            recover_as_a_caller,
        )

    assert not tally.problems, "\n".join(tally.problems)
    assert tally.acknowledged == 1 and tally.cases == len(points)
    reliability_report(
        f"{ledger.dialect}: statement N of a {total}-statement run failed once, {swept(points)} "
        f"(+1 clean); the caller saw: {tally.errors_line()}; the fault left: "
        f"{tally.left_line()}; after ask-again or Agent.resume: one answer each, no buffer, "
        "invariants held after every fault and every recovery"
    )


def test_a_database_that_goes_away_at_any_point_of_a_run_leaves_nothing_half_written(
    ledger, reliability_report
):
    total = statements_of_a_run(ledger)
    tally = Tally()
    points = sweep(total, odd=False)
    for at in points:
        # Even N: the caller resumes the run; odd N: an operator abandons it first.
        recover = recover_as_a_caller if at % 2 == 0 else abandon_then_ask_again
        check_case(
            ledger,
            tally,
            f"statements, commits and rollbacks fail from statement {at} on",
            faulty_run(ledger, at, gone=True),
            recover,
        )

    assert not tally.problems, "\n".join(tally.problems)
    assert tally.acknowledged == 0
    reliability_report(
        f"{ledger.dialect}: every statement, COMMIT and ROLLBACK failed from statement N on, "
        f"{swept(points)}; the caller saw: {tally.errors_line()}; the fault left: "
        f"{tally.left_line()}; once the database was back, Agent.resume (even N) or "
        "recover() + ask again (odd N): one answer each, no buffer, invariants held"
    )


def test_a_commit_that_succeeded_but_was_reported_failed_is_recorded_exactly_once(
    ledger, reliability_report
):
    """The COMMIT went through and the caller got an error: the ledger asks the database
    whether the transaction took effect, finds that it did, and the run goes on as if nothing
    had happened: one answer, one completed run, every step once."""
    commits = commits_of_a_run(ledger)
    assert commits >= 5, f"a run of three tool steps made only {commits} commits"
    tally = Tally()
    for at in range(1, commits + 1):

        def fault(agent: Agent, conversation_id: str, at: int = at) -> Any:
            with LostAcknowledgement(ledger.engine, at=at).installed():
                return ask(agent, conversation_id)

        check_case(
            ledger, tally, f"the acknowledgement of COMMIT {at} is lost", fault, recover_as_a_caller
        )

    assert not tally.problems, "\n".join(tally.problems)
    assert tally.acknowledged == commits, f"the caller saw {tally.errors_line()}"
    reliability_report(
        f"{ledger.dialect}: COMMIT K of {commits} went through and the caller got an error, "
        f"K=1..{commits}; the ledger confirmed each with the database and the run went on: "
        f"{tally.acknowledged} of {commits} runs acknowledged, with one answer, one completed "
        "run and every step once, invariants held"
    )


def test_a_commit_whose_acknowledgement_was_lost_and_could_not_be_confirmed_fails_cleanly(
    ledger, reliability_report
):
    """As above, but the database cannot say at once whether the COMMIT took effect: the caller
    gets the error, the run ends failed with the totals of the steps the ledger holds (a step
    whose COMMIT went through counts), and resuming it gives one answer."""
    commits = commits_of_a_run(ledger)
    tally = Tally()
    for at in range(1, commits + 1):

        def fault(agent: Agent, conversation_id: str, at: int = at) -> Any:
            with LostAcknowledgement(ledger.engine, at=at, unconfirmed=True).installed():
                return ask(agent, conversation_id)

        check_case(
            ledger,
            tally,
            f"the acknowledgement of COMMIT {at} is lost, unconfirmed",
            fault,
            recover_as_a_caller,
        )

    assert not tally.problems, "\n".join(tally.problems)
    assert tally.acknowledged == 0, "a lost acknowledgement did not reach the caller"
    reliability_report(
        f"{ledger.dialect}: COMMIT K of {commits} went through, the caller got an error and "
        f"the confirmation failed too, K=1..{commits}; the caller saw: {tally.errors_line()}; "
        f"the fault left: {tally.left_line()} (totals equal to the step rows); after the "
        "caller's recovery: exactly one answer and one completed run each, invariants held"
    )

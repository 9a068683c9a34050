"""Named crash points: every write of a run, and of its recovery, as a place to die.

:data:`POINTS` is the table: one :class:`CrashPoint` per place, named, with what it is and what
a process killed there leaves in the database. A child process plays a point (:func:`play`):

- ``run`` points: the child makes one acknowledged run on a new conversation (its result file
  is written after ``run`` returned), then a second run on that conversation, and dies at the
  point during the second one;
- ``resume`` and ``abandon`` points: the child takes over a run a ``run`` child left behind
  (``Agent.resume``, ``Ledger.recover()``) and dies at the point during that.

The points are tripped without touching the library: SQLAlchemy events on the ledger's engine
count the write transactions of the phase (``begin`` with the ledger's write option, in the
main thread, so a heartbeat never counts) and kill at a statement of the n-th one
(``before_cursor_execute``), at its ``commit`` event (every statement sent, no COMMIT yet), or
as soon as the driver's COMMIT returns (the dialect's ``do_commit``, wrapped); the scenario's
tool (from ``support.crash_child``) kills inside itself. A kill is ``os._exit(70)`` or SIGKILL.

Children are forked from a forkserver that has agentledger, SQLAlchemy and psycopg imported
already (``support.forked``), so a child starts in a few milliseconds instead of a second: one alone
(:func:`run_forked`) or several released at once (:func:`run_forked_together`), each playing
one of the :data:`ROLES` and writing ``{"ok": ...}`` or ``{"error": ...}`` to its result file
(unless it was killed first).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

from sqlalchemy import Engine, event

from agentledger.ledger import Ledger
from support import crash_child, forked
from support.crash_child import (
    QUESTION,
    barrier,
    build_agent,
    summary,
    write_json,
)
from support.forked import CHILD_TIMEOUT, Finished

FOLLOW_UP = "Three more facts, please."
"""The user message of the run that is killed (the acknowledged one asked ``QUESTION``)."""

EXIT_STATUS = 70
KILL_MODES = ("exit", "sigkill")
"""``os._exit(70)``: the interpreter stops without cleanup; SIGKILL: the kernel stops it."""

Phase = Literal["run", "resume", "abandon"]
Left = Literal["nothing", "open", "completed", "interrupted"]

COMMIT = "COMMIT"
"""``at`` of a point in a transaction once every statement was sent, before the COMMIT."""
COMMITTED = "COMMITTED"
"""``at`` of a point right after the transaction committed (its connection is given back)."""


@dataclass(frozen=True)
class CrashPoint:
    """A place in the writes of a run (or of its recovery) where the child dies.

    ``transaction`` counts the write transactions of the phase from 0: a run's are begin (0),
    its steps 0-3 (1-4) and the commit (5); a resume's start with the claim (0); an abandon's
    is the abandon (0). ``at`` is a statement's first words, :data:`COMMIT` or
    :data:`COMMITTED`. ``tool_step`` kills inside the scenario's tool at that step instead.
    ``left`` is what the database holds for the killed run afterwards; for an open run,
    ``steps`` recorded, ``buffered`` execution buffer rows and ``tools`` steps whose tool ran.
    """

    name: str
    doc: str
    phase: Phase
    left: Left
    transaction: int | None = None
    at: str | None = None
    tool_step: int | None = None
    steps: int = 0
    buffered: int = 0
    tools: int = 0

    @property
    def claimed(self) -> bool:
        """Whether the killed process held the run's lease as a resumer (``resume:``)."""
        return self.phase == "resume" and self.at == COMMITTED


_BEGIN, _STEP_1, _ANSWER_STEP, _COMMIT = 0, 2, 4, 5
_PREPARED = {"steps": 2, "buffered": 4, "tools": 2}
"""What the run resumed or abandoned at the ``resume``/``abandon`` points holds: the
``step-committed`` run point left it so."""

POINTS: tuple[CrashPoint, ...] = (
    CrashPoint(
        "begin-sent",
        "Inside the begin transaction: the lease, the run row and the user message sent, no "
        "COMMIT. Nothing of the run may remain.",
        phase="run",
        left="nothing",
        transaction=_BEGIN,
        at=COMMIT,
    ),
    CrashPoint(
        "begin-committed",
        "Right after the begin transaction committed, before the first model call: a running "
        "run with no step and the user message in the conversation.",
        phase="run",
        left="open",
        transaction=_BEGIN,
        at=COMMITTED,
    ),
    CrashPoint(
        "tool-running",
        "Inside the tool of step 1, before that step is written: step 0 alone is recorded; "
        "resuming runs step 1's tool again, with the same idempotency key.",
        phase="run",
        left="open",
        tool_step=1,
        steps=1,
        buffered=2,
        tools=2,
    ),
    CrashPoint(
        "step-row-sent",
        "Inside step 1's transaction, when its step_executions row is sent.",
        phase="run",
        left="open",
        transaction=_STEP_1,
        at="INSERT INTO step_executions",
        steps=1,
        buffered=2,
        tools=2,
    ),
    CrashPoint(
        "step-buffer-sent",
        "Inside step 1's transaction, when its execution buffer rows are sent (its last "
        "statement).",
        phase="run",
        left="open",
        transaction=_STEP_1,
        at="INSERT INTO execution_buffer_rows",
        steps=1,
        buffered=2,
        tools=2,
    ),
    CrashPoint(
        "step-commit-sent",
        "Step 1's transaction with every statement sent, before its COMMIT.",
        phase="run",
        left="open",
        transaction=_STEP_1,
        at=COMMIT,
        steps=1,
        buffered=2,
        tools=2,
    ),
    CrashPoint(
        "step-committed",
        "Right after step 1's transaction committed: steps 0 and 1 recorded.",
        phase="run",
        left="open",
        transaction=_STEP_1,
        at=COMMITTED,
        steps=2,
        buffered=4,
        tools=2,
    ),
    CrashPoint(
        "answer-step-sent",
        "The answer step's transaction (the answer in the buffer) before its COMMIT: resuming "
        "asks the model for the answer again.",
        phase="run",
        left="open",
        transaction=_ANSWER_STEP,
        at=COMMIT,
        steps=3,
        buffered=6,
        tools=3,
    ),
    CrashPoint(
        "answer-step-committed",
        "Right after the answer step committed, before the run's commit began: every step is "
        "recorded; resuming commits without asking the model again.",
        phase="run",
        left="open",
        transaction=_ANSWER_STEP,
        at=COMMITTED,
        steps=4,
        buffered=7,
        tools=3,
    ),
    CrashPoint(
        "commit-answer-sent",
        "Inside the commit transaction, when the answer is appended to the conversation.",
        phase="run",
        left="open",
        transaction=_COMMIT,
        at="INSERT INTO conversation_messages",
        steps=4,
        buffered=7,
        tools=3,
    ),
    CrashPoint(
        "commit-flush-sent",
        "Inside the commit transaction, when the run's buffer rows are deleted (the flush).",
        phase="run",
        left="open",
        transaction=_COMMIT,
        at="DELETE FROM execution_buffer_rows",
        steps=4,
        buffered=7,
        tools=3,
    ),
    CrashPoint(
        "commit-status-sent",
        "Inside the commit transaction, when the run row gets its status and totals.",
        phase="run",
        left="open",
        transaction=_COMMIT,
        at="UPDATE agent_runs",
        steps=4,
        buffered=7,
        tools=3,
    ),
    CrashPoint(
        "commit-sent",
        "The commit transaction with every statement sent (the lease released), before its COMMIT.",
        phase="run",
        left="open",
        transaction=_COMMIT,
        at=COMMIT,
        steps=4,
        buffered=7,
        tools=3,
    ),
    CrashPoint(
        "commit-committed",
        "Right after the commit transaction committed, before ``run`` returned: the run is "
        "finished though no one was told.",
        phase="run",
        left="completed",
        transaction=_COMMIT,
        at=COMMITTED,
    ),
    CrashPoint(
        "returned",
        "After ``run`` returned and the child acknowledged it (its result file written).",
        phase="run",
        left="completed",
    ),
    CrashPoint(
        "claim-sent",
        "Inside claim_run's transaction (Agent.resume), when the run row is set running again "
        "after the lease was taken: the claim is undone, the dead run stays as it was.",
        phase="resume",
        left="open",
        transaction=0,
        at="UPDATE agent_runs",
        **_PREPARED,
    ),
    CrashPoint(
        "claim-commit-sent",
        "claim_run's transaction with every statement sent, before its COMMIT.",
        phase="resume",
        left="open",
        transaction=0,
        at=COMMIT,
        **_PREPARED,
    ),
    CrashPoint(
        "claim-committed",
        "Right after the claim committed, before the first redone step: the run is held by a "
        "resumer that died; it is recoverable once that lease expires.",
        phase="resume",
        left="open",
        transaction=0,
        at=COMMITTED,
        **_PREPARED,
    ),
    CrashPoint(
        "abandon-status-sent",
        "Inside the abandon transaction (Ledger.recover()), when the run row is "
        "marked interrupted.",
        phase="abandon",
        left="open",
        transaction=0,
        at="UPDATE agent_runs",
        **_PREPARED,
    ),
    CrashPoint(
        "abandon-flush-sent",
        "Inside the abandon transaction, when the run's buffer rows are deleted.",
        phase="abandon",
        left="open",
        transaction=0,
        at="DELETE FROM execution_buffer_rows",
        **_PREPARED,
    ),
    CrashPoint(
        "abandon-commit-sent",
        "The abandon transaction with every statement sent, before its COMMIT.",
        phase="abandon",
        left="open",
        transaction=0,
        at=COMMIT,
        **_PREPARED,
    ),
    CrashPoint(
        "abandon-committed",
        "Right after the abandon transaction committed: the run is interrupted.",
        phase="abandon",
        left="interrupted",
        transaction=0,
        at=COMMITTED,
    ),
)
BY_NAME = {point.name: point for point in POINTS}
PREPARED_BY = BY_NAME["step-committed"]
"""The run point that leaves the run the ``resume`` and ``abandon`` points take over."""


# --- the child's side ---------------------------------------------------------------------------


def kill(mode: str) -> NoReturn:
    """Die at once, the way ``mode`` says."""
    if mode == "exit":
        os._exit(EXIT_STATUS)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL was sent")


class Tripwire:
    """Kills the process at ``point`` of the phase's write transactions on ``engine``."""

    def __init__(self, engine: Engine, point: CrashPoint, mode: str) -> None:
        self.point, self.mode = point, mode
        self.transactions = 0
        self.armed: Any = None  # the connection of the point's transaction, while it is open
        self.committed = False
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        do_commit = engine.dialect.do_commit

        def commit_then_check(dbapi_connection: Any) -> None:
            do_commit(dbapi_connection)
            if self.committed and threading.current_thread() is threading.main_thread():
                kill(self.mode)

        engine.dialect.do_commit = commit_then_check  # type: ignore[method-assign]

    def _begin(self, conn: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # a heartbeat
        if conn.get_execution_options().get("agentledger_write", False):
            if self.transactions == self.point.transaction:
                self.armed = conn
            self.transactions += 1

    def _statement(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        at = self.point.at
        if conn is self.armed and at not in (COMMIT, COMMITTED):
            assert at is not None
            if " ".join(statement.split()).upper().startswith(at.upper()):
                kill(self.mode)

    def _commit(self, conn: Any) -> None:
        if conn is self.armed:
            if self.point.at == COMMIT:
                kill(self.mode)
            self.committed = self.point.at == COMMITTED
            self.armed = None

    def _rollback(self, conn: Any) -> None:
        if conn is self.armed:
            self.armed = None


def crash_point(spec: dict[str, Any]) -> dict[str, Any]:
    """Play ``spec["point"]`` with kill mode ``spec["kill"]``; returns only if never tripped."""
    point, mode = BY_NAME[spec["point"]], spec["kill"]
    side_file = Path(spec["side_file"])
    crash_child.die = lambda: kill(mode)  # the scenario's tool dies the way we say
    with Ledger.open(spec["url"], lease_seconds=spec.get("lease_seconds", 60.0)) as ledger:
        if point.phase == "run":
            plain, _ = build_agent(ledger, side_file=side_file)
            first = plain.run(QUESTION)
            write_json(Path(spec["ack_file"]), summary(first))
            agent, _ = build_agent(ledger, side_file=side_file, tool_crash_step=point.tool_step)
            Tripwire(ledger.engine, point, mode)
            second = agent.run(FOLLOW_UP, first.conversation_id)
            if point.name == "returned":
                write_json(Path(spec["returned_file"]), summary(second))
                kill(mode)
            return {"survived": summary(second)}
        Tripwire(ledger.engine, point, mode)
        if point.phase == "resume":
            agent, _ = build_agent(ledger, side_file=side_file)
            return {"survived": summary(agent.resume(spec["run_id"], stale_after=0))}
        abandoned = ledger.recover(stale_after=0)
        return {"survived": [run.id for run in abandoned]}


def abandon(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """``Ledger.recover(stale_after=...)`` once every sibling is ready."""
    with Ledger.open(spec["url"]) as ledger:
        barrier(spec)
        return [(run.id, run.status) for run in ledger.recover(stale_after=spec.get("stale_after"))]


SCHEMA_WRITE = re.compile(r"\s*(CREATE|ALTER|DROP|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
"""A statement that changes the schema or the rows: what a migration is made of."""


def upgrade(spec: dict[str, Any]) -> dict[str, Any]:
    """``Ledger.open`` (which migrates to the head) once every sibling is ready. With
    ``kill_at`` n, die when the n-th schema write is sent (first touching ``holding`` and
    sleeping ``hold`` seconds with the migration lock held, if given); with ``kill_at``
    "COMMIT", when the migration commits. With ``after``, open only once that file exists."""
    writes: list[str] = []
    kill_at, mode = spec.get("kill_at"), spec.get("kill", "sigkill")

    def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if SCHEMA_WRITE.match(statement):
            writes.append(" ".join(statement.split())[:120])
            if kill_at == len(writes):
                if "holding" in spec:
                    Path(spec["holding"]).touch()
                    time.sleep(spec["hold"])
                kill(mode)

    def on_commit(_conn: Any) -> None:
        if kill_at == COMMIT and writes:
            kill(mode)

    event.listen(Engine, "before_cursor_execute", on_statement)
    event.listen(Engine, "commit", on_commit)
    barrier(spec)
    if "after" in spec:
        wait_until(Path(spec["after"]).exists, CHILD_TIMEOUT, f"{spec['after']} to appear")
    Ledger.open(spec["url"]).close()
    return {"writes": writes}


ROLES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "crash-point": crash_point,
    "resume": crash_child.resume,
    "abandon": abandon,
    "upgrade": upgrade,
}


def play(spec: dict[str, Any]) -> None:
    """Play the spec's role; write ``{"ok": ...}`` or ``{"error": ...}`` to its result file."""
    crash_child.play_role(ROLES, spec)


# --- the parent's side --------------------------------------------------------------------------


def run_forked(spec: dict[str, Any], workdir: Path, name: str) -> Finished:
    """Run ``spec`` in a child forked from the forkserver, to its end (or its kill)."""
    return forked.run(play, spec, workdir, name)


def run_forked_together(specs: dict[str, dict[str, Any]], workdir: Path) -> dict[str, Finished]:
    """Fork a child per spec, let each get ready, release them all at once through the go file
    (``crash_child.barrier``), wait for all (``forked.run_together``)."""
    return forked.run_together(play, specs, workdir)


def expected_status(mode: str) -> int:
    """The exit status a child killed with ``mode`` ends with."""
    return EXIT_STATUS if mode == "exit" else -signal.SIGKILL


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        time.sleep(0.05)

"""The workload of ``bench/statements.py``: the same turns recorded through two handles on one
database, one sending the ledger's statements its own way (A), the other through SQLAlchemy
Core's ``execute`` (B), each turn timed whole, by recorder call, and its statements alone."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Insert, Update, func, select

from agentledger import Agent, AgentBuilder
from agentledger._recording import Recorder
from agentledger.ledger import Ledger
from agentledger.ledger._statements import stamped, statements_for
from agentledger.ledger.tables import LEDGER_TABLES, agent_runs
from agentledger.llm import ScriptedLLM

from ._common import lookup, script

TOOL_STEPS = 3
CALLS_PER_STEP = 2
WARM_UP = 3
"""Turns each way runs first and are not counted: compiled caches, first pages, the pool."""
REPS = {"quick": 20, "default": 200, "full": 600}
"""Timed turns each way, per backend."""
POSTGRES_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
"""A durable server, as in production (the test harness's default is not)."""

WAYS = {
    "A": (
        "the ledger's path: each statement compiled once, sent on the DBAPI cursor (through "
        "`exec_driver_sql` when logging or a cursor or error listener watches)"
    ),
    "B": "SQLAlchemy Core: `conn.execute(statement, row | rows)`, the ledger's own statements",
}
CALLS = ("begin_run", "record_step", "commit_run")
"""The recorder's calls that write a turn: one transaction each (``record_step`` once a step)."""


class Stopwatch:
    """Time spent in the functions it wraps, added up."""

    def __init__(self) -> None:
        self.total = 0.0

    def around(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - started

        return timed


class TimedRecorder:
    """A recorder forwarding every call to the ledger's, timing those that write a turn."""

    def __init__(self, inner: Recorder) -> None:
        self.inner = inner
        self.watches = {name: Stopwatch() for name in CALLS}

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        return self.watches[name].around(found) if name in self.watches else found


def _core_methods(ledger: Ledger) -> dict[str, Callable[..., Any]]:
    """What Core's ``execute`` does for each method of the ledger's compiled statements: the
    same statements with the same rows (stamped as the ledger stamps them on SQLite)."""

    def execute(conn: Connection, statement: Any, row: Mapping[str, Any] | None = None) -> Any:
        row = row or {}
        if isinstance(statement, Insert | Update):
            row = stamped(conn, statement, row)
        return conn.execute(statement, row)

    def execute_many(conn: Connection, statement: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:  # as the ledger's: no rows, no statement
            conn.execute(statement, [stamped(conn, statement, row) for row in rows])

    def select_rows(conn: Connection, statement: Any, row: Any = None) -> list[dict[str, Any]]:
        return [dict(m) for m in conn.execute(statement, row or {}).mappings()]

    return {"execute": execute, "execute_many": execute_many, "select": select_rows}


def watched(ledger: Ledger, way: str) -> Stopwatch:
    """Time the statements of ``ledger`` (one engine: its compiled statements are its own),
    sent its own way (A) or through Core (B)."""
    sql = statements_for(ledger.engine.dialect)
    watch = Stopwatch()
    core = _core_methods(ledger)
    for name in core:
        method = getattr(sql, name) if way == "A" else core[name]
        setattr(sql, name, watch.around(method))
    return watch


@dataclass
class Turn:
    whole: float
    calls: dict[str, float]
    statements: float


@dataclass
class Way:
    """One way of sending the statements: its handle, agent, and the times of its turns."""

    name: str
    ledger: Ledger
    agent: Agent
    recorder: TimedRecorder
    statements: Stopwatch
    conversation_id: str | None = None
    turns: list[Turn] = field(default_factory=list)

    def turn(self) -> Turn:
        before = {name: w.total for name, w in self.recorder.watches.items()}
        statements = self.statements.total
        started = time.perf_counter()
        result = self.agent.run("Look these up.", conversation_id=self.conversation_id)
        whole = time.perf_counter() - started
        assert result.answer == "done", result
        self.conversation_id = result.conversation_id
        calls = {name: w.total - before[name] for name, w in self.recorder.watches.items()}
        return Turn(whole, calls, self.statements.total - statements)


def way(name: str, url: str, synchronous: str, turns: int) -> Way:
    ledger = Ledger.open(url, synchronous=synchronous)  # type: ignore[arg-type]
    statements = watched(ledger, name)
    recorder = TimedRecorder(ledger.recorder)
    llm = ScriptedLLM(script(TOOL_STEPS, CALLS_PER_STEP) * turns)
    builder = AgentBuilder().with_llm(llm).with_tools([lookup]).with_max_steps(None)
    return Way(name, ledger, builder.with_ledger(recorder).build(), recorder, statements)


def measure_backend(url: str, synchronous: str, reps: int) -> list[Way]:
    """``reps`` turns each way, on one conversation each, in a random order each time (a
    rotation would keep each way behind the same neighbour, whose warm caches it inherits)."""
    ways = [way(name, url, synchronous, WARM_UP + reps) for name in WAYS]
    shuffle = random.Random(20260521).shuffle
    try:
        for rep in range(-WARM_UP, reps):
            shuffle(ways)
            for w in ways:
                turn = w.turn()
                if rep >= 0:
                    w.turns.append(turn)
        ways.sort(key=lambda w: w.name)
        check_same_rows(ways)
    finally:
        for w in ways:
            w.ledger.close()
    return ways


def check_same_rows(ways: Sequence[Way]) -> None:
    """Each way recorded as many rows of each table in its conversation, and the ledger finds
    nothing wrong."""
    problems = ways[0].ledger.verify()
    assert not problems, problems[:5]
    counts = []
    with ways[0].ledger.engine.connect() as conn:
        for w in ways:
            runs = select(agent_runs.c.id).where(agent_runs.c.conversation_id == w.conversation_id)
            counts.append(
                [
                    conn.execute(
                        select(func.count()).where(
                            table.c.conversation_id == w.conversation_id
                            if "conversation_id" in table.c
                            else table.c.run_id.in_(runs)
                        )
                    ).scalar()
                    for table in LEDGER_TABLES[1:]
                ]
            )
    assert all(c == counts[0] for c in counts), counts


def ratios(ways: Sequence[Way], part: Callable[[Turn], float]) -> list[float]:
    """B's time over A's, turn by turn (the same repetition)."""
    a, b = ways
    return [part(tb) / part(ta) for ta, tb in zip(a.turns, b.turns, strict=True)]


def median(way: Way, part: Callable[[Turn], float]) -> float:
    return statistics.median(part(turn) for turn in way.turns)

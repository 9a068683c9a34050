"""Section 10: the cost of sending the ledger's statements, its own way against SQLAlchemy Core's.

Recording a turn is a few short write transactions (``begin_run``, a ``record_step`` a step,
``commit_run``) of a handful of small statements each. The ledger compiles each statement once
per engine and sends its SQL text on the transaction's DBAPI cursor, or with
``Connection.exec_driver_sql`` when SQLAlchemy's logging or a listener of its cursor events or
errors watches. Three handles on one database record the same turns through ``Agent.run``, each
on a conversation of its own, timed whole, by recorder call and by statement (:data:`WAYS`).

The one section that reaches into the ledger's private modules: how they send is what it measures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Insert, Update, event, func, select

from agentledger import ScriptedLLM
from agentledger.ledger import Ledger
from agentledger.ledger._statements import stamped, statements_for
from agentledger.ledger.tables import LEDGER_TABLES, agent_runs

from ._common import (
    ANSWER,
    TOOL_STEPS,
    Samples,
    Sizes,
    TimedRecorder,
    as_synchronous,
    builder,
    interleaved,
    postgres,
    script,
    timing,
    us,
)
from ._report import Row, Section

CALLS_PER_STEP, WARM_UP = 2, 3
"""Tool calls a step; turns each way first run untimed (compiled caches, first pages, the pool)."""
REPS = {"quick": 20, "default": 200, "full": 600}
"""Timed turns each way, per backend."""
WAYS = {
    "A": "the ledger's path: each statement compiled once, sent on the DBAPI cursor",
    "B": "SQLAlchemy Core: `conn.execute(statement, row | rows)`, the ledger's own statements",
    "C": "the ledger's path while a (no-op) `before_cursor_execute` listener watches: each "
    "statement through `exec_driver_sql`",
}
CALLS = ("begin_run", "record_step", "commit_run")
"""The recorder's calls that write a turn: one transaction each (``record_step`` once a step)."""
PARTS = {
    "a turn through `Agent.run`": "whole",
    "its `begin_run`": "begin_run",
    f"its {TOOL_STEPS + 1} `record_step`s": "record_step",
    "its `commit_run`": "commit_run",
    "its statements alone": "statements",
}
HEADLINE = "a turn through `Agent.run`"


def _core(conn: Connection, statement: Any, row: Mapping[str, Any] | None = None) -> Any:
    """Core's ``execute`` of a statement with the row the ledger sends (stamped as it stamps)."""
    row = row or {}
    stamps = isinstance(statement, Insert | Update)
    return conn.execute(statement, stamped(conn, statement, row) if stamps else row)


def _core_many(conn: Connection, statement: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:  # as the ledger's: no rows, no statement
        conn.execute(statement, [stamped(conn, statement, row) for row in rows])


def _core_select(conn: Connection, statement: Any, row: Any = None) -> list[dict[str, Any]]:
    return [dict(m) for m in conn.execute(statement, row or {}).mappings()]


CORE: dict[str, Callable[..., Any]] = {
    "execute": _core,
    "execute_many": _core_many,
    "select": _core_select,
}


class Way:
    """One way of sending the statements: its handle, its agent, and the times of its turns."""

    def __init__(self, name: str, url: str, synchronous: str, turns: int) -> None:
        self.name = name
        self.conversation_id: str | None = None
        self.ledger = Ledger.open(url, synchronous=as_synchronous(synchronous))
        self.statements: list[float] = []
        sql = statements_for(self.ledger.engine.dialect)  # this engine's own
        for method, core in CORE.items():
            sent = core if name == "B" else getattr(sql, method)
            setattr(sql, method, timing(sent, self.statements))
        if name == "C":
            event.listen(self.ledger.engine, "before_cursor_execute", lambda *_: None)
        self.recorder = TimedRecorder(self.ledger.recorder, *CALLS)
        llm = ScriptedLLM(script(TOOL_STEPS, CALLS_PER_STEP) * turns)
        self.agent = builder(llm, self.recorder).with_max_steps(None).build()
        self.turns: list[dict[str, float]] = []

    def turn(self) -> float:
        times = {"statements": self.statements, **self.recorder.times}
        before = {part: len(seconds) for part, seconds in times.items()}
        started = time.perf_counter()
        result = self.agent.run("Look these up.", conversation_id=self.conversation_id)
        whole = time.perf_counter() - started
        assert result.answer == ANSWER, result
        self.conversation_id = result.conversation_id
        parts = {part: sum(seconds[before[part] :]) for part, seconds in times.items()}
        self.turns.append({"whole": whole, **parts})
        return whole


def measure_backend(url: str, synchronous: str, reps: int) -> Samples:
    """``reps`` turns each way, in a random order each time; the seconds of each turn's parts,
    by ``"<way> <part>"``. Checked: each way wrote as many rows, and nothing is damaged."""
    ways = [Way(name, url, synchronous, WARM_UP + reps) for name in WAYS]
    try:
        interleaved({w.name: w.turn for w in ways}, reps, WARM_UP, shuffled=True)
        check_same_rows(ways)
    finally:
        for w in ways:
            w.ledger.close()
    return Samples(
        {f"{w.name} {p}": [t[p] for t in w.turns[WARM_UP:]] for w in ways for p in PARTS.values()}
    )


def check_same_rows(ways: Sequence[Way]) -> None:
    """Each way recorded as many rows of each table in its conversation, and the ledger finds
    nothing wrong."""
    problems = ways[0].ledger.verify()
    assert not problems, problems[:5]
    counts = []
    with ways[0].ledger.engine.connect() as conn:
        for w in ways:
            runs = select(agent_runs.c.id).where(agent_runs.c.conversation_id == w.conversation_id)
            of = [
                table.c.conversation_id == w.conversation_id
                if "conversation_id" in table.c
                else table.c.run_id.in_(runs)
                for table in LEDGER_TABLES[1:]
            ]
            counts.append([conn.execute(select(func.count()).where(c)).scalar() for c in of])
    assert all(c == counts[0] for c in counts), counts


@dataclass
class Measured:
    reps: int
    backends: dict[str, Samples] = field(default_factory=dict)
    took: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def measure(reps: int, tmp: Path, *, with_postgres: bool = True) -> Measured:
    measured = Measured(reps)
    backends = [
        (f"SQLite, synchronous={mode}", f"sqlite:///{tmp / f'statements-{mode}.db'}", mode)
        for mode in ("FULL", "NORMAL")
    ]
    with postgres(measured.skipped, wanted=with_postgres) as new_database:
        if new_database is not None:
            for commit in ("on", "off"):
                url = f"{new_database()}?options=-csynchronous_commit%3D{commit}"
                backends.append((f"PostgreSQL, fsync=on, synchronous_commit={commit}", url, "FULL"))
        for title, url, synchronous in backends:
            print(f"  {title}: {reps} turns each way ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            measured.backends[title] = measure_backend(url, synchronous, reps)
            measured.took[title] = time.perf_counter() - started
    return measured


def run(sizes: Sizes, tmp: Path) -> Section:
    print("the ledger's statements against SQLAlchemy Core's ...", file=sys.stderr, flush=True)
    return report(measure(REPS[sizes.name], tmp))


def report(measured: Measured) -> Section:
    rows: list[Row] = []
    for title, samples in measured.backends.items():
        for part, key in PARTS.items():
            rows.append(Row(f"{title}: {part}, A", us(samples.median(f"A {key}"))))
            rows += [
                Row(
                    f"{title}: {part}, {way}/A",
                    ratio=samples.paired(f"{way} {key}", f"A {key}"),
                    headline=way == "B" and part == HEADLINE,
                )
                for way in ("B", "C")
            ]
    took = ", ".join(f"{title} {seconds:.1f} s" for title, seconds in measured.took.items())
    return Section(
        "10. The ledger's statements: compiled once and sent as text, against Core",
        f"The same turns ({TOOL_STEPS} tool-calling steps of {CALLS_PER_STEP} calls with ~1 KB "
        f"results, then the answer) recorded through `Agent.run` by {len(WAYS)} handles on one "
        f"database, {measured.reps} each, interleaved in a random order each time, each on a "
        "conversation of its own (checked: as many rows of each table, and `Ledger.verify()` "
        "finds nothing). Each turn timed whole, by recorder call (a recorder forwarding to the "
        "ledger's), and its statements alone. Ratio cells: the ratio of the medians [the "
        "interquartile range of the per-repetition ratios]. "
        + " ".join(f"{name}: {about}." for name, about in WAYS.items()),
        rows,
        [*measured.skipped, f"The timed turns took: {took}."],
    )

"""The workload of ``bench/statements.py``: a real run captured and replayed, the statement
paths compared (the variants), and the timing of one transaction through each."""

from __future__ import annotations

import contextlib
import copy
import random
import re
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Insert, Update, event, select
from sqlalchemy.sql import ClauseElement

from agentledger import AgentBuilder
from agentledger._values import new_id
from agentledger.ledger import Ledger, _leases, _reads, _runs, _writes
from agentledger.ledger._engine import Connections
from agentledger.ledger._statements import Compiled, Statements, stamped, statements_for
from agentledger.ledger.checksums import sealed
from agentledger.ledger.tables import (
    agent_runs,
    conversation_messages,
    conversations,
    step_executions,
    tool_executions,
)
from agentledger.llm import ScriptedLLM

from ._common import lookup, script

TOOL_STEPS = 3
CALLS_PER_STEP = 2
WARM_UP = 3
"""Repetitions run first and not counted: compiled caches, first pages, the pool."""
REPS = {"quick": 20, "default": 200, "full": 600}
"""Replayed runs per variant and backend; each gives one begin, ``TOOL_STEPS`` steps, one
answer step and one commit."""
POSTGRES_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
"""A durable server, as in production (the test harness's default is not)."""


# --- the workload: a real run, captured ----------------------------------------------------------


@dataclass
class Call:
    """One statement a transaction sends, as the ledger sent it."""

    kind: str  # "execute", "execute_many" or "select" (the methods of Statements)
    statement: ClauseElement
    row: Any  # a dict, or a list of dicts for execute_many
    expect: Any = None  # the rowcount (execute) or the selected max(seq) (select)

    @property
    def label(self) -> str:
        name = _NAMES.get(id(self.statement), type(self.statement).__name__).strip("_").lower()
        return f"{name} x{len(self.row)}" if self.kind == "execute_many" else name


_NAMES = {
    id(value): name
    for module in (_writes, _leases, _runs, _reads)
    for name, value in vars(module).items()
    if isinstance(value, ClauseElement) and name.isupper()
}
"""The ledger's names for its statements (``_INSERT_STEP``, ``_EXTEND_LEASE``...), for labels."""


@dataclass
class Transaction:
    kind: str  # "begin", "step", "answer step", "commit"
    calls: list[Call]


@dataclass
class Template:
    """The write transactions of one recorded run (the second of its conversation: its begin
    takes the lease of a conversation that exists, as most runs do)."""

    conversation_id: str
    transactions: list[Transaction]
    first_seq: int  # the conversation position of the run's user message


def capture(ledger: Ledger) -> Template:
    """Record two runs on one conversation; keep every statement the second one's write
    transactions send through the compiled statements (and check that they send nothing
    else)."""
    builder = AgentBuilder().with_llm(ScriptedLLM(_script() * 2)).with_tools([lookup])
    agent = builder.with_max_steps(None).with_ledger(ledger).build()
    first = agent.run("Look these up.")
    sql = statements_for(ledger.engine.dialect)
    connections = ledger._database.connections
    recorded: list[list[Call]] = []
    current: list[Call] | None = None
    sent = 0

    def recording(kind: str) -> Callable[..., Any]:
        real = getattr(Statements, kind)

        def method(conn: Connection, statement: ClauseElement, row: Any = None) -> Any:
            kept = copy.deepcopy(_as_sent(conn, statement, row))
            out = real(sql, conn, statement, row)
            if current is not None:
                expect = out.rowcount if kind == "execute" else None
                if kind == "select":
                    expect = out[0].get("last")
                current.append(Call(kind, statement, kept, expect))
            return out

        return method

    real_write = connections.write

    @contextlib.contextmanager
    def write() -> Iterator[Connection]:
        nonlocal current
        current = []
        with real_write() as conn:
            yield conn
        recorded.append(current)
        current = None

    def count(*_: Any) -> None:
        nonlocal sent
        if current is not None:
            sent += 1

    event.listen(ledger.engine, "before_cursor_execute", count)
    connections.write = write  # type: ignore[method-assign]
    for kind in ("execute", "execute_many", "select"):
        setattr(sql, kind, recording(kind))
    try:
        agent.run("And again.", conversation_id=first.conversation_id)
    finally:
        del connections.write
        for kind in ("execute", "execute_many", "select"):
            delattr(sql, kind)
        event.remove(ledger.engine, "before_cursor_execute", count)
    recorded = [calls for calls in recorded if calls]
    # Every cursor execution of those transactions (their BEGIN aside) came through the
    # compiled statements: the replay sends all the run's statements.
    compiled = sum(1 for calls in recorded for c in calls if c.row or c.kind != "execute_many")
    # On SQLite each transaction also sends BEGIN IMMEDIATE, and raises the change counter once
    # for the stamp of the rows it writes (every one of these writes some).
    sqlite = ledger.engine.dialect.name == "sqlite"
    begins = stamps = len(recorded) if sqlite else 0
    assert sent == compiled + begins + stamps, (sent, compiled, begins, stamps)
    kinds = ["begin"] + ["step"] * TOOL_STEPS + ["answer step", "commit"]
    assert len(recorded) == len(kinds), [[c.label for c in calls] for calls in recorded]
    selected = [c for calls in recorded for c in calls if c.kind == "select"]
    first_seq = selected[0].expect + 1
    return Template(
        first.conversation_id,
        [Transaction(k, calls) for k, calls in zip(kinds, recorded, strict=True)],
        first_seq,
    )


def _as_sent(conn: Connection, statement: ClauseElement, row: Any) -> Any:
    """A call's row (or rows) as the ledger sends them: with the transaction's change stamp,
    where it writes a stamped table on SQLite (a replay sends its own transaction's)."""
    if not isinstance(statement, Insert | Update) or row is None:
        return row
    if isinstance(row, list):
        return [stamped(conn, statement, r) for r in row]
    return stamped(conn, statement, row)


def _script() -> list[Any]:
    return script(TOOL_STEPS, CALLS_PER_STEP)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}")


def replay_of(template: Template, conversation_id: str, first_seq: int) -> list[Transaction]:
    """The template's run again, on ``conversation_id`` at position ``first_seq``: every id
    made anew (consistently: a step's tool rows name the new step), conversation positions
    moved, checksums sealed again; timestamps, payloads and everything else as recorded."""
    ids = {template.conversation_id: conversation_id}

    def fresh(value: Any) -> Any:
        if isinstance(value, str) and _UUID.fullmatch(value):
            if value not in ids:
                ids[value] = new_id()
            return ids[value]
        return value

    def redo(statement: ClauseElement, row: Mapping[str, Any]) -> dict[str, Any]:
        new = {key: fresh(value) for key, value in row.items()}
        if isinstance(statement, Insert):
            if statement.table is conversation_messages:
                new["seq"] = first_seq + new["seq"] - template.first_seq
            if "checksum" in new:
                sealed(statement.table, new)  # type: ignore[arg-type]
        return new

    run_row: dict[str, Any] = {}
    out = []
    for transaction in template.transactions:
        calls = []
        for call in transaction.calls:
            statement = call.statement
            if call.kind == "execute_many":
                row: Any = [redo(statement, r) for r in call.row]
            else:
                row = redo(statement, call.row or {})
            table = getattr(statement, "table", None)
            if isinstance(statement, Insert) and table is agent_runs:
                run_row = row
            if isinstance(statement, Update) and table is agent_runs and "checksum" in row:
                # the run's end, sealed over the whole row as end_run() does
                values = {k: v for k, v in row.items() if k not in ("checksum", "run_id")}
                row["checksum"] = sealed(agent_runs, {**run_row, **values})["checksum"]
            expect = call.expect
            if call.kind == "select":  # max(seq) before the run: None in a new conversation
                expect = first_seq - 1 if first_seq > 0 else None
            calls.append(Call(call.kind, statement, row, expect))
        out.append(Transaction(transaction.kind, calls))
    return out


def messages_written(run: list[Transaction]) -> int:
    return sum(
        len(c.row) if c.kind == "execute_many" else 1
        for t in run
        for c in t.calls
        if isinstance(c.statement, Insert) and c.statement.table is conversation_messages
    )


# --- the variants --------------------------------------------------------------------------------


class Variant:
    """How a statement call of the ledger is sent. ``execute`` returns the rowcount, ``select``
    the rows as dicts."""

    name = ""
    about = ""

    def __init__(self, dialect: Any) -> None:
        self.sql = Statements(dialect)  # compiled forms of its own, for B, C and D

    def execute(self, conn: Connection, statement: Any, row: dict[str, Any]) -> int:
        raise NotImplementedError

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def select(self, conn: Connection, statement: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def compiled(self, statement: Any, row: Mapping[str, Any]) -> Compiled:
        keys = tuple(row) if isinstance(statement, Insert | Update) else ()
        return self.sql.of(statement, keys)


class CompiledPath(Variant):
    name = "A"
    about = (
        "the ledger's path: `statements_for(dialect).execute / execute_many / select`, "
        "`run_on_cursor` on the driver's cursor"
    )

    def __init__(self, dialect: Any) -> None:
        self.sql = statements_for(dialect)  # the ledger's own

    def execute(self, conn: Connection, statement: Any, row: dict[str, Any]) -> int:
        return int(self.sql.execute(conn, statement, row).rowcount)

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        self.sql.execute_many(conn, statement, rows)

    def select(self, conn: Connection, statement: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
        return self.sql.select(conn, statement, row)


class Core(Variant):
    name = "B"
    about = "SQLAlchemy Core: `conn.execute(statement, row | rows)`, the ledger's statements"

    def execute(self, conn: Connection, statement: Any, row: dict[str, Any]) -> int:
        return int(conn.execute(statement, stamped(conn, statement, row)).rowcount)

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        if rows:  # as Statements.execute_many: no rows, no statement
            conn.execute(statement, [stamped(conn, statement, row) for row in rows])

    def select(self, conn: Connection, statement: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(m) for m in conn.execute(statement, row).mappings()]


def _driver_params(compiled: Compiled, row: Mapping[str, Any]) -> Any:
    params = compiled.params(row)
    return tuple(params) if compiled.positional else params  # exec_driver_sql: a tuple or dict


class DriverSql(Variant):
    name = "C"
    about = (
        "`conn.exec_driver_sql(sql, params)`, the SQL and the binding of the ledger's `Compiled`"
    )

    def execute(self, conn: Connection, statement: Any, row: dict[str, Any]) -> int:
        row = stamped(conn, statement, row)
        compiled = self.compiled(statement, row)
        return int(conn.exec_driver_sql(compiled.sql, _driver_params(compiled, row)).rowcount)

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        if rows:
            rows = [stamped(conn, statement, row) for row in rows]
            compiled = self.compiled(statement, rows[0])
            conn.exec_driver_sql(compiled.sql, [_driver_params(compiled, r) for r in rows])

    def select(self, conn: Connection, statement: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
        compiled = self.sql.of(statement)
        result = conn.exec_driver_sql(compiled.sql, _driver_params(compiled, row))
        rows = compiled.rows(result.cursor)
        result.close()
        return rows


class CursorHelper(DriverSql):
    name = "D"
    about = (
        "SQLAlchemy's private `Connection._cursor_execute(cursor, sql, params)` for single "
        "statements; executemany as C"
    )

    def _send(self, conn: Connection, compiled: Compiled, row: Mapping[str, Any]) -> Any:
        dbapi_connection = conn.connection.dbapi_connection
        assert dbapi_connection is not None
        cursor = dbapi_connection.cursor()
        conn._cursor_execute(cursor, compiled.sql, compiled.params(row), None)
        return cursor

    def execute(self, conn: Connection, statement: Any, row: dict[str, Any]) -> int:
        row = stamped(conn, statement, row)
        return int(self._send(conn, self.compiled(statement, row), row).rowcount)

    def select(self, conn: Connection, statement: Any, row: dict[str, Any]) -> list[dict[str, Any]]:
        compiled = self.sql.of(statement)
        return compiled.rows(self._send(conn, compiled, row))


VARIANTS: tuple[type[Variant], ...] = (CompiledPath, Core, DriverSql, CursorHelper)


# --- timing --------------------------------------------------------------------------------------


@dataclass
class Timing:
    whole: float  # connection taken, BEGIN ... COMMIT, connection given back
    statements: float  # the statements alone, inside the transaction
    calls: list[float]


def run_transaction(connections: Connections, variant: Variant, transaction: Transaction) -> Timing:
    """One transaction, timed; its results checked afterwards (rowcounts, the selected max)."""
    outcomes: list[Any] = []
    per_call: list[float] = []
    clock = time.perf_counter
    started = clock()
    with connections.write() as conn:
        inside = clock()
        for call in transaction.calls:
            before = clock()
            outcomes.append(getattr(variant, call.kind)(conn, call.statement, call.row))
            per_call.append(clock() - before)
        done = clock()
    ended = clock()
    for call, outcome in zip(transaction.calls, outcomes, strict=True):
        if call.kind == "execute" and not isinstance(call.statement, Insert):
            # (the ledger reads the rowcount of its updates; an insert's is -1 through Core
            # on psycopg, whose cursor SQLAlchemy has closed by then)
            assert outcome == call.expect, (variant.name, call.label, outcome, call.expect)
        elif call.kind == "select":
            assert outcome[0]["last"] == call.expect, (variant.name, call.label, outcome)
    return Timing(ended - started, done - inside, per_call)


@dataclass
class Timings:
    """Timings by variant, then by (repetition, transaction index)."""

    kinds: list[str]
    labels: list[list[str]]
    times: dict[str, dict[tuple[int, int], Timing]] = field(default_factory=dict)

    def keys(self, group: str) -> list[tuple[int, int]]:
        return [k for k in self.times["A"] if self.kinds[k[1]] == group]

    def ratios(self, name: str, group: str, part: str = "whole") -> list[float]:
        """``name``'s time over A's, paired (same repetition and transaction)."""
        base, other = self.times["A"], self.times[name]
        return [getattr(other[k], part) / getattr(base[k], part) for k in self.keys(group)]

    def median(self, group: str, part: str = "whole", name: str = "A") -> float:
        return statistics.median(
            float(getattr(self.times[name][k], part)) for k in self.keys(group)
        )


def measure_backend(ledger: Ledger, template: Template, reps: int) -> Timings:
    dialect = ledger.engine.dialect
    variants = [cls(dialect) for cls in VARIANTS]
    connections = ledger._database.connections
    position: dict[str, tuple[str, int]] = {  # each variant's conversation, its next seq
        v.name: (ledger.create_conversation(title=f"variant {v.name}").id, 0) for v in variants
    }
    timings = Timings(
        [t.kind for t in template.transactions],
        [[c.label for c in t.calls] for t in template.transactions],
        {v.name: {} for v in variants},
    )
    shuffle = random.Random(20260521).shuffle
    for rep in range(-WARM_UP, reps):
        runs = {}
        for v in variants:  # the rows are made before the time starts
            conversation_id, seq = position[v.name]
            runs[v.name] = replay_of(template, conversation_id, seq)
            position[v.name] = (conversation_id, seq + messages_written(runs[v.name]))
        for index in range(len(template.transactions)):
            order = list(variants)
            shuffle(order)  # a random order each time: no variant always follows the same one
            for v in order:
                timing = run_transaction(connections, v, runs[v.name][index])
                if rep >= 0:
                    timings.times[v.name][(rep, index)] = timing
    return timings


_STAMPS = ("checksum", "change_seq")
"""Columns that differ between variants writing the same rows: ids aside, the checksums (over
the ids) and the database's change stamps."""


def check_same_rows(ledger: Ledger, names: Sequence[str]) -> None:
    """Every variant wrote the same rows, ids aside; and the ledger finds nothing wrong."""
    problems = ledger.verify()
    assert not problems, problems[:5]

    def blank(row: Mapping[Any, Any]) -> tuple[Any, ...]:
        return tuple(
            (k, None if (isinstance(v, str) and _UUID.fullmatch(v)) or k in _STAMPS else repr(v))
            for k, v in sorted(row.items())
        )

    by_variant: dict[str, list[Any]] = {}
    with ledger.engine.connect() as conn:
        for name in names:
            (conversation,) = conn.execute(
                select(conversations).where(conversations.c.title == f"variant {name}")
            ).mappings()
            runs = select(agent_runs.c.id).where(agent_runs.c.conversation_id == conversation["id"])
            rows: list[Any] = [conversation["version"], conversation["lease_holder"]]
            for table, where in (
                (
                    conversation_messages,
                    conversation_messages.c.conversation_id == conversation["id"],
                ),
                (agent_runs, agent_runs.c.conversation_id == conversation["id"]),
                (step_executions, step_executions.c.run_id.in_(runs)),
                (tool_executions, tool_executions.c.run_id.in_(runs)),
            ):
                rows.append(
                    sorted(blank(r) for r in conn.execute(select(table).where(where)).mappings())
                )
            by_variant[name] = rows
    first = by_variant[names[0]]
    for name in names[1:]:
        assert by_variant[name] == first, f"variant {name} wrote different rows than {names[0]}"

"""The cost of sending the ledger's statements: its compiled path against SQLAlchemy's own.

Recording a run is a sequence of short write transactions (``begin_run``, one ``record_step``
per step, ``commit_run``) of a handful of small statements each. The ledger compiles each
statement once per dialect and runs it on the driver's cursor of the SQLAlchemy ``Connection``
(``agentledger.ledger._statements``: ``statements_for(dialect)``, ``run_on_cursor``), doing by
hand what ``Connection.execute`` does around the cursor (the cursor listeners, statement
logging, ``handle_error``). This benchmark measures what that saves against SQLAlchemy's own
paths, each variant sending the same statements with the same parameters:

``A``  the ledger's path: ``Statements.execute / execute_many / select`` (``run_on_cursor``).
``B``  SQLAlchemy Core: ``conn.execute(statement, row)``, ``conn.execute(insert, rows)``
       (executemany), the statements being the ledger's own module-level constants, built
       once (SQLAlchemy's compiled cache and memoized cache keys doing their job).
``C``  ``conn.exec_driver_sql(sql, params)``: the SQL text compiled once and the parameters
       bound by the ledger's ``Compiled``; SQLAlchemy does events, logging, errors and the
       result, but no compilation.
``D``  SQLAlchemy's private raw-cursor helper, ``Connection._cursor_execute`` (events,
       logging, ``handle_error``; no execution context, no result object) for single
       statements; it has no executemany form, so ``execute_many`` goes through
       ``exec_driver_sql``. What ``A`` would be if it leant on that helper.

The rows are real: one ``Agent.run`` (a scripted model, ``TOOL_STEPS`` tool-calling steps of
``CALLS_PER_STEP`` calls with ~1 KB results, then an answer) is recorded on the ledger, and every
statement its write transactions send through the compiled statements is captured with its
parameters. Each repetition replays that run (begin, steps, answer step, commit) on a
conversation of each variant's own, with fresh ids, positions moved on and checksums sealed
again, so that every variant writes the same rows; at the end ``Ledger.verify()`` must find
nothing wrong and the variants' rows must be equal but for ids.

Timing: the variants are interleaved at the level of the transaction (transaction ``t`` of
repetition ``r`` runs for every variant in turn, in a random order each time: a rotation would
keep every variant behind the same neighbour, whose warm caches it would inherit), through the
ledger's own ``Connections.write()``. For each transaction: the whole of it (connection taken,
BEGIN ... COMMIT, connection given back), the statements alone, and each statement call. Ratios
are paired: a variant's time over ``A``'s in the same repetition and transaction; the tables
give the median and the interquartile range of those ratios.

Backends: a SQLite file (WAL) with ``synchronous=FULL`` and ``NORMAL``; PostgreSQL (psycopg 3)
when ``tests/support/postgres.py`` can start a throwaway server (``fsync=on``,
``synchronous_commit`` ``on`` and ``off``), skipped with the reason otherwise.

Visibility, for every variant: do ``echo=True`` and a handler on the ``sqlalchemy.engine``
logger at INFO show every statement sent, also when the logger is set after the ledger's first
transaction (SQLite keeps that connection open); is ``BEGIN IMMEDIATE`` logged; does a
``handle_error`` listener see a failing statement (a primary key violation), and what is raised;
do ``before/after_cursor_execute`` fire. On PostgreSQL, also a lost connection (its backend
terminated between two statements): is it invalidated, does ``handle_error`` say so.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import logging
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import Connection, Insert, Update, event, exc, select
from sqlalchemy.sql import ClauseElement

from agentledger import AgentBuilder
from agentledger.ledger import Ledger, _leases, _reads, _runs, _writes
from agentledger.ledger._engine import Connections, EngineSettings, make_engine
from agentledger.ledger._statements import Compiled, Statements, statements_for
from agentledger.ledger.checksums import sealed
from agentledger.ledger.tables import (
    agent_runs,
    conversation_messages,
    conversations,
    step_executions,
    tool_executions,
)
from agentledger.llm import ScriptedLLM
from agentledger.values import new_id

from ._common import Sizes, lookup, script, us
from ._report import Row, Section
from ._versions import REPOSITORY

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
            kept = copy.deepcopy(row)
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
    begins = len(recorded) if ledger.engine.dialect.name == "sqlite" else 0  # BEGIN IMMEDIATE
    assert sent == compiled + begins, (sent, compiled, begins)
    kinds = ["begin"] + ["step"] * TOOL_STEPS + ["answer step", "commit"]
    assert len(recorded) == len(kinds), [[c.label for c in calls] for calls in recorded]
    selected = [c for calls in recorded for c in calls if c.kind == "select"]
    first_seq = selected[0].expect + 1
    return Template(
        first.conversation_id,
        [Transaction(k, calls) for k, calls in zip(kinds, recorded, strict=True)],
        first_seq,
    )


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
        return int(conn.execute(statement, row).rowcount)

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        if rows:  # as Statements.execute_many: no rows, no statement
            conn.execute(statement, rows)

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
        compiled = self.compiled(statement, row)
        return int(conn.exec_driver_sql(compiled.sql, _driver_params(compiled, row)).rowcount)

    def execute_many(self, conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> None:
        if rows:
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


def check_same_rows(ledger: Ledger, names: Sequence[str]) -> None:
    """Every variant wrote the same rows, ids aside; and the ledger finds nothing wrong."""
    problems = ledger.verify()
    assert not problems, problems[:5]

    def blank(row: Mapping[Any, Any]) -> tuple[Any, ...]:
        return tuple(
            (k, None if (isinstance(v, str) and _UUID.fullmatch(v)) or k == "checksum" else repr(v))
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


# --- visibility: logging, handle_error, cursor listeners -----------------------------------------


@dataclass
class Seen:
    echo: str = ""
    logger: str = ""
    late: str = ""
    begin_logged: str = ""
    handle_error: str = ""
    raised: str = ""
    cursor_events: str = ""
    lost_connection: str = ""

    def shows_everything(self) -> bool:
        """Every statement logged (echo, the logger, the logger set late), BEGIN IMMEDIATE
        logged where there is one, ``handle_error`` called, every cursor event fired, a lost
        connection invalidated and said so."""
        counts = [self.echo, self.logger, self.late, self.begin_logged]
        full = all(_all_of(c) for c in counts if c != "n/a")
        events = all(_all_of(part.split()[0]) for part in self.cursor_events.split(", "))
        lost = not self.lost_connection or (
            "invalidated=True" in self.lost_connection
            and "is_disconnect=True" in self.lost_connection
        )
        return full and events and lost and self.handle_error.startswith("yes")


def _all_of(count: str) -> bool:
    """``"9/9"``: all of them."""
    done, _, of = count.split(" ")[0].partition("/")
    return bool(of) and done == of and done != "0"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _norm(sql: str) -> str:
    return " ".join(sql.split())


@contextlib.contextmanager
def _engine_logging(engine: Any, how: str) -> Iterator[_Records]:
    """Statement logging on, as ``create_engine(echo=True)`` does (``engine.echo = True``: the
    same echo property) or as an application does (a handler, the ``sqlalchemy.engine``
    logger at INFO); the records collected; everything put back afterwards."""
    logger = logging.getLogger("sqlalchemy.engine")
    records = _Records()
    logger.addHandler(records)
    saved_level = logger.level
    stdout = io.StringIO()  # echo's own handler prints to sys.stdout: keep the report clean
    try:
        with contextlib.redirect_stdout(stdout):
            if how == "echo":
                engine.echo = True
            else:
                logger.setLevel(logging.INFO)
            yield records
    finally:
        if how == "echo":
            engine.echo = False
            for name in ("sqlalchemy", "sqlalchemy.engine.Engine"):
                for handler in list(logging.getLogger(name).handlers):
                    if isinstance(handler, logging.StreamHandler) and handler.stream is stdout:
                        logging.getLogger(name).removeHandler(handler)
        logger.setLevel(saved_level)
        logger.removeHandler(records)


class _Probe:
    """One variant on a fresh engine over the benchmark's database (logging must be set before
    an engine's connections exist, as SQLAlchemy requires)."""

    def __init__(self, url: str, settings: EngineSettings, variant_cls: type[Variant]) -> None:
        self.engine = make_engine(url, settings)
        self.variant = variant_cls(self.engine.dialect)
        self.connections = Connections(self.engine)

    def run(self, transaction: Transaction) -> None:
        run_transaction(self.connections, self.variant, transaction)

    def sent_sql(self, transaction: Transaction) -> list[str]:
        """The statements a transaction sends (an empty executemany sends nothing)."""
        out = []
        for call in transaction.calls:
            if call.kind == "execute_many" and not call.row:
                continue
            first = call.row[0] if call.kind == "execute_many" else call.row
            compiled = (
                self.variant.compiled(call.statement, first)
                if call.kind != "select"
                else self.variant.sql.of(call.statement)
            )
            out.append(_norm(compiled.sql))
        return out

    def close(self) -> None:
        self.connections.close()
        self.engine.dispose()


def _shown(expected: list[str], records: _Records) -> str:
    logged = {_norm(m) for m in records.messages}
    return f"{sum(1 for sql in expected if sql in logged)}/{len(expected)}"


def visibility(
    url: str, settings: EngineSettings, template: Template, variant_cls: type[Variant]
) -> Seen:
    """The experiments of one variant, each on a fresh engine."""
    seen = Seen()
    with Ledger.open(url, synchronous=settings.synchronous) as opened:
        conversation_ids = [
            opened.create_conversation(title=f"visibility {variant_cls.name} {n}").id
            for n in range(4)
        ]
    runs = [replay_of(template, conversation_id, 0) for conversation_id in conversation_ids]
    _logging(seen, url, settings, variant_cls, runs)
    _late_logging(seen, url, settings, variant_cls, runs[3])
    _errors(seen, url, settings, variant_cls, runs[2])
    return seen


def _logging(
    seen: Seen,
    url: str,
    settings: EngineSettings,
    variant_cls: type[Variant],
    runs: list[list[Transaction]],
) -> None:
    """echo=True, then a handler on the sqlalchemy.engine logger: the begin and the first step
    (every kind of statement call)."""
    for how, run in zip(("echo", "logger"), runs, strict=False):
        probe = _Probe(url, settings, variant_cls)
        expected: list[str] = []
        with _engine_logging(probe.engine, how) as records:
            for transaction in run[:2]:
                probe.run(transaction)
                expected += probe.sent_sql(transaction)
        if how == "echo":
            seen.echo = _shown(expected, records)
            if probe.engine.dialect.name == "sqlite":
                begins = sum(1 for m in records.messages if m.startswith("BEGIN IMMEDIATE"))
                seen.begin_logged = f"{begins}/2" if begins else "0/2 (only 'BEGIN (implicit)')"
            else:
                seen.begin_logged = "n/a"
        else:
            seen.logger = _shown(expected, records)
        probe.close()


def _late_logging(
    seen: Seen, url: str, settings: EngineSettings, variant_cls: type[Variant], run: list[Any]
) -> None:
    """The logger set at INFO after the ledger's first transaction: on SQLite the ledger keeps
    that transaction's connection open for the next one."""
    probe = _Probe(url, settings, variant_cls)
    probe.run(run[0])
    with _engine_logging(probe.engine, "logger") as records:
        probe.run(run[1])
    seen.late = _shown(probe.sent_sql(run[1]), records)
    probe.close()


def _errors(
    seen: Seen, url: str, settings: EngineSettings, variant_cls: type[Variant], run: list[Any]
) -> None:
    """handle_error and the cursor listeners: the begin and a step, then the step again (its
    rows are in: a primary key violation); on PostgreSQL, a lost connection."""
    probe = _Probe(url, settings, variant_cls)
    errors: list[Any] = []
    before: list[str] = []
    after: list[str] = []
    engine = probe.engine
    event.listen(engine, "handle_error", lambda ctx: errors.append(ctx))
    event.listen(engine, "before_cursor_execute", lambda c, cur, sql, *a: before.append(_norm(sql)))
    event.listen(engine, "after_cursor_execute", lambda c, cur, sql, *a: after.append(_norm(sql)))
    expected = []
    for transaction in run[:2]:
        probe.run(transaction)
        expected += probe.sent_sql(transaction)
    fired_before = sum(1 for sql in expected if sql in before)
    fired_after = sum(1 for sql in expected if sql in after)
    seen.cursor_events = (
        f"{fired_before}/{len(expected)} before, {fired_after}/{len(expected)} after"
    )
    try:
        probe.run(run[1])
    except Exception as raised:
        seen.raised = f"{type(raised).__module__.split('.')[0]}.{type(raised).__name__}"
    else:
        seen.raised = "nothing raised?"
    if errors:
        ctx = errors[0]
        statement = _norm(ctx.statement or "").split(" (")[0]
        seen.handle_error = (
            f"yes: {statement[:32]}…, {type(ctx.original_exception).__name__}"
            f"{', no execution context' if ctx.execution_context is None else ''}"
        )
    else:
        seen.handle_error = "no"
    if engine.dialect.name == "postgresql":
        seen.lost_connection = _lost_connection(probe, run, errors)
    probe.close()


def _lost_connection(probe: _Probe, run: list[Transaction], errors: list[Any]) -> str:
    """PostgreSQL: the server ends our session between two statements of a transaction."""
    errors.clear()
    step = [t for t in run if t.kind == "step"][1]
    variant = probe.variant
    try:
        with probe.connections.write() as conn:
            first = step.calls[0]
            getattr(variant, first.kind)(conn, first.statement, first.row)
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with probe.engine.connect() as killer:
                killer.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
                killer.commit()
            time.sleep(0.05)
            second = step.calls[1]
            getattr(variant, second.kind)(conn, second.statement, second.row)
    except exc.DBAPIError as raised:
        invalidated = raised.connection_invalidated
        listener = (
            f"handle_error is_disconnect={errors[0].is_disconnect}"
            if errors
            else "handle_error not called"
        )
        return f"{type(raised).__name__}, invalidated={invalidated}, {listener}"
    except Exception as raised:
        return f"{type(raised).__name__} (not a DBAPIError)"
    return "no error?"


# --- backends ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    title: str
    url: str
    synchronous: str = "FULL"
    visibility: bool = False
    """Whether the visibility experiments run here: they depend on the database, not on its
    durability setting, so once per database is enough."""

    @property
    def database(self) -> str:
        return "PostgreSQL" if self.url.startswith("postgresql") else "SQLite"


def postgres_harness() -> tuple[ModuleType | None, str]:
    """``tests/support/postgres.py`` of the repository ``bench/`` sits in, loaded by its path
    (it imports nothing but the standard library, and psycopg when used); or None, and why."""
    path = REPOSITORY / "tests" / "support" / "postgres.py"
    if not path.is_file():
        return None, f"no {path.relative_to(REPOSITORY)} next to bench/"
    spec = importlib.util.spec_from_file_location("bench_postgres_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, ""


@contextlib.contextmanager
def postgres_backends(skipped: list[str]) -> Iterator[list[Backend]]:
    """Two databases on a throwaway server (``synchronous_commit`` on and off), stopped and
    removed afterwards; none, with the reason in ``skipped``, when no server can start."""
    harness, why = postgres_harness()
    server = None
    if harness is not None:
        try:
            server = harness.PostgresServer(settings=POSTGRES_SETTINGS).start()
        except Exception as problem:
            why = f"{type(problem).__name__}: {' '.join(str(problem).split())[:200]}"
    if server is None:
        skipped.append(f"PostgreSQL: skipped, no throwaway server could be started ({why}).")
        yield []
        return
    try:
        backends = []
        for commit in ("on", "off"):
            url = server.create_database("agentledger_bench")
            url += f"?options=-csynchronous_commit%3D{commit}"
            title = f"PostgreSQL, fsync=on, synchronous_commit={commit}"
            backends.append(Backend(title, url, visibility=commit == "on"))
        yield backends
    finally:
        server.stop()


def _check_server(ledger: Ledger, backend: Backend) -> None:
    """The server runs with the settings the title says."""
    with ledger.engine.connect() as conn:
        commit = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
        fsync = conn.exec_driver_sql("SHOW fsync").scalar()
    assert f"synchronous_commit={commit}" in backend.title, (backend.title, commit)
    assert f"fsync={fsync}" in backend.title, (backend.title, fsync)


@dataclass
class Measured:
    reps: int
    timings: dict[str, Timings] = field(default_factory=dict)
    """By backend title."""
    took: dict[str, float] = field(default_factory=dict)
    seen: dict[str, dict[str, Seen]] = field(default_factory=dict)
    """By database (SQLite, PostgreSQL), then by variant."""
    skipped: list[str] = field(default_factory=list)


def measure_one(backend: Backend, reps: int, measured: Measured) -> None:
    print(f"  {backend.title}: {reps} repetitions ...", file=sys.stderr, flush=True)
    synchronous = backend.synchronous
    with Ledger.open(backend.url, synchronous=synchronous) as ledger:  # type: ignore[arg-type]
        if backend.database == "PostgreSQL":
            _check_server(ledger, backend)
        template = capture(ledger)
        started = time.perf_counter()
        timings = measure_backend(ledger, template, reps)
        measured.took[backend.title] = time.perf_counter() - started
        check_same_rows(ledger, list(timings.times))
    measured.timings[backend.title] = timings
    if backend.visibility:
        settings = EngineSettings(synchronous=synchronous)  # type: ignore[arg-type]
        measured.seen[backend.database] = {
            cls.name: visibility(backend.url, settings, template, cls) for cls in VARIANTS
        }


def measure(reps: int, tmp: Path, *, postgres: bool = True) -> Measured:
    measured = Measured(reps)
    backends = [
        Backend(
            f"SQLite, synchronous={mode}",
            f"sqlite:///{tmp / f'statements-{mode.lower()}.db'}",
            mode,
            visibility=mode == "FULL",
        )
        for mode in ("FULL", "NORMAL")
    ]
    with contextlib.ExitStack() as stack:
        if postgres:
            backends += stack.enter_context(postgres_backends(measured.skipped))
        else:
            measured.skipped.append("PostgreSQL: not measured in this run.")
        for backend in backends:
            measure_one(backend, reps, measured)
    return measured


# --- the report ----------------------------------------------------------------------------------


def run(sizes: Sizes, tmp: Path) -> Section:
    reps = REPS[sizes.name]
    print("the ledger's statements against SQLAlchemy's paths ...", file=sys.stderr, flush=True)
    return report(measure(reps, tmp))


def _iqr(values: Sequence[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q2:.2f}x [{q1:.2f}–{q3:.2f}]"


OTHERS = ("B", "C", "D")
GROUPS = ("step", "begin", "commit", "answer step")
SHORT = {"B": "Core `execute`", "C": "`exec_driver_sql`", "D": "`_cursor_execute`"}


def report(measured: Measured) -> Section:
    rows: list[Row] = []
    for title, timings in measured.timings.items():
        rows.append(Row(f"{title}: a step transaction, A (whole)", us(timings.median("step"))))
        rows += [
            Row(
                f"{title}: a step transaction, {name}/A ({SHORT[name]})",
                "",
                _iqr(timings.ratios(name, "step")),
                headline=name == "B",
            )
            for name in OTHERS
        ]
        rows.append(
            Row(
                f"{title}: a step's statements alone, B/A",
                "",
                _iqr(timings.ratios("B", "step", "statements")),
            )
        )
    details: list[str] = []
    for title, timings in measured.timings.items():
        details += _backend_details(title, timings, measured)
    if measured.seen:
        details += _visibility_table(measured.seen)
    return Section(
        title="10. The ledger's statements: the compiled path against SQLAlchemy's",
        about=(
            "The statements of one recorded run (begin, 3 tool-calling steps of 2 calls with "
            "~1 KB results, the answer step, commit), captured with their parameters, replayed "
            f"{measured.reps} times by each way of sending them, on a conversation of each "
            "variant's own (fresh ids, checksums sealed again; checked: `Ledger.verify()` finds "
            "nothing and the variants wrote equal rows). Interleaved per transaction, in a "
            "random order each time, through the ledger's own `Connections.write()`. Ratios: "
            "the median of the paired ratios to A (same repetition and transaction) "
            "[interquartile range]. Whole = connection taken, BEGIN ... COMMIT, connection "
            "given back. " + " ".join(f"{cls.name}: {cls.about}." for cls in VARIANTS)
        ),
        rows=rows,
        notes=_notes(measured),
        details=details,
    )


def _notes(measured: Measured) -> list[str]:
    notes = list(measured.skipped)
    took = ", ".join(f"{title} {seconds:.1f} s" for title, seconds in measured.took.items())
    notes.append(f"The timed replays took: {took}.")
    shown = [db for db, by_variant in measured.seen.items() if by_variant["A"].shows_everything()]
    hidden = [db for db in measured.seen if db not in shown]
    if shown:
        notes.append(
            f"Visibility ({' and '.join(shown)}): A shows everything that B, SQLAlchemy's own "
            "`execute`, shows: every statement to `echo=True` and to the `sqlalchemy.engine` "
            "logger at INFO (also when the logger is set after the handle's first transaction), "
            "`BEGIN IMMEDIATE` on SQLite, a failing statement to `handle_error` (with no "
            "execution context, as `_cursor_execute` gives it), every cursor event, and on "
            "PostgreSQL a lost connection invalidated with `handle_error` told it is a "
            "disconnect: the table below."
        )
    if hidden:
        notes.append(
            f"Visibility ({' and '.join(hidden)}): A does NOT show everything: see the table."
        )
    return notes


def _backend_details(title: str, timings: Timings, measured: Measured) -> list[str]:
    lines = [f"### {title}", ""]
    lines += ["| transaction | part | A median | " + " | ".join(f"{n}/A" for n in OTHERS) + " |"]
    lines.append("|---|---|---:|" + "---:|" * len(OTHERS))
    for group in GROUPS:
        for part in ("whole", "statements"):
            cells = [_iqr(timings.ratios(n, group, part)) for n in OTHERS]
            lines.append(
                f"| {group} | {part} | {us(timings.median(group, part))} | "
                + " | ".join(cells)
                + " |"
            )
        whole = timings.median(group)
        share = timings.median(group, "statements") / whole
        extra = [
            statistics.median(
                timings.times[n][k].whole - timings.times["A"][k].whole for k in timings.keys(group)
            )
            for n in OTHERS
        ]
        lines.append(
            f"| {group} | statements / whole (A); the others: time added | {share:.0%} | "
            + " | ".join(f"{e * 1e6:+,.0f} µs ({e / whole:+.0%})" for e in extra)
            + " |"
        )
    lines += ["", "Per statement call (inside the transaction):", ""]
    lines += ["| statement | n | A median | " + " | ".join(f"{n}/A" for n in OTHERS) + " |"]
    lines.append("|---|---:|---:|" + "---:|" * len(OTHERS))
    base = timings.times["A"]
    labelled: dict[str, list[tuple[tuple[int, int], int]]] = {}
    for key in base:
        for position, label in enumerate(timings.labels[key[1]]):
            labelled.setdefault(label, []).append((key, position))
    for label, where in labelled.items():
        if label.endswith(" x0"):
            continue  # an executemany of no rows sends nothing
        a = [base[k].calls[p] for k, p in where]
        cells = [
            _iqr([timings.times[n][k].calls[p] / base[k].calls[p] for k, p in where])
            for n in OTHERS
        ]
        lines.append(
            f"| {label} | {len(where)} | {us(statistics.median(a))} | " + " | ".join(cells) + " |"
        )
    lines.append("")
    return lines


def _visibility_table(seen: Mapping[str, Mapping[str, Seen]]) -> list[str]:
    lines = [
        "### Visibility",
        "",
        "| database | variant | echo=True: statements shown | sqlalchemy.engine logger at INFO | "
        "logger at INFO set after the first transaction | BEGIN IMMEDIATE logged | "
        "handle_error on a PK violation | raised | before/after_cursor_execute | "
        "lost connection (PostgreSQL) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for database, by_variant in seen.items():
        for name, s in by_variant.items():
            lines.append(
                f"| {database} | {name} | {s.echo} | {s.logger} | {s.late} | {s.begin_logged} "
                f"| {s.handle_error} | {s.raised} | {s.cursor_events} "
                f"| {s.lost_connection or 'n/a'} |"
            )
    return lines

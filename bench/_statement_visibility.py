"""What each statement path of ``bench/statements.py`` shows: statement logging (``echo``, the
``sqlalchemy.engine`` logger), ``handle_error``, the cursor listeners, and on PostgreSQL a lost
connection."""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, exc

from agentledger.ledger import Ledger
from agentledger.ledger._engine import Connections, EngineSettings, make_engine

from ._statement_runs import (
    Template,
    Transaction,
    Variant,
    replay_of,
    run_transaction,
)

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

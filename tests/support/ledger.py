"""Helpers for ``test_ledger.py``: SQL straight on the ledger's database (never through the
library), tools that count their calls, and scripted model responses."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from agentledger import Agent, AgentBuilder, Message, ToolCall, tool
from agentledger._core import FunctionTool
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.sqlalchemy_urls import sqlalchemy_url

QUESTION = "What is the weather in Paris?"
TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
ANSWER = "It is Sunny and 22C in Paris today."


class Database:
    """SQL on the ledger's database through connections of its own, so it only ever sees what
    the ledger committed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(sqlalchemy_url(url))
        self.dialect = self.engine.dialect.name

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(text(sql), params).mappings()]

    def row(self, sql: str, **params: Any) -> dict[str, Any]:
        rows = self.rows(sql, **params)
        assert len(rows) == 1, f"expected one row from {sql!r}, got {rows}"
        return rows[0]

    def column(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params).scalars())

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def execute(self, *statements: str) -> None:
        """Run statements in one transaction of their own (DDL, fault injection)."""
        with self.engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def fail_inserts_into(self, table: str, message: str) -> None:
        """A trigger that makes every insert into ``table`` fail, as a full disk would."""
        if self.dialect == "sqlite":
            self.execute(
                f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
            )
        else:
            self.execute(
                f"CREATE FUNCTION fail_{table}() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$",
                f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} "
                f"FOR EACH ROW EXECUTE PROCEDURE fail_{table}()",
            )

    def allow_inserts_into(self, table: str) -> None:
        if self.dialect == "sqlite":
            self.execute(f"DROP TRIGGER fail_{table}")
        else:
            self.execute(f"DROP TRIGGER fail_{table} ON {table}", f"DROP FUNCTION fail_{table}()")

    def count(self, table: str, where: str = "1 = 1", **params: Any) -> int:
        return int(self.scalar(f"SELECT COUNT(*) FROM {table} WHERE {where}", **params))

    def table_counts(self) -> dict[str, int]:
        tables = (
            "conversations",
            "conversation_messages",
            "agent_runs",
            "step_executions",
            "tool_executions",
            "execution_buffer_rows",
        )
        return {table: self.count(table) for table in tables}

    def conversation_rows(self, conversation_id: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT * FROM conversation_messages WHERE conversation_id = :cid ORDER BY seq",
            cid=conversation_id,
        )

    def running_run(self) -> dict[str, Any]:
        return self.row("SELECT * FROM agent_runs WHERE status = 'running'")

    def step_indexes(self, run_id: str) -> list[int]:
        return self.column(
            "SELECT step_index FROM step_executions WHERE run_id = :r ORDER BY step_index",
            r=run_id,
        )

    def assert_runs_consistent(self) -> None:
        """Every run's steps are numbered 0..n-1 and ``step_count`` says n; every run that
        ended carries the totals of its own steps: tokens summed, the known costs summed
        (NULL when none is known), ``fully_priced`` false when a step that called a model
        has no cost."""
        for run in self.rows("SELECT * FROM agent_runs"):
            indexes = self.step_indexes(run["id"])
            assert indexes == list(range(len(indexes))), (run["id"], indexes)
            assert run["step_count"] == len(indexes), (run["id"], run["step_count"], indexes)
            if run["status"] == "running":
                continue  # totals are written when the run ends
            steps = self.rows("SELECT * FROM step_executions WHERE run_id = :r", r=run["id"])
            for column in TOKEN_COLUMNS:
                total = sum(step[column] for step in steps)
                assert run[column] == total, (run["id"], run["status"], column, run[column], total)
            known = [s["cost_usd"] for s in steps if s["cost_usd"] is not None]
            cost = sum(known) if known else None
            assert run["cost_usd"] == (pytest.approx(cost) if known else None), (run["id"], cost)
            priced = all(s["cost_usd"] is not None for s in steps if s["step_type"] != "error")
            assert bool(run["fully_priced"]) is priced, (run["id"], run["status"], "fully_priced")

    def open_transactions_elsewhere(self) -> int:
        """How many other sessions are inside a transaction right now (PostgreSQL)."""
        return int(
            self.scalar(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
                "AND xact_start IS NOT NULL"
            )
        )

    def write_now(self, conversation_id: str) -> str | None:
        """Open a write transaction on the conversation at once, without waiting for any lock
        the ledger might hold; ``None`` if that worked, otherwise what stopped it."""
        try:
            if self.dialect == "sqlite":
                self._sqlite_write_now(conversation_id)
            else:
                self._postgres_write_now(conversation_id)
        except Exception as exc:  # reported to the test, which asserts outside the model call
            return f"{type(exc).__name__}: {exc}"
        return None

    def _sqlite_write_now(self, conversation_id: str) -> None:
        path = make_url(self.url).database
        assert path
        with contextlib.closing(sqlite3.connect(path, timeout=0.2, isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE conversations SET version = version WHERE id = ?", [conversation_id]
            )
            conn.execute(
                "UPDATE agent_runs SET heartbeat_at = heartbeat_at WHERE conversation_id = ?",
                [conversation_id],
            )
            conn.execute("ROLLBACK")
            # No reader either: a TRUNCATE checkpoint is refused while any transaction is open.
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise AssertionError("another connection holds a read transaction open")

    def _postgres_write_now(self, conversation_id: str) -> None:
        open_elsewhere = self.open_transactions_elsewhere()
        if open_elsewhere:
            raise AssertionError(f"{open_elsewhere} other session(s) are inside a transaction")
        with self.engine.connect() as conn:
            transaction = conn.begin()
            try:
                conn.execute(text("SET LOCAL lock_timeout = '200ms'"))
                conn.execute(
                    text("UPDATE conversations SET version = version WHERE id = :cid"),
                    {"cid": conversation_id},
                )
                conn.execute(
                    text(
                        "UPDATE agent_runs SET heartbeat_at = heartbeat_at "
                        "WHERE conversation_id = :cid"
                    ),
                    {"cid": conversation_id},
                )
            finally:
                transaction.rollback()

    def close(self) -> None:
        self.engine.dispose()


class SteppedClock:
    """A clock that stands still until the test moves it: leases expire on demand."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def counting_weather_tool() -> tuple[FunctionTool, list[str]]:
    """A weather tool, and the list of the cities it was called for."""
    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"22C and sunny in {city}"

    return get_weather, calls


def weather_call(call_id: str = "call_1", city: str = "Paris", **fields: Any) -> InferenceResponse:
    return InferenceResponse(
        tool_calls=(ToolCall(id=call_id, name="get_weather", arguments={"city": city}),),
        **fields,
    )


def answer(text: str = ANSWER, **fields: Any) -> InferenceResponse:
    return InferenceResponse(content=text, **fields)


def build_agent(
    llm: ScriptedLLM,
    ledger: Ledger | None = None,
    *,
    tools: Iterable[FunctionTool] = (),
    inline: bool = False,
) -> Agent:
    builder = AgentBuilder().with_llm(llm).with_tools(list(tools))
    if inline:
        builder = builder.with_separated_tool_trace(False)
    if ledger is not None:
        builder = builder.with_ledger(ledger)
    return builder.build()


def begin_by_hand(agent: Agent, ledger: Ledger, question: str = QUESTION) -> Any:
    """What ``Agent.run`` does up to its first model call, through the recorder interface:
    the state of the run just begun."""
    state = ledger.recorder.load_conversation(None)
    user = Message.user(question)
    state = agent.begin(state.with_messages(state.messages().append(user)))
    ledger.recorder.begin_run(state, user_message=user, agent_name=agent.name)
    return state


def raising(error: Exception) -> Callable[[Any], InferenceResponse]:
    def fail(_request: Any) -> InferenceResponse:
        raise error

    return fail

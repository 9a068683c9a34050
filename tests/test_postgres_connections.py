"""A ledger's connections to PostgreSQL: kept open between transactions, so that a run's
statements are prepared once and run prepared, and no transaction pays the pool's check (a
round trip) while the connection is in use; a connection the server ended meanwhile (a
restart) is never used again, so the restart costs the next transaction nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall, tool
from agentledger.ledger import Ledger
from support.postgres import PostgresServer

TURNS = 8


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def turn(ledger: Ledger, conversation_id: str | None) -> str:
    """A turn of a tool step and an answer; its conversation."""
    call = ToolCall(id="c1", name="lookup", arguments={"key": "k"})
    llm = ScriptedLLM([InferenceResponse(tool_calls=[call]), InferenceResponse(content="done")])
    agent = AgentBuilder().with_llm(llm).with_tools([lookup]).with_ledger(ledger).build()
    result = agent.run("question", conversation_id)
    assert result.status == "completed", result.error
    return result.conversation_id


def logged_since(log: Path, offset: int) -> str:
    with log.open("rb") as handle:
        handle.seek(offset)
        return handle.read().decode("utf-8", "replace")


@pytest.fixture
def logged_url(pg_server: PostgresServer, pg_url: str) -> Iterator[str]:
    """``pg_url``, every statement sent to its database written to the server's log."""
    name = pg_url.rsplit("/", 1)[1]
    with pg_server.connect() as conn:
        conn.autocommit = True
        conn.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")
    yield pg_url


def test_turns_on_postgresql_run_prepared_statements_that_no_read_makes_the_driver_drop(
    pg_server: PostgresServer, logged_url: str
):
    with Ledger.open(logged_url) as ledger:
        offset = pg_server.log_file.stat().st_size  # once opened (and migrated)
        conversation_id = turn(ledger, None)
        for _ in range(TURNS - 1):
            turn(ledger, conversation_id)
        assert len(ledger.messages(conversation_id)) == 2 * TURNS
    logged = logged_since(pg_server.log_file, offset)
    # A ROLLBACK makes psycopg forget what it prepared (and send DEALLOCATE ALL): a read
    # commits instead, and the statements of the later turns run prepared.
    assert "DEALLOCATE" not in logged
    assert "statement: ROLLBACK" not in logged
    prepared = logged.count("execute _pg3_")
    assert prepared >= TURNS * 3, prepared


@pytest.fixture
def own_server(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    """A server of this test's own, to restart."""
    server = PostgresServer(bindir=str(pg_server.bindir)).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_server_restarted_between_two_turns_costs_the_second_turn_nothing(
    own_server: PostgresServer,
):
    url = own_server.create_database()
    with Ledger.open(url) as ledger:
        conversation_id = turn(ledger, None)
        own_server.restart()
        assert turn(ledger, conversation_id) == conversation_id
        assert turn(ledger, conversation_id) == conversation_id
        assert len(ledger.messages(conversation_id)) == 6
        assert ledger.lock_retries == 0

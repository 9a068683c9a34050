"""Change stamps (revisions 0008 and 0009): on SQLite the library stamps the rows it writes with
one stamp per transaction, and the triggers stamp whatever else writes; on PostgreSQL the
triggers stamp every write with the writing transaction's id. Either way a reader that
remembers a stamp finds every row changed since."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from agentledger import AgentBuilder, ToolCall, tool
from agentledger.ledger import Ledger
from agentledger.ledger.tables import STAMPED_TABLES
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.migration_harness import Database


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _turn(ledger: Ledger, conversation_id: str | None = None) -> str:
    calls = [
        InferenceResponse(tool_calls=[ToolCall(id=f"c{i}", name="lookup", arguments={"key": "k"})])
        for i in range(2)
    ]
    llm = ScriptedLLM([*calls, InferenceResponse(content="done")])
    agent = AgentBuilder().with_llm(llm).with_tools([lookup]).with_ledger(ledger).build()
    return agent.run("go", conversation_id).conversation_id


def _stamps(path: Path, query: str, *params: object) -> list[int | None]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute(query, params)]


def test_sqlite_rows_written_in_one_transaction_share_its_stamp(tmp_path):
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    conversation_id = _turn(ledger)
    conversation_id = _turn(ledger, conversation_id)
    ledger.close()
    for table in STAMPED_TABLES:
        assert _stamps(path, f"SELECT count(*) FROM {table} WHERE change_seq IS NULL") == [0]
    # Each tool-calling step is one transaction: its step row and its tool row, one stamp.
    steps = _stamps(
        path,
        "SELECT s.change_seq FROM step_executions s JOIN tool_executions t ON t.step_id = s.id "
        "WHERE s.change_seq = t.change_seq ORDER BY s.started_at",
    )
    assert len(steps) == 4
    assert steps == sorted(steps) and len(set(steps)) == 4  # later transactions, later stamps
    counter = _stamps(path, "SELECT change_seq FROM agentledger_changes")[0]
    newest = max(
        _stamps(path, f"SELECT max(change_seq) FROM {table}")[0] or 0 for table in STAMPED_TABLES
    )
    assert counter == newest


def test_sqlite_a_turn_raises_the_counter_once_per_transaction(tmp_path):
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    conversation_id = _turn(ledger)
    before = _stamps(path, "SELECT change_seq FROM agentledger_changes")[0]
    _turn(ledger, conversation_id)
    ledger.close()
    after = _stamps(path, "SELECT change_seq FROM agentledger_changes")[0]
    # Begin, two tool steps, the answer, the commit: five transactions that write stamped rows
    # (with a trigger per row it was one per row and update, dozens). A step's fence reads the
    # lease without writing the conversation, so its release is the commit's one write of it.
    assert after - before == 5


def test_what_anyone_else_writes_is_stamped_by_the_triggers(db_url):
    ledger = Ledger.open(db_url)
    conversation_id = _turn(ledger)
    ledger.close()
    with Database(db_url) as database, database.engine.begin() as conn:
        newest = conn.execute(text("SELECT max(change_seq) FROM conversations")).scalar_one()
        conn.execute(
            text("UPDATE conversations SET title = 'by hand' WHERE id = :id"),
            {"id": conversation_id},
        )
        conn.execute(
            text(
                "INSERT INTO conversations (id, kind, version, created_at, updated_at) "
                "VALUES ('by-hand', 'main', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
    with Database(db_url) as database, database.engine.connect() as conn:
        stamped = dict(
            conn.execute(
                text("SELECT id, change_seq FROM conversations WHERE id IN (:a, 'by-hand')"),
                {"a": conversation_id},
            ).all()
        )
    assert stamped[conversation_id] is not None and stamped[conversation_id] > newest
    assert stamped["by-hand"] is not None and stamped["by-hand"] > newest


def test_sqlite_an_update_that_sets_the_stamp_itself_is_not_stamped_again(tmp_path):
    title = "by hand, stamp kept"
    path = tmp_path / "ledger.db"
    ledger = Ledger.open(path)
    conversation_id = _turn(ledger)
    ledger.close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE conversations SET title = ?, change_seq = 1000 WHERE id = ?",
            (title, conversation_id),
        )
    stamp = _stamps(path, "SELECT change_seq FROM conversations WHERE id = ?", conversation_id)
    assert stamp == [1000]

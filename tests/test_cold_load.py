"""A cold load on SQLite builds messages from the stored values (``ledger/_stored_messages.py``):
the same messages as the general path, every row still checked, and rows whose stored form is
not canonical (JSON written before the serializer was, a float with an integral value, a time
on a whole second) read through the general path, not refused."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agentledger import AgentBuilder
from agentledger.errors import LedgerCorruptError
from agentledger.ledger import Ledger
from agentledger.ledger.checksums import canonical_json, checksum
from agentledger.ledger.tables import conversation_messages
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.ledger import Database


def _conversation(ledger: Ledger, turns: int = 4) -> str:
    agent = AgentBuilder().with_llm(
        ScriptedLLM([InferenceResponse(content=f"answer {i}") for i in range(turns)])
    )
    built = agent.with_ledger(ledger).build()
    conversation_id = None
    for turn in range(turns):
        conversation_id = built.run(f"question {turn} é ☃", conversation_id).conversation_id
    assert conversation_id is not None
    return conversation_id


def _cold(url: str, conversation_id: str) -> list[Any]:
    fresh = Ledger.open(url)
    try:
        state = fresh.recorder.load_conversation(conversation_id)
        return list(state.store.section("messages").messages())
    finally:
        fresh.close()


def _rewrite(url: str, message_id: str, stored: dict[str, Any], **typed: Any) -> None:
    """Change a message row's columns: ``typed`` as the library reads them (its checksum
    sealed again over them), ``stored`` as the text the file holds."""
    database = Database(url)
    try:
        with database.engine.connect() as conn:
            query = select(conversation_messages).where(conversation_messages.c.id == message_id)
            row = dict(conn.execute(query).mappings().one())
    finally:
        database.close()
    row.update(typed)
    with sqlite3.connect(Path(url.removeprefix("sqlite:///"))) as conn:
        columns = {**stored, "checksum": checksum(conversation_messages, row)}
        sets = ", ".join(f"{name} = :{name}" for name in columns)
        conn.execute(
            f"UPDATE conversation_messages SET {sets} WHERE id = :id", {**columns, "id": message_id}
        )


def test_a_cold_load_gives_the_messages_the_general_path_reads(db_url):
    ledger = Ledger.open(db_url)
    conversation_id = _conversation(ledger)
    expected = list(ledger.messages(conversation_id))
    ledger.close()
    assert _cold(db_url, conversation_id) == expected
    assert len(expected) == 8


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_json_is_stored_in_its_canonical_text(sqlite_url):
    ledger = Ledger.open(sqlite_url)
    conversation_id = _conversation(ledger, turns=1)
    ledger.close()
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        budget = conn.execute(
            "SELECT budget FROM agent_runs WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()[0]
    assert budget == canonical_json(json.loads(budget))


@pytest.mark.parametrize(
    ("stored", "typed"),
    [
        pytest.param(
            {"metadata": '{"é": [1, 2.5], "b": {"z": 1, "a": "x"}}'},
            {"metadata": {"é": [1, 2.5], "b": {"z": 1, "a": "x"}}},
            id="json-written-unsorted-with-spaces",
        ),
        pytest.param(
            {"metadata": canonical_json({"a": {"b": [1, "☃"]}})},
            {"metadata": {"a": {"b": [1, "☃"]}}},
            id="json-in-canonical-text",
        ),
        pytest.param(
            {"metadata": '{"n":2.0}'}, {"metadata": {"n": 2.0}}, id="a-float-with-integral-value"
        ),
        pytest.param(
            {"created_at": "2026-01-02 03:04:05.000000"},
            {"created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)},
            id="a-time-on-a-whole-second",
        ),
    ],
)
def test_rows_in_any_stored_form_that_match_their_checksum_are_read(sqlite_url, stored, typed):
    ledger = Ledger.open(sqlite_url)
    conversation_id = _conversation(ledger)
    first = ledger.messages(conversation_id)[2]
    ledger.close()
    _rewrite(sqlite_url, first.id, stored, **typed)
    loaded = _cold(sqlite_url, conversation_id)
    assert loaded[2] == first.model_copy(update=typed)
    reread = Ledger.open(sqlite_url)
    assert loaded == list(reread.messages(conversation_id))
    reread.close()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("content", "question 1 changed"),
        ("content", 12),
        ("metadata", '{"a":1}'),
        ("created_at", "2026-01-02 03:04:05.000001"),
        ("role", "system"),
        ("interrupted", 1),
    ],
)
def test_a_changed_value_is_refused_by_a_cold_load(sqlite_url, column, value):
    ledger = Ledger.open(sqlite_url)
    conversation_id = _conversation(ledger)
    target = ledger.messages(conversation_id)[2]
    ledger.close()
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"UPDATE conversation_messages SET {column} = ? WHERE id = ?", (value, target.id)
        )
    with pytest.raises(LedgerCorruptError, match=target.id):
        _cold(sqlite_url, conversation_id)

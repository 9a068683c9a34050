"""A stored conversation's history read on SQLite, where its entries and the rows holding
their texts are checked against their checksums from the stored values: a changed value is an
error that names its table, a value stored in another form that decodes to what was written
is read back as it was saved."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai.conversation_store")

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentledger.errors import LedgerCorruptError
from agentledger.integrations.pydantic_ai import LedgerConversationStore
from agentledger.ledger import Ledger


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """One ``lookup`` call, said in words, then the answer."""
    if len(messages) == 1:
        call = ToolCallPart("lookup", {"key": 1}, tool_call_id="call-1")
        return ModelResponse(parts=[TextPart("looking"), call], model_name="scripted")
    return ModelResponse(parts=[TextPart("the answer")], model_name="scripted")


def _saved(path: Path) -> list[ConversationEntry]:
    """A conversation of one turn saved in a ledger at ``path``: the entries read back."""
    agent = Agent(FunctionModel(_reply))

    @agent.tool_plain
    def lookup(key: int) -> str:
        return f"value {key}"

    async def turn() -> list[ConversationEntry]:
        with Ledger.open(f"sqlite:///{path}") as ledger:
            store = LedgerConversationStore(ledger)
            await store.save(await agent.run("hi", conversation=Conversation(conversation_id="c")))
            entries = await store.load_entries("c")
            assert entries is not None
            return entries

    return asyncio.run(turn())


def _loaded(path: Path) -> list[ConversationEntry] | None:
    with Ledger.open(f"sqlite:///{path}") as ledger:
        return asyncio.run(LedgerConversationStore(ledger).load_entries("c"))


_FLOAT = 'audio_seconds":0.0'
"""An integral float of an entry's JSON, which the check forms as the integer it reads as."""


@pytest.mark.parametrize(
    ("table", "column", "old", "new"),
    [
        ("stored_entries", "message", "function:", "changed:"),
        ("stored_entries", "message", _FLOAT, _FLOAT.replace("0.0", "1.0")),
        ("conversation_messages", "content", "hi", "changed"),
        ("tool_executions", "result", "value 1", "value 2"),
        ("step_executions", "content", "looking", "changed"),
    ],
)
def test_a_changed_value_is_an_error_that_names_its_table(
    tmp_path: Path, table: str, column: str, old: str, new: str
) -> None:
    path = tmp_path / "ledger.db"
    _saved(path)
    with sqlite3.connect(path) as conn:
        changed = conn.execute(
            f"UPDATE {table} SET {column} = replace({column}, ?, ?) WHERE instr({column}, ?)",
            (old, new, old),
        ).rowcount
    assert changed > 0
    with pytest.raises(LedgerCorruptError, match=f"of {table} does not match"):
        _loaded(path)


def test_an_entry_stored_in_another_json_text_is_read_back_as_saved(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    saved = _saved(path)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, message FROM stored_entries").fetchall()
        for entry_id, message in rows:
            spaced = json.dumps(json.loads(message), indent=1)  # same values, other text
            conn.execute("UPDATE stored_entries SET message = ? WHERE id = ?", (spaced, entry_id))
    assert _loaded(path) == saved


def test_an_entry_whose_text_row_is_gone_is_an_error_that_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    _saved(path)
    with sqlite3.connect(path) as conn:
        (gone,) = conn.execute("SELECT id FROM tool_executions").fetchone()
        conn.execute("DELETE FROM tool_executions WHERE id = ?", (gone,))
    with pytest.raises(LedgerCorruptError, match=f"refers to message row {gone}, which is not"):
        _loaded(path)

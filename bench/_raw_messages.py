"""The floor of a turn: plain ``sqlite3`` writing the turn's logical messages, nothing else.

Where ``bench/_raw.py`` writes the ledger's own rows (runs, steps, tool executions, buffer
rows, the conversation), this writes what any agent store must keep of a turn at the least:
its messages and the usage of its model calls, in the two tables an app would make for them.
A turn of 3 tool-calling steps is 8 messages (the user's, then per step the assistant's tool
call and the tool's result, then the answer) and 4 usage rows (one per model call), in 5
transactions (the user message; each step; the answer), with the same contents, ids
(time-ordered UUIDv7 text), timestamps and JSON text as the ledger's.

The connection has the ledger's settings (``journal_mode=WAL``, ``foreign_keys=ON``, the same
``synchronous``); every transaction starts with ``BEGIN IMMEDIATE``. It loads nothing: it looks
the next ``seq`` of the conversation up (one indexed ``max``) when a turn begins.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._common import ANSWER, MODEL, RESULT, TOOL_NAME, USAGE, call_arguments, call_id
from ._raw import _text, connect, dumps, new_id

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    name TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL REFERENCES messages (id),
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
"""
INSERT_MESSAGE = (
    "INSERT INTO messages (id, conversation_id, seq, role, content, name, tool_calls, "
    "tool_call_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_USAGE = (
    "INSERT INTO usage (conversation_id, message_id, model, input_tokens, output_tokens, "
    "created_at) VALUES (?, ?, ?, ?, ?, ?)"
)
NEXT_SEQ = "SELECT max(seq) FROM messages WHERE conversation_id = ?"
MESSAGES_PER_TURN = 8
USAGE_PER_TURN = 4
TRANSACTIONS_PER_TURN = 5


class RawMessages:
    """Writes turns as messages and usage rows with plain ``sqlite3``."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self.conn = connect(path, synchronous)
        self.conn.executescript(f"BEGIN;\n{SCHEMA}\nCOMMIT;")

    def close(self) -> None:
        self.conn.close()

    def run(
        self, user_text: str, conversation_id: str | None, *, tool_steps: int, calls_per_step: int
    ) -> str:
        """One turn's messages and usage; the conversation's id."""
        conversation_id = conversation_id or new_id()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        last = conn.execute(NEXT_SEQ, (conversation_id,)).fetchone()[0]
        seq = 0 if last is None else last + 1
        conn.execute(INSERT_MESSAGE, self._row(conversation_id, seq, "user", user_text))
        conn.execute("COMMIT")
        for index in range(tool_steps):
            calls = [
                {"id": call_id(index, p), "name": TOOL_NAME, "arguments": call_arguments(index, p)}
                for p in range(calls_per_step)
            ]
            conn.execute("BEGIN IMMEDIATE")
            seq += 1
            assistant = self._row(conversation_id, seq, "assistant", "", calls=calls)
            conn.execute(INSERT_MESSAGE, assistant)
            conn.execute(INSERT_USAGE, _usage(conversation_id, assistant))
            for call in calls:
                seq += 1
                result = self._row(
                    conversation_id, seq, "tool", RESULT, name=TOOL_NAME, call=call["id"]
                )
                conn.execute(INSERT_MESSAGE, result)
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        answer = self._row(conversation_id, seq + 1, "assistant", ANSWER)
        conn.execute(INSERT_MESSAGE, answer)
        conn.execute(INSERT_USAGE, _usage(conversation_id, answer))
        conn.execute("COMMIT")
        return conversation_id

    @staticmethod
    def _row(
        conversation_id: str,
        seq: int,
        role: str,
        content: str,
        *,
        calls: list[dict[str, Any]] | None = None,
        name: str | None = None,
        call: str | None = None,
    ) -> tuple[Any, ...]:
        stamp = _text(datetime.now(UTC))
        tool_calls = dumps(calls) if calls else None
        return (new_id(), conversation_id, seq, role, content, name, tool_calls, call, stamp)


def _usage(conversation_id: str, message: tuple[Any, ...]) -> tuple[Any, ...]:
    return (
        conversation_id,
        message[0],
        MODEL,
        USAGE.input_tokens,
        USAGE.output_tokens,
        message[-1],
    )


def counts(path: Path) -> tuple[int, int]:
    """How many messages and usage rows ``path`` holds."""
    conn = connect(path, "NORMAL")
    try:
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        usage = conn.execute("SELECT count(*) FROM usage").fetchone()[0]
    finally:
        conn.close()
    return int(messages), int(usage)

"""The floor: plain ``sqlite3`` writing a turn's logical messages, nothing else, and reading a
ledger's messages back as an app would.

What any agent store must keep of a turn at the least: its 8 messages (the user's, each tool
call and its result, the answer) and a usage row per model call, in two plain tables, a
transaction a step (``BEGIN IMMEDIATE``), with the ledger's connection settings, its kind of ids
and its JSON text. It loads nothing: one indexed ``max(seq)`` when a turn begins.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._common import ANSWER, MODEL, RESULT, TOOL_NAME, USAGE, call_arguments, call_id

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, name TEXT, tool_calls TEXT, tool_call_id TEXT,
    created_at TEXT NOT NULL, UNIQUE (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY, conversation_id TEXT NOT NULL,
    message_id TEXT NOT NULL REFERENCES messages (id), model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, created_at TEXT NOT NULL
);
"""
INSERT_MESSAGE = "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
INSERT_USAGE = "INSERT INTO usage (conversation_id, message_id, model, input_tokens, "
INSERT_USAGE += "output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?)"
dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
"""JSON as the ledger stores it on SQLite: sorted keys, no spaces, UTF-8 text."""


def new_id() -> str:
    """A time-ordered UUIDv7, as text: the ledger's kind of id, so the indexes grow alike."""
    stamp = time.time_ns() // 1_000_000
    value = stamp << 80 | 0x7 << 76 | random.getrandbits(12) << 64 | 2 << 62
    return str(uuid.UUID(int=value | random.getrandbits(62)))


class RawMessages:
    """Writes runs as messages and usage rows with plain ``sqlite3``, a transaction a step, on
    a connection with the ledger's settings."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        for pragma in ("journal_mode=WAL", "foreign_keys=ON", f"synchronous={synchronous}"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.conn.executescript(f"BEGIN;\n{SCHEMA}\nCOMMIT;")

    def close(self) -> None:
        self.conn.close()

    def run(self, text: str, conversation_id: str | None, tool_steps: int, calls: int) -> str:
        """One run's messages and usage; the conversation's id."""
        conversation_id = conversation_id or new_id()
        with self._transaction() as conn:
            query = "SELECT max(seq) FROM messages WHERE conversation_id = ?"
            last = conn.execute(query, (conversation_id,)).fetchone()[0]
            seq = 0 if last is None else last + 1
            conn.execute(INSERT_MESSAGE, _row(conversation_id, seq, "user", text))
        for index in range(tool_steps):
            asked: list[dict[str, Any]] = [
                {"id": call_id(index, p), "name": TOOL_NAME, "arguments": call_arguments(index, p)}
                for p in range(calls)
            ]
            with self._transaction() as conn:
                seq += 1
                self._answer(conn, _row(conversation_id, seq, "assistant", "", calls=asked))
                for call in asked:
                    seq += 1
                    conn.execute(
                        INSERT_MESSAGE, _row(conversation_id, seq, "tool", RESULT, call["id"])
                    )
        with self._transaction() as conn:
            self._answer(conn, _row(conversation_id, seq + 1, "assistant", ANSWER))
        return conversation_id

    def _answer(self, conn: sqlite3.Connection, message: tuple[Any, ...]) -> None:
        """A model's message, and its usage row."""
        conn.execute(INSERT_MESSAGE, message)
        usage = (
            message[1],
            message[0],
            MODEL,
            USAGE.input_tokens,
            USAGE.output_tokens,
            message[-1],
        )
        conn.execute(INSERT_USAGE, usage)

    def _transaction(self) -> sqlite3.Connection:
        """A transaction begun: the connection, as a context manager, commits it (or rolls it
        back on an error)."""
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def held(self) -> int:
        """The messages stored."""
        return int(self.conn.execute("SELECT count(*) FROM messages").fetchone()[0])


def _row(
    conversation_id: str,
    seq: int,
    role: str,
    content: str,
    call: str | None = None,
    *,
    calls: Any = None,
) -> tuple[Any, ...]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    name, tool_calls = TOOL_NAME if call is not None else None, dumps(calls) if calls else None
    return (new_id(), conversation_id, seq, role, content, name, tool_calls, call, stamp)


RAW_LOAD = (
    "SELECT id, section, seq, role, content, name, tool_calls, tool_call_id, reasoning, "
    "metadata, created_at FROM conversation_messages WHERE conversation_id = ? ORDER BY seq"
)


def raw_load(conn: sqlite3.Connection, conversation_id: str) -> int:
    """A ledger conversation's message rows read as an app would: each a dict of its columns,
    its JSON decoded, ``created_at`` a UTC ``datetime``, grouped by section; nothing checked.
    How many were read."""
    sections: dict[str, list[dict[str, Any]]] = {}
    cursor = conn.execute(RAW_LOAD, (conversation_id,))
    names = [d[0] for d in cursor.description]
    for values in cursor:
        row = dict(zip(names, values, strict=True))
        for column in ("tool_calls", "metadata"):
            if row[column] is not None:
                row[column] = json.loads(row[column])
        row["created_at"] = datetime.fromisoformat(row["created_at"]).replace(tzinfo=UTC)
        sections.setdefault(row.pop("section"), []).append(row)
    return sum(map(len, sections.values()))


def checkpointed_size(path: Path) -> int:
    """The database's size in bytes after ``PRAGMA wal_checkpoint(TRUNCATE)``."""
    with closing(sqlite3.connect(path)) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise RuntimeError(f"could not checkpoint {path}: a reader or writer holds it")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

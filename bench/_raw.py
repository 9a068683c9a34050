"""The floor: plain ``sqlite3`` writing the rows the ledger writes for a run.

The tables are the ledger's own, created from ``agentledger.ledger.schema.ddl("sqlite")`` on a
fresh file (FTS5 table and triggers included); the connection has the ledger's settings
(``journal_mode=WAL``, ``foreign_keys=ON``, the same ``synchronous``); every transaction starts
with ``BEGIN IMMEDIATE``, one per step, with the same columns, ids (time-ordered UUIDv7 text),
timestamps (ISO text, UTC) and JSON payloads (:data:`dumps`, the ledger's JSON text; JSON null
stored as SQL NULL, as the ledger stores it).

It is a stateless writer that loads nothing: it looks the next ``seq`` of the conversation up
(one indexed ``max``) when a run begins, and keeps the rest in local variables. With
``leases=True`` it also issues the ledger's lease and heartbeat ``UPDATE`` statements (take the
conversation's lease, extend it and beat the run at every step, release it at the end), to
tell the cost of the SQL the ledger's protocol adds from the cost of the library's Python.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

try:  # the ledger's id scheme, so rows and indexes match
    from agentledger._values import new_id
except ImportError:  # an earlier agentledger, which bench/previous.py measures too
    from agentledger.values import new_id  # type: ignore[no-redef,import-not-found]

from ._common import ANSWER, MODEL, RESULT, TOOL_NAME, USAGE, call_arguments, call_id

dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
"""JSON as the ledger stores it on SQLite: sorted keys, no spaces, UTF-8 text."""

Row = dict[str, Any]
NULL_JSON = None  # the ledger stores JSON null as SQL NULL
LEASE = timedelta(seconds=60)


def _insert(table: str, columns: str) -> str:
    names = columns.split()
    return (
        f"INSERT INTO {table} ({', '.join(names)}) "
        f"VALUES ({', '.join(':' + name for name in names)})"
    )


MESSAGE = "role content name tool_calls tool_call_id reasoning metadata created_at"
INSERT_CONVERSATION = _insert(
    "conversations",
    "id kind title parent_run_id version lease_holder lease_run_id lease_expires_at created_at "
    "updated_at metadata change_seq",
)
INSERT_RUN = _insert(
    "agent_runs",
    "id conversation_id parent_run_id root_run_id depth agent_name model status stop_reason "
    "error started_at finished_at heartbeat_at step_count input_tokens output_tokens "
    "cache_read_tokens cache_write_tokens reasoning_tokens cost_usd fully_priced budget metadata "
    "change_seq",
)
INSERT_STEP = _insert(
    "step_executions",
    "id run_id step_index step_type model finish_reason started_at finished_at duration_ms "
    "input_tokens output_tokens cache_read_tokens cache_write_tokens reasoning_tokens cost_usd "
    "should_continue stop_reason decided_by outcome_detail final_response_required error "
    "message_id content reasoning metadata tool_call_count change_seq",
)
INSERT_TOOL = _insert(
    "tool_executions",
    "id run_id step_id step_index position tool_call_id tool_name arguments validated_arguments "
    "result is_error error started_at finished_at duration_ms child_run_id metadata change_seq",
)
INSERT_BUFFER = _insert("execution_buffer_rows", f"id run_id step_index seq section {MESSAGE}")
INSERT_MESSAGE = _insert(
    "conversation_messages", f"id conversation_id section seq {MESSAGE} run_id change_seq"
)
NEXT_SEQ = "SELECT max(seq) FROM conversation_messages WHERE conversation_id = ?"
END_RUN = (
    "UPDATE agent_runs SET status = 'completed', stop_reason = 'completed', error = NULL, "
    "finished_at = :now, heartbeat_at = :now, step_count = :steps, model = :model, "
    "input_tokens = :input_tokens, output_tokens = :output_tokens, cache_read_tokens = 0, "
    "cache_write_tokens = 0, reasoning_tokens = 0, cost_usd = NULL, fully_priced = 0, "
    "change_seq = :change_seq WHERE id = :id"
)
FLUSH_BUFFER = "DELETE FROM execution_buffer_rows WHERE run_id = ?"
TAKE_LEASE = (
    "UPDATE conversations SET lease_holder = :token, lease_run_id = :run_id, "
    "lease_expires_at = :expires, updated_at = :now, change_seq = :change_seq "
    "WHERE id = :id AND (lease_holder IS NULL OR lease_expires_at <= :now)"
)
FENCE = (
    "UPDATE conversations SET lease_expires_at = ?, change_seq = ? "
    "WHERE id = ? AND lease_holder = ?"
)
HEARTBEAT = "UPDATE agent_runs SET heartbeat_at = ?, step_count = ?, change_seq = ? WHERE id = ?"
RELEASE = (
    "UPDATE conversations SET lease_holder = NULL, lease_run_id = NULL, lease_expires_at = NULL, "
    "updated_at = ?, version = version + 1, change_seq = ? WHERE id = ? AND lease_holder = ?"
)
NEXT_STAMP = "UPDATE agentledger_changes SET change_seq = change_seq + 1 RETURNING change_seq"
"""A transaction's change stamp, as the ledger takes it (revision 0009): one per transaction."""


def _text(moment: datetime) -> str:
    """A timestamp as the ledger stores it on SQLite."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection with the ledger's settings; transactions are issued by hand."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


class RawLedger:
    """Writes runs with plain ``sqlite3``: one transaction to begin, one per step, one to end."""

    def __init__(
        self, path: Path, ddl: str, synchronous: str, *, leases: bool = False, budget: str = "{}"
    ) -> None:
        self.path = path
        self.leases = leases
        self.budget = budget  # the run's limits as JSON, as the agent's budget stores them
        self.conn = connect(path, synchronous)
        self.conn.executescript(f"BEGIN;\n{ddl}\nCOMMIT;")
        self.stamp = 0

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        self.stamp = self.conn.execute(NEXT_STAMP).fetchone()[0]
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def run(
        self, user_text: str, conversation_id: str | None, *, tool_steps: int, calls_per_step: int
    ) -> str:
        """One run, as ``Agent.run`` records it; the conversation's id."""
        run_id, token, steps = new_id(), new_id(), tool_steps + 1
        with self._transaction() as conn:
            now = datetime.now(UTC)
            stamp, expires = _text(now), _text(now + LEASE)
            if conversation_id is None:
                conversation_id = new_id()
                conn.execute(
                    INSERT_CONVERSATION,
                    {
                        "id": conversation_id,
                        "kind": "main",
                        "title": None,
                        "parent_run_id": None,
                        "version": 0,
                        "lease_holder": token if self.leases else None,
                        "lease_run_id": run_id if self.leases else None,
                        "lease_expires_at": expires if self.leases else None,
                        "created_at": stamp,
                        "updated_at": stamp,
                        "metadata": None,
                        "change_seq": self.stamp,
                    },
                )
            elif self.leases:
                lease = {"token": token, "run_id": run_id, "expires": expires, "now": stamp}
                lease["change_seq"] = self.stamp
                if not conn.execute(TAKE_LEASE, {**lease, "id": conversation_id}).rowcount:
                    raise RuntimeError(f"conversation {conversation_id} is busy")
            run_row = _run_row(run_id, conversation_id, stamp, self.budget)
            conn.execute(INSERT_RUN, self._stamped(run_row))
            last = conn.execute(NEXT_SEQ, (conversation_id,)).fetchone()[0]
            seq = 0 if last is None else last + 1
            user = _message(new_id(), "user", user_text, stamp)
            user_row = _conversation_row(user, conversation_id, seq, run_id)
            conn.execute(INSERT_MESSAGE, self._stamped(user_row))
        buffer_seq = 0
        for index in range(tool_steps):
            with self._transaction() as conn:
                stamp = self._renew_lease(conn, conversation_id, run_id, token, index + 1)
                calls = [
                    {
                        "id": call_id(index, p),
                        "name": TOOL_NAME,
                        "arguments": call_arguments(index, p),
                    }
                    for p in range(calls_per_step)
                ]
                assistant = _message(new_id(), "assistant", "", stamp, tool_calls=calls)
                step = _step_row(run_id, index, stamp, assistant, calls)
                conn.execute(INSERT_STEP, self._stamped(step))
                tools = [_tool_row(run_id, step, p, call, stamp) for p, call in enumerate(calls)]
                conn.executemany(INSERT_TOOL, [self._stamped(t) for t in tools])
                messages = [assistant]
                messages += [
                    _message(t["id"], "tool", RESULT, stamp, name=TOOL_NAME, call=t["tool_call_id"])
                    for t in tools
                ]
                conn.executemany(
                    INSERT_BUFFER,
                    [
                        _buffer_row(m, run_id, index, buffer_seq + n, "execution_buffer")
                        for n, m in enumerate(messages)
                    ],
                )
                buffer_seq += len(messages)
        with self._transaction() as conn:
            stamp = self._renew_lease(conn, conversation_id, run_id, token, steps)
            answer = _message(new_id(), "assistant", ANSWER, stamp)
            conn.execute(
                INSERT_STEP, self._stamped(_step_row(run_id, tool_steps, stamp, answer, []))
            )
            conn.execute(
                INSERT_BUFFER, _buffer_row(answer, run_id, tool_steps, buffer_seq, "messages")
            )
        with self._transaction() as conn:
            now = datetime.now(UTC)
            stamp = _text(now)
            if self.leases:
                conn.execute(FENCE, (_text(now + LEASE), self.stamp, conversation_id, token))
            answer_row = _conversation_row(answer, conversation_id, seq + 1, run_id)
            conn.execute(INSERT_MESSAGE, self._stamped(answer_row))
            conn.execute(FLUSH_BUFFER, (run_id,))
            conn.execute(
                END_RUN,
                {
                    "now": stamp,
                    "steps": steps,
                    "model": MODEL,
                    "input_tokens": USAGE.input_tokens * steps,
                    "output_tokens": USAGE.output_tokens * steps,
                    "id": run_id,
                    "change_seq": self.stamp,
                },
            )
            if self.leases:
                conn.execute(RELEASE, (stamp, self.stamp, conversation_id, token))
        return conversation_id

    def _renew_lease(
        self, conn: sqlite3.Connection, conversation_id: str, run_id: str, token: str, count: int
    ) -> str:
        """With ``leases``, the ledger's per-step fence and heartbeat; the step's timestamp."""
        now = datetime.now(UTC)
        stamp = _text(now)
        if self.leases:
            fence = (_text(now + LEASE), self.stamp, conversation_id, token)
            if not conn.execute(FENCE, fence).rowcount:
                raise RuntimeError("lost the lease")
            conn.execute(HEARTBEAT, (stamp, count, self.stamp, run_id))
        return stamp

    def _stamped(self, row: Row) -> Row:
        """``row`` with its transaction's change stamp."""
        return {**row, "change_seq": self.stamp}


def _run_row(run_id: str, conversation_id: str, stamp: str, budget: str) -> Row:
    return {
        "id": run_id,
        "conversation_id": conversation_id,
        "parent_run_id": None,
        "root_run_id": run_id,
        "depth": 0,
        "agent_name": "agent",
        "model": None,
        "status": "running",
        "stop_reason": None,
        "error": None,
        "started_at": stamp,
        "finished_at": None,
        "heartbeat_at": stamp,
        "step_count": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "cost_usd": None,
        "fully_priced": True,
        "budget": budget,
        "metadata": None,
    }


def _message(
    message_id: str,
    role: str,
    content: str,
    stamp: str,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    name: str | None = None,
    call: str | None = None,
) -> Row:
    """A message's columns, as in ``conversation_messages`` and ``execution_buffer_rows``."""
    return {
        "id": message_id,
        "role": role,
        "content": content,
        "name": name,
        "tool_calls": dumps(tool_calls) if tool_calls else NULL_JSON,
        "tool_call_id": call,
        "reasoning": None,
        "metadata": NULL_JSON,
        "created_at": stamp,
    }


def _conversation_row(message: Row, conversation_id: str, seq: int, run_id: str) -> Row:
    return {
        **message,
        "conversation_id": conversation_id,
        "section": "messages",
        "seq": seq,
        "run_id": run_id,
    }


def _buffer_row(message: Row, run_id: str, step_index: int, seq: int, section: str) -> Row:
    return {**message, "run_id": run_id, "step_index": step_index, "seq": seq, "section": section}


def _step_row(
    run_id: str, index: int, stamp: str, assistant: Row, calls: list[dict[str, Any]]
) -> Row:
    answered = not calls
    return {
        "id": new_id(),
        "run_id": run_id,
        "step_index": index,
        "step_type": "response" if answered else "tool_use",
        "model": MODEL,
        "finish_reason": None,
        "started_at": stamp,
        "finished_at": stamp,
        "duration_ms": 0.1,
        "input_tokens": USAGE.input_tokens,
        "output_tokens": USAGE.output_tokens,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "cost_usd": None,
        "should_continue": not answered,
        "stop_reason": "completed" if answered else None,
        "decided_by": "tool_calls",
        "outcome_detail": "the model answered" if answered else f"{len(calls)} tool call(s)",
        "final_response_required": False,
        "error": None,
        "message_id": assistant["id"],
        "content": assistant["content"],
        "reasoning": None,
        "metadata": NULL_JSON,
        "tool_call_count": len(calls),
    }


def _tool_row(run_id: str, step: Row, position: int, call: dict[str, Any], stamp: str) -> Row:
    return {
        "id": new_id(),
        "run_id": run_id,
        "step_id": step["id"],
        "step_index": step["step_index"],
        "position": position,
        "tool_call_id": call["id"],
        "tool_name": call["name"],
        "arguments": dumps(call["arguments"]),
        "validated_arguments": dumps(call["arguments"]),
        "result": RESULT,
        "is_error": False,
        "error": None,
        "started_at": stamp,
        "finished_at": stamp,
        "duration_ms": 0.01,
        "child_run_id": None,
        "metadata": NULL_JSON,
    }


TABLES = (
    "conversations",
    "agent_runs",
    "conversation_messages",
    "execution_buffer_rows",
    "step_executions",
    "tool_executions",
)
JSON_COLUMNS = {
    "conversation_messages": ("tool_calls", "metadata"),
    "step_executions": ("metadata",),
    "tool_executions": ("arguments", "validated_arguments", "metadata"),
    "agent_runs": ("budget",),
}


def row_profile(path: Path) -> dict[str, tuple[int, ...]]:
    """Per table, the row count and the total length of its JSON columns: two files written
    by the ledger and by :class:`RawLedger` for the same runs must agree on both."""
    conn = sqlite3.connect(path)
    try:
        profile = {}
        for table in TABLES:
            lengths = ", ".join(f"sum(length({c}))" for c in JSON_COLUMNS.get(table, ()))
            query = f"SELECT count(*){', ' + lengths if lengths else ''} FROM {table}"
            profile[table] = tuple(conn.execute(query).fetchone())
        return profile
    finally:
        conn.close()


def check_same_rows(library: Path, raw: Path) -> None:
    """Fail loudly when the raw writer stopped writing what the ledger writes."""
    ours, theirs = row_profile(library), row_profile(raw)
    if ours != theirs:
        raise AssertionError(
            f"the raw sqlite3 writer no longer writes the ledger's rows: {library.name} has "
            f"{ours}, {raw.name} has {theirs} (row counts, JSON lengths); update bench/_raw.py"
        )


def checkpointed_size(path: Path) -> int:
    """The database's size in bytes after ``PRAGMA wal_checkpoint(TRUNCATE)`` (main file plus
    what is left of the WAL, which the checkpoint empties)."""
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy:
        raise RuntimeError(f"could not checkpoint {path}: a reader or writer holds it")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

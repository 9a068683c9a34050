"""The invariants every ledger keeps after any fault, read with SQL from the database itself.

:func:`violations` returns every way a database breaks them (empty when it keeps them all):
the rules of runs as transactions (:func:`crash_child.transaction_violations`: one user message
per run, one answer per completed run and none in an unfinished one but an interrupted run's
single answer flagged ``interrupted`` (what the user was shown), no trace in a separated
conversation, contiguous ``seq`` and step indexes, totals equal to the steps' sums, no buffer
outside running or failed runs, no lease held by an ended run, ``integrity_check`` and
``foreign_key_check`` clean), plus the one other agent stores break for good: every tool call
in any model-visible history (a conversation, a run's execution buffer) has exactly one result,
right after it; and every row that carries a checksum matches it (``Ledger.verify``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection

from agentledger.ledger import migrate
from agentledger.ledger.checksums import damaged_rows
from support.crash_child import connect, rows, transaction_violations


def violations(url: str, *, separated: bool = True) -> list[str]:
    """Every invariant, read on one connection (some tests check after every step)."""
    with connect(url) as conn:
        return [
            *transaction_violations(conn, separated=separated),
            *pairing_violations(conn),
            *checksum_violations(conn),
        ]


def checksum_violations(conn: Connection) -> list[str]:
    """Rows whose checksum does not match them: written half, or by a stale process."""
    if migrate.current(conn.engine) != migrate.head():
        return []  # a ledger at an older revision (a migration test): its code sealed its rows
    return damaged_rows(conn)


def pairing_violations(conn: Connection) -> list[str]:
    """Tool calls without exactly one result right after them, in each model-visible history."""
    histories: dict[str, list[tuple[str, Any, str | None]]] = defaultdict(list)
    for conversation_id, section, role, tool_calls, tool_call_id in rows(
        conn,
        "SELECT conversation_id, section, role, tool_calls, tool_call_id "
        "FROM conversation_messages ORDER BY conversation_id, seq",
    ):
        where = f"conversation {conversation_id} ({section})"
        histories[where].append((role, tool_calls, tool_call_id))
    for run_id, role, tool_calls, tool_call_id in rows(
        conn,
        "SELECT run_id, role, tool_calls, tool_call_id FROM execution_buffer_rows "
        "ORDER BY run_id, seq",
    ):
        histories[f"buffer of run {run_id}"].append((role, tool_calls, tool_call_id))
    problems: list[str] = []
    for where, messages in histories.items():
        problems.extend(f"{where}: {p}" for p in _unpaired(messages))
    return problems


def _unpaired(messages: list[tuple[str, Any, str | None]]) -> list[str]:
    problems: list[str] = []
    for index, (role, tool_calls, _) in enumerate(messages):
        calls = _call_ids(tool_calls)
        if not calls:
            if role == "tool" and not _answers_a_call(messages, index):
                problems.append(f"tool result at {index} answers no call right before it")
            continue
        results = [m[2] for m in messages[index + 1 : index + 1 + len(calls)] if m[0] == "tool"]
        if sorted(results) != sorted(calls):
            problems.append(f"calls {calls} at {index} are followed by results {results}")
    return problems


def _answers_a_call(messages: list[tuple[str, Any, str | None]], index: int) -> bool:
    back = index - 1
    while back >= 0 and messages[back][0] == "tool":
        back -= 1
    return back >= 0 and messages[index][2] in _call_ids(messages[back][1])


def _call_ids(tool_calls: Any) -> list[str]:
    if isinstance(tool_calls, str):
        tool_calls = json.loads(tool_calls)
    return [call["id"] for call in tool_calls or ()]

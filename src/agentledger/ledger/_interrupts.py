"""Interrupted turns: what a streaming run has shown so far, kept on its row, and the answer
cut short that a cancel (or the abandon of a run whose process died) commits from it.

A running run's partial output is one value overwritten at every flush: ``partial_output`` and
``partial_step_index`` on its ``agent_runs`` row, the row every step already updates, rather
than buffer rows, which are whole messages sealed once. Recording the step, or ending the run,
clears it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update

from ..recording import LATE_TOOL_RESULTS
from ..values import AgentStatus, Message, printable
from ._reads import next_seq
from ._rows import message_columns
from .checksums import CHECKSUM, sealed
from .tables import agent_runs, conversation_messages, conversations

RECORD_PARTIAL_OUTPUT = (
    update(agent_runs)
    .where(agent_runs.c.id == bindparam("run_id"))
    .values(
        partial_output=bindparam("text"),
        partial_step_index=bindparam("step"),
        heartbeat_at=bindparam("beat"),
    )
)

_INSERT_MESSAGE = insert(conversation_messages)


def append_interrupted_answer(
    conn: Connection, conversation_id: str, run_id: str, answer: Message, owned_by: Any
) -> None:
    """Append ``answer`` (flagged interrupted) to the conversation, as run ``run_id``'s, in the
    tenant of ``owned_by`` (the run's lease, or its row)."""
    tenant = owned_by["tenant_id"] if isinstance(owned_by, dict) else owned_by.tenant_id
    row = {
        "tenant_id": tenant,
        **message_columns(answer),
        "conversation_id": conversation_id,
        "section": "messages",
        "seq": next_seq(conn, conversation_id),
        "run_id": run_id,
        "interrupted": answer.interrupted,
    }
    conn.execute(_INSERT_MESSAGE, sealed(conversation_messages, row))


def count_new_version(conn: Connection, conversation_id: str, now: datetime) -> None:
    """A conversation that gained an answer outside a commit has a new version all the same."""
    conn.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id)
        .values(version=conversations.c.version + 1, updated_at=now)
    )


def interrupted_answer_of(conn: Connection, run_id: str) -> str | None:
    """The text of run ``run_id``'s interrupted answer, if it has one."""
    found: Any = conn.execute(
        select(conversation_messages.c.content).where(
            conversation_messages.c.run_id == run_id,
            conversation_messages.c.interrupted,
        )
    ).scalar()
    return None if found is None else str(found)


def add_late_tool_result(conn: Connection, run_id: str, call_id: str, result: str) -> None:
    """Keep ``result`` of call ``call_id``, which returned after run ``run_id`` was interrupted,
    in the run's metadata (``late_tool_results``); a run not interrupted is left alone."""
    found = (
        conn.execute(select(agent_runs).where(agent_runs.c.id == run_id).with_for_update())
        .mappings()
        .first()
    )
    if found is None or found["status"] != AgentStatus.INTERRUPTED.value:
        return
    metadata = dict(found["metadata"] or {})
    late = {**(metadata.get(LATE_TOOL_RESULTS) or {}), call_id: printable(result)}
    row = sealed(agent_runs, {**found, "metadata": {**metadata, LATE_TOOL_RESULTS: late}})
    conn.execute(
        update(agent_runs)
        .where(agent_runs.c.id == run_id)
        .values(metadata=row["metadata"], checksum=row[CHECKSUM])
    )

"""Interrupted turns: what a streaming run has shown so far, kept on its row, the answer cut
short that a cancel (or the abandon of a run whose process died) commits from it, and the late
result of a tool call the cancel answered.

A running run's partial output is one value overwritten at every flush: ``partial_output`` and
``partial_step_index`` on its ``agent_runs`` row, the row every step already updates, rather
than buffer rows, which are whole messages sealed once. Recording the step, or ending the run,
clears it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update

from .._recording import with_late_result
from .._values import Message, ToolExecution
from ._reads import next_seq
from ._row_mapping import message_columns, tool_columns, tool_execution_of
from .checksums import sealed
from .tables import (
    agent_runs,
    conversation_messages,
    conversations,
    step_executions,
    tool_executions,
)

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


def add_late_tool_result(conn: Connection, run_id: str, late: ToolExecution) -> None:
    """Add ``late``, a tool call that returned after run ``run_id`` was interrupted, to the
    execution its interrupt recorded for the call (in the run's interrupted step), sealed
    again; a run with no such execution is left alone."""
    tools, steps = tool_executions.c, step_executions.c
    found = (
        conn.execute(
            select(tool_executions)
            .join(step_executions, steps.id == tools.step_id)
            .where(
                tools.run_id == run_id,
                tools.tool_call_id == late.tool_call.id,
                steps.interrupted,
            )
            .with_for_update(of=tool_executions)
        )
        .mappings()
        .first()
    )
    if found is None:
        return
    kept = with_late_result(tool_execution_of(found), late)  # checks the row it read
    columns = tool_columns(run_id, found["step_id"], found["step_index"], found["position"], kept)
    row = sealed(tool_executions, {**found, **columns})
    changed = {k: row[k] for k in (*_LATE_COLUMNS, "checksum")}
    conn.execute(update(tool_executions).where(tools.id == found["id"]).values(changed))


_LATE_COLUMNS = (
    "validated_arguments",
    "result",
    "error",
    "finished_at",
    "duration_ms",
    "child_run_id",
    "metadata",
)
"""The columns of a tool execution a late result changes."""

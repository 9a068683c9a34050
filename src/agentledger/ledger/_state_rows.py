"""The rows a run's transactions write, built from the run's state: its row as it begins, its
messages, the masking done before a step; and the conversation a compaction claims.

Every row of a run carries its conversation's tenant (the run's row its owner too), as read
when the run took the conversation's lease (:class:`._leases.Lease`), never the writing
handle's scope: a run that an unscoped handle records in a tenant's conversation is that
tenant's all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, or_, select, update

from .._values import (
    AgentState,
    AgentStatus,
    Compaction,
    CompactionKind,
    FiledMessage,
    Message,
    Messages,
    StepExecution,
)
from ..errors import ConversationBusyError, UsageError
from ._leases import Lease
from ._row_mapping import (
    budget_json,
    compaction_columns,
    message_columns,
    step_columns,
    tool_columns,
)
from .checksums import sealed
from .tables import (
    context_compactions,
    conversation_messages,
    conversations,
    execution_buffer_rows,
    step_executions,
    tool_executions,
)


def claim_for_compaction(conn: Connection, conversation_id: str, now: datetime) -> None:
    """Take the conversation's row (serializing this with runs and other compactions) and
    count a new version of it; :class:`ConversationBusyError` while a run holds it."""
    claimed = conn.execute(
        update(conversations)
        .where(
            conversations.c.id == conversation_id,
            or_(conversations.c.lease_holder.is_(None), conversations.c.lease_expires_at <= now),
        )
        .values(version=conversations.c.version + 1, updated_at=now)
    ).rowcount
    if not claimed:
        raise ConversationBusyError(
            f"conversation {conversation_id} is busy: a run is in progress on it. "
            "Compact it once the run has ended."
        )


def run_id_of(state: AgentState) -> str:
    if state.run_id is None:
        raise UsageError("the state has no run: begin one first (Agent.run does)")
    return state.run_id


def begun_run_row(
    state: AgentState, agent_name: str, now: datetime, lease: Lease
) -> dict[str, Any]:
    """The row of a run that begins: what the ledger inserts, and keeps to seal its end."""
    run_id = run_id_of(state)
    return {
        "id": run_id,
        "conversation_id": state.conversation_id,
        "parent_run_id": state.parent_run_id,
        "root_run_id": state.root_run_id or run_id,
        "depth": state.depth,
        "agent_name": agent_name,
        "status": AgentStatus.RUNNING.value,
        "started_at": state.run_started_at or now,
        "heartbeat_at": now,
        "budget": budget_json(state.budget),
        "metadata": state.metadata or None,
        "tenant_id": lease.tenant_id,
        "owner_id": lease.owner_id,
    }


def step_rows(
    lease: Lease, run_id: str, execution: StepExecution, filed: Sequence[FiledMessage]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows a step writes, sealed: its own, its tool executions', and its trace messages'
    in the run's execution buffer (``filed``: each with its section)."""
    index = execution.step_index
    step = sealed(step_executions, {**step_columns(run_id, execution), **lease.tenant})
    tools = [
        sealed(tool_executions, {**tool_columns(run_id, step["id"], index, n, e), **lease.tenant})
        for n, e in enumerate(execution.step.tool_executions)
    ]
    buffer = [
        sealed(
            execution_buffer_rows,
            {
                **message_columns(message),
                "run_id": run_id,
                "step_index": index,
                "seq": lease.next_buffer_seq + n,
                "section": section,
                **lease.tenant,
            },
        )
        for n, (section, message) in enumerate(filed)
    ]
    return step, tools, buffer


def masking_row(lease: Lease, run_id: str, execution: StepExecution) -> dict[str, Any] | None:
    """The ``context_compactions`` row of the masking done before ``execution``, if any."""
    masking = execution.step.context_masking
    if masking is None:
        return None
    compaction = Compaction(
        conversation_id=lease.conversation_id,
        kind=CompactionKind.MASKING,
        messages=masking.masked,
        tokens_before=masking.tokens_before,
        tokens_after=masking.tokens_after,
        run_id=run_id,
        step_index=execution.step_index,
        created_at=execution.started_at,
    )
    return sealed(context_compactions, {**compaction_columns(compaction), **lease.tenant})


def message_row(
    message: Message,
    conversation_id: str,
    seq: int,
    section: str,
    run_id: str | None,
    tenant_id: str | None,
) -> dict[str, Any]:
    """A conversation message's row, sealed."""
    return sealed(
        conversation_messages,
        {
            **message_columns(message),
            "conversation_id": conversation_id,
            "section": section,
            "seq": seq,
            "run_id": run_id,
            "interrupted": message.interrupted,
            "tenant_id": tenant_id,
        },
    )


def unpersisted(conn: Connection, state: AgentState) -> Messages:
    """The conversation messages of ``state`` after the last one the ledger holds."""
    last = conn.execute(
        select(conversation_messages.c.id)
        .where(
            conversation_messages.c.conversation_id == state.conversation_id,
            conversation_messages.c.section == AgentState.DEFAULT_SECTION,
        )
        .order_by(conversation_messages.c.seq.desc())
        .limit(1)
    ).scalar()
    return state.messages() if last is None else messages_after(state, last)


def messages_after(state: AgentState, last: str) -> Messages:
    """The conversation messages of ``state`` after the message ``last``."""
    messages = state.messages()
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == last:
            return messages[index + 1 :]
    raise UsageError(
        f"the state of run {state.run_id} does not contain the conversation's last stored "
        f"message {last}: it was not loaded from this ledger's conversation "
        f"{state.conversation_id}, so the ledger cannot tell which messages are new"
    )

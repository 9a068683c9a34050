"""The rows a graph framework's saver writes to the checkpoint tables (revision 0014), and the
statements that write them, compiled once for the ledger's fast path
(:func:`~agentledger.ledger._statements.statements_for`): a checkpoint, its channel values and
its writes are stored at every step of a graph, a few times per turn of a chat."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, select

from .._values import new_id
from ._graph_values import CheckpointKey, PendingWrite, StoredCheckpoint
from .checksums import sealed
from .tables import graph_channel_values, graph_checkpoints, graph_writes


def at_bound(table: Table) -> Any:
    """Where a table's row is of one checkpoint: its key bound by name (:func:`key_values`)."""
    c = table.c
    return (
        (c.thread_id == bindparam("thread_id"))
        & (c.checkpoint_ns == bindparam("checkpoint_ns"))
        & (c.checkpoint_id == bindparam("checkpoint_id"))
    )


def key_values(key: CheckpointKey) -> dict[str, str]:
    return {
        "thread_id": key.thread_id,
        "checkpoint_ns": key.checkpoint_ns,
        "checkpoint_id": key.checkpoint_id,
    }


PARENT_VERSIONS = select(graph_checkpoints.c.channel_versions).where(at_bound(graph_checkpoints))
DELETE_CHECKPOINT = delete(graph_checkpoints).where(at_bound(graph_checkpoints))
INSERT_CHECKPOINT = insert(graph_checkpoints)
VALUE_THERE = select(graph_channel_values.c.id).where(
    (graph_channel_values.c.thread_id == bindparam("thread_id"))
    & (graph_channel_values.c.checkpoint_ns == bindparam("checkpoint_ns"))
    & (graph_channel_values.c.channel == bindparam("channel"))
    & (graph_channel_values.c.version == bindparam("version"))
)
INSERT_VALUE = insert(graph_channel_values)
WRITES_THERE = select(graph_writes.c.task_id, graph_writes.c.idx).where(at_bound(graph_writes))
DELETE_WRITE = delete(graph_writes).where(
    at_bound(graph_writes)
    & (graph_writes.c.task_id == bindparam("task_id"))
    & (graph_writes.c.idx == bindparam("idx"))
)
INSERT_WRITE = insert(graph_writes)


def checkpoint_row(stored: StoredCheckpoint, tenant: str | None, now: Any) -> dict[str, Any]:
    key = stored.key
    row = {
        "id": new_id(),
        "thread_id": key.thread_id,
        "checkpoint_ns": key.checkpoint_ns,
        "checkpoint_id": key.checkpoint_id,
        "parent_checkpoint_id": stored.parent_checkpoint_id,
        "graph_run_id": stored.graph_run_id,
        "checkpoint_type": stored.checkpoint_type,
        "checkpoint": stored.checkpoint,
        "channel_versions": stored.channel_versions,
        "metadata": stored.metadata,
        "created_at": now,
        "tenant_id": tenant,
    }
    return sealed(graph_checkpoints, row)


def write_row(key: CheckpointKey, pending: PendingWrite, tenant: str | None) -> dict[str, Any]:
    row = {
        "id": new_id(),
        "thread_id": key.thread_id,
        "checkpoint_ns": key.checkpoint_ns,
        "checkpoint_id": key.checkpoint_id,
        "task_id": pending.task_id,
        "idx": pending.idx,
        "channel": pending.channel,
        "value_type": pending.value_type,
        "value": pending.value,
        "task_path": pending.task_path,
        "tenant_id": tenant,
    }
    return sealed(graph_writes, row)

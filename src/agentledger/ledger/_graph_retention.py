"""Retention of a graph framework's checkpoints: which checkpoints of a thread a policy keeps
(the latest N of each namespace, those newer than a moment), and what the survivors still need.

A thread's history grows by a few checkpoints at every step of every invocation; an
application keeps the recent ones (to resume, to travel back a little) and lets the rest go.
What a survivor refers to must stay readable:

- the message rows its channels hold stay (retention deletes checkpoints, never the
  conversation), and so do the channel versions a surviving version is stored against
  (``GraphCheckpoints._collect_values`` keeps them);
- a channel LangGraph rebuilds from the writes of its ancestors (a ``DeltaChannel``: its value
  is stored only every so many updates) keeps those ancestors, back to the one holding its
  value (:func:`chosen` walks to it);
- a survivor whose parent goes becomes the start of the thread's history: its
  ``parent_checkpoint_id`` is cleared, rather than naming a checkpoint that is gone.

The choice is pure code over the rows read (:func:`chosen`); reading and the one update are
thin functions around it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update

from ..errors import UsageError
from ._graph_values import CheckpointKey
from .checksums import CHECKSUM, check_row, checksum
from .tables import graph_channel_values, graph_checkpoints

DELTA_COUNTERS_KEY = "counters_since_delta_snapshot"
"""The key of a LangGraph checkpoint's metadata naming its delta channels (those whose value
is stored only at a snapshot, and rebuilt from the writes of the checkpoints before it)."""


@dataclass(frozen=True)
class Retention:
    """Which checkpoints of each namespace of a thread stay: the ``keep_latest`` newest, and
    only those made after ``newer_than`` (each given limit deletes more; at least one is
    given)."""

    keep_latest: int | None = None
    newer_than: datetime | None = None

    def __post_init__(self) -> None:
        if self.keep_latest is None and self.newer_than is None:
            raise UsageError(
                "retention needs keep_latest (how many checkpoints of each namespace to keep), "
                "newer_than (a time: older checkpoints go), or both"
            )
        latest = self.keep_latest
        if latest is not None and (isinstance(latest, bool) or not isinstance(latest, int)):
            raise UsageError(f"keep_latest must be a whole number, not {latest!r}")
        if latest is not None and latest < 1:
            raise UsageError(
                f"keep_latest must be 1 or more, not {latest}: to delete every checkpoint of "
                "a thread, use LedgerSaver.delete_thread (or prune with strategy='delete')"
            )
        moment = self.newer_than
        if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
            raise UsageError(
                f"newer_than must be a timezone-aware datetime (such as "
                f"datetime.now(UTC) - timedelta(days=30)), not {moment!r}"
            )

    def keeps(self, rank: int, made: datetime) -> bool:
        """Whether the ``rank``-th newest checkpoint of a namespace (0: the newest), made at
        ``made``, stays by the policy itself (before what survivors need)."""
        if self.keep_latest is not None and rank >= self.keep_latest:
            return False
        return self.newer_than is None or made > self.newer_than


@dataclass(frozen=True)
class Listed:
    """A checkpoint as retention sees it: where it is, its parent, when it was made, its
    channel versions and the delta channels its metadata names."""

    row_id: str
    key: CheckpointKey
    parent_id: str | None
    created_at: datetime
    versions: Mapping[str, str]
    delta_channels: tuple[str, ...]

    def unstored(self, channel: str, stored: set[tuple[str, str, str]]) -> bool:
        """Whether LangGraph rebuilds ``channel`` at this checkpoint from its ancestors'
        writes: it has a version, and no value is stored for it."""
        version = self.versions.get(channel)
        return version is not None and (self.key.checkpoint_ns, channel, version) not in stored


@dataclass(frozen=True)
class Choice:
    """What retention does to a thread: the checkpoints that go, and the survivors whose
    parent goes with them (their parent is cleared)."""

    doomed: list[CheckpointKey]
    orphaned: list[str]
    """The row ids of the survivors whose parent goes."""


def chosen(
    listed: Sequence[Listed], stored: set[tuple[str, str, str]], policy: Retention
) -> Choice:
    """What ``policy`` does to a thread whose checkpoints are ``listed``; ``stored`` are the
    ``(namespace, channel, version)`` of its delta channels that hold a value."""
    index = {c.key: c for c in listed}
    kept = _kept_by_policy(listed, policy)
    _keep_delta_ancestors(kept, index, stored)
    doomed = [c.key for c in listed if c.key not in kept]
    gone = set(doomed)
    orphaned = [c.row_id for c in listed if c.key in kept and _parent_key(c) in gone]
    return Choice(doomed, orphaned)


def _kept_by_policy(listed: Sequence[Listed], policy: Retention) -> set[CheckpointKey]:
    """The checkpoints ``policy`` itself keeps, ranked newest first in each namespace."""
    ranks: dict[str, int] = {}
    kept = set()
    for c in sorted(listed, key=lambda c: c.key.checkpoint_id, reverse=True):
        rank = ranks.get(c.key.checkpoint_ns, 0)
        ranks[c.key.checkpoint_ns] = rank + 1
        if policy.keeps(rank, c.created_at):
            kept.add(c.key)
    return kept


def _keep_delta_ancestors(
    kept: set[CheckpointKey],
    index: Mapping[CheckpointKey, Listed],
    stored: set[tuple[str, str, str]],
) -> None:
    """Add to ``kept`` the ancestors whose writes rebuild a survivor's delta channels: back,
    for each such channel, to the nearest one holding its value (as LangGraph's walk does).
    Each (checkpoint, channel) is walked once, however many survivors lead to it."""
    walked: set[tuple[CheckpointKey, str]] = set()
    todo = list(kept)
    while todo:
        cursor = index[todo.pop()]
        needed = {ch for ch in cursor.delta_channels if cursor.unstored(ch, stored)}
        while needed and cursor.parent_id is not None:
            parent = index.get(_parent_key(cursor))
            if parent is None:
                break
            needed = {ch for ch in needed if (parent.key, ch) not in walked}
            walked.update((parent.key, ch) for ch in needed)
            if needed and parent.key not in kept:
                kept.add(parent.key)
                todo.append(parent.key)
            needed = {ch for ch in needed if parent.unstored(ch, stored)}
            cursor = parent


def _parent_key(c: Listed) -> CheckpointKey:
    return CheckpointKey(c.key.thread_id, c.key.checkpoint_ns, c.parent_id or "")


# --- reading and writing ------------------------------------------------------------------------


def listed_checkpoints(conn: Connection, condition: Any) -> list[Listed]:
    """The checkpoints ``condition`` chooses (a thread's, in the handle's scope)."""
    c = graph_checkpoints.c
    query = select(
        c.id,
        c.thread_id,
        c.checkpoint_ns,
        c.checkpoint_id,
        c.parent_checkpoint_id,
        c.created_at,
        c.channel_versions,
        c.metadata,
    ).where(condition)
    return [_listed(row) for row in conn.execute(query).mappings()]


def _listed(row: Any) -> Listed:
    counters = (row["metadata"] or {}).get(DELTA_COUNTERS_KEY)
    return Listed(
        row_id=row["id"],
        key=CheckpointKey(row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"]),
        parent_id=row["parent_checkpoint_id"],
        created_at=row["created_at"],
        versions=dict(row["channel_versions"] or {}),
        delta_channels=tuple(sorted(counters)) if isinstance(counters, dict) else (),
    )


def stored_values(
    conn: Connection, thread_id: str, listed: Iterable[Listed]
) -> set[tuple[str, str, str]]:
    """The ``(namespace, channel, version)`` of the delta channels of ``listed`` that hold a
    value in thread ``thread_id`` (none is read for a thread without delta channels)."""
    channels = sorted({ch for c in listed for ch in c.delta_channels})
    if not channels:
        return set()
    v = graph_channel_values.c
    held = (v.value_type.is_not(None)) | (v.message_ids.is_not(None))
    query = select(v.checkpoint_ns, v.channel, v.version).where(
        (v.thread_id == thread_id) & v.channel.in_(channels) & held
    )
    return {(ns, channel, version) for ns, channel, version in conn.execute(query)}


def clear_parents(conn: Connection, row_ids: Sequence[str]) -> None:
    """Clear the parent of the checkpoints whose rows are ``row_ids`` (theirs went), their
    checksums sealed again."""
    c = graph_checkpoints.c
    for row_id in row_ids:
        row = dict(conn.execute(select(graph_checkpoints).where(c.id == row_id)).mappings().one())
        check_row(graph_checkpoints, row)
        row["parent_checkpoint_id"] = None
        sealed = checksum(graph_checkpoints, row)
        conn.execute(
            update(graph_checkpoints)
            .where(c.id == row_id)
            .values(parent_checkpoint_id=None, **{CHECKSUM: sealed})
        )

"""``LedgerSaver``: LangGraph's ``BaseCheckpointSaver`` over an agentledger ledger.

Every method of the saver, base and extended (``delete_for_runs``, ``copy_thread``,
``prune``), sync and async, is one transaction of ``ledger.graph_checkpoints``: ``put`` and
``put_writes`` write the rows of the runs they bring (:mod:`._runs`) in it too, with one commit,
as LangGraph's own savers commit once per call; how channel values are encoded is
:mod:`._messages`'s to decide. The async methods run the sync ones in a worker
thread (``asyncio.to_thread``), as the ledger's other async callers do: the event loop never
waits on the database.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base import PendingWrite as GraphWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...errors import UsageError
from ...ledger import (
    ChannelValue,
    CheckpointKey,
    CheckpointQuery,
    Ledger,
    PendingWrite,
    StoredCheckpoint,
)
from .._ledger_argument import a_ledger
from ._messages import MessageChannels

WRITE_LOCKS = 64
"""How many locks a saver's threads share to queue their writes (a thread's are in order)."""

PRUNE_STRATEGIES = ("keep_latest", "delete")
"""What ``prune`` keeps of each namespace of a thread: its newest checkpoint, or nothing."""


class LedgerSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in an agentledger :class:`~agentledger.ledger.Ledger`.

    ``builder.compile(checkpointer=LedgerSaver(ledger))``. A thread is the conversation whose
    id is the thread's id (created, in the ledger handle's scope, by its first checkpoint).
    Each invocation is a run of it, its messages rows of the conversation and its trace
    (:mod:`._runs`). Its checkpoints, their channel values (each version stored once, whatever
    number of checkpoints hold it) and pending writes are rows of the ledger's checkpoint
    tables (``graph_checkpoints``, ``graph_channel_values``, ``graph_writes``): a channel of
    messages as the ids of their rows, the others as LangGraph's serializer wrote them
    (:mod:`._messages`); ``ledger.forget(thread_id)`` deletes them with the conversation, and
    a scoped ledger keeps to its tenant's threads.
    """

    def __init__(self, ledger: Ledger, *, serde: SerializerProtocol | None = None) -> None:
        ledger = a_ledger(ledger, "LedgerSaver")
        super().__init__(serde=serde)
        self.ledger = ledger
        self._store = ledger.graph_checkpoints
        self._messages = MessageChannels(ledger, self.serde)
        self._writing = [threading.Lock() for _ in range(WRITE_LOCKS)]
        """The threads' writes queue on these, a thread always on the same one."""

    def __repr__(self) -> str:
        return f"LedgerSaver({self.ledger!r})"

    # --- the base capabilities --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its newest when it names no checkpoint id)."""
        thread_id, ns = _thread_of(config)
        known = self._messages.rows_read(thread_id)
        stored = self._store.get(thread_id, ns, get_checkpoint_id(config), known=known)
        return None if stored is None else self._tuple_of(stored)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (every thread when None), newest first."""
        configurable = (config or {}).get("configurable", {})
        query = CheckpointQuery(
            thread_id=configurable.get("thread_id"),
            checkpoint_ns=configurable.get("checkpoint_ns"),
            checkpoint_id=configurable.get("checkpoint_id"),
            before=get_checkpoint_id(before) if before else None,
            metadata=filter,
            limit=limit,
        )
        thread_id = configurable.get("thread_id")
        known = self._messages.rows_read(thread_id) if isinstance(thread_id, str) else {}
        for stored in self._store.find(query, known=known):
            yield self._tuple_of(stored)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` and the channel versions it brings (``new_versions``)."""
        thread_id, ns = _thread_of(config)
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        checkpoint_type, serialized = self.serde.dumps_typed(body)
        key = CheckpointKey(thread_id, ns, checkpoint["id"])
        stored = StoredCheckpoint(
            key=key,
            parent_checkpoint_id=get_checkpoint_id(config),
            checkpoint_type=checkpoint_type,
            checkpoint=serialized,
            channel_versions={ch: _version(v) for ch, v in checkpoint["channel_versions"].items()},
            metadata=dict(get_serializable_checkpoint_metadata(config, metadata)),
        )

        def store() -> None:
            values = checkpoint["channel_values"]
            new_values = self._messages.encoded(
                key,
                get_checkpoint_id(config),
                {ch: values[ch] for ch in new_versions if ch in values},
                metadata,
            )
            self._store.put(
                stored,
                {
                    (ch, _version(v)): new_values.get(ch, ChannelValue())
                    for ch, v in new_versions.items()
                },
            )

        self._together(thread_id, "storing a checkpoint", store)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": key.checkpoint_id,
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the writes of task ``task_id`` for the checkpoint ``config`` names."""
        thread_id, ns = _thread_of(config)
        key = CheckpointKey(thread_id, ns, config["configurable"]["checkpoint_id"])
        pending = []
        for idx, (channel, value) in enumerate(writes):
            value_type, serialized = self.serde.dumps_typed(value)
            index = WRITES_IDX_MAP.get(channel, idx)
            pending.append(PendingWrite(task_id, index, channel, value_type, serialized, task_path))

        def store() -> None:
            self._store.put_writes(key, pending)
            for channel, value in writes:
                self._messages.end_run(key, channel, value)

        self._together(thread_id, "storing a checkpoint's pending writes", store)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes (its conversation stays in the ledger:
        ``ledger.forget(thread_id)`` deletes it with everything else of it)."""
        self._store.delete_thread(thread_id)
        self._messages.forget(thread_id)

    # --- the extended capabilities ----------------------------------------------------------

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) of LangGraph's runs ``run_ids``."""
        self._store.delete_runs(list(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint of one thread, with its writes, to another."""
        values = self._messages.copied(source_thread_id)
        self._store.copy_thread(source_thread_id, target_thread_id, values)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the newest checkpoint of each namespace of each thread
        (``"keep_latest"``, as :meth:`retain` with ``keep_latest=1``), or none
        (``"delete"``)."""
        if strategy not in PRUNE_STRATEGIES:
            raise UsageError(
                f"prune strategy {strategy!r} is not one of {', '.join(PRUNE_STRATEGIES)}"
            )
        self._store.prune(list(thread_ids), keep_latest=strategy == "keep_latest")

    # --- retention ----------------------------------------------------------------------------

    def retain(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        keep_latest: int | None = None,
        newer_than: datetime | None = None,
    ) -> int:
        """Keep only the ``keep_latest`` newest checkpoints of each namespace of each thread
        (``None``: every thread of the ledger handle's scope), and only those made after
        ``newer_than`` (an aware datetime); given both, both limits hold. Returns how many
        checkpoints were deleted.

        Every survivor reads back as before: its messages (their rows stay: retention never
        deletes the conversation; ``ledger.forget`` does), its pending writes, and a
        ``DeltaChannel``'s value (the ancestors it is rebuilt from stay, back to its last
        snapshot). The oldest survivor becomes the start of the history: its
        ``parent_config`` is ``None``."""
        return self._store.retain(thread_ids, keep_latest=keep_latest, newer_than=newer_than)

    async def aretain(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        keep_latest: int | None = None,
        newer_than: datetime | None = None,
    ) -> int:
        return await asyncio.to_thread(
            self.retain, thread_ids, keep_latest=keep_latest, newer_than=newer_than
        )

    # --- async ------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        listed = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in listed:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version above ``current``: its whole number plus one, then a random fraction (as
        LangGraph's own savers make them), so that versions sort as text."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # --- inside -----------------------------------------------------------------------------

    def _together(self, thread_id: str, what: str, work: Callable[[], None]) -> None:
        """``work`` (a checkpoint or writes stored, with the runs' rows they bring) in one
        transaction, one commit, after the thread's other writes from this process (LangGraph
        stores a step's writes and its next checkpoint from threads at once: they queue here
        rather than poll the database's lock). When it fails, nothing of it was written: what
        the saver knew of the thread's open run and rows is dropped with it."""
        with self._writing[hash(thread_id) % len(self._writing)]:
            try:
                self._store.together(what, work)
            except BaseException as exc:
                self._messages.discard(thread_id, f"{type(exc).__name__}: {exc}")
                raise

    # --- reading back -----------------------------------------------------------------------

    def _tuple_of(self, stored: StoredCheckpoint) -> CheckpointTuple:
        key = stored.key
        checkpoint: Checkpoint = self.serde.loads_typed((stored.checkpoint_type, stored.checkpoint))
        checkpoint["channel_values"] = self._messages.decoded(stored)
        writes: list[GraphWrite] = [
            (w.task_id, w.channel, self.serde.loads_typed((w.value_type, w.value)))
            for w in stored.writes
        ]
        parent = stored.parent_checkpoint_id
        return CheckpointTuple(
            config=_config(key.thread_id, key.checkpoint_ns, key.checkpoint_id),
            checkpoint=checkpoint,
            # JSON as put() stored it from a CheckpointMetadata.
            metadata=cast(CheckpointMetadata, stored.metadata),
            parent_config=None
            if parent is None
            else _config(key.thread_id, key.checkpoint_ns, parent),
            pending_writes=writes,
        )


def _thread_of(config: RunnableConfig) -> tuple[str, str]:
    configurable = config.get("configurable", {})
    thread_id = configurable.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise UsageError(
            "a LangGraph config needs a thread id: pass "
            "{'configurable': {'thread_id': '...'}} (the thread is a conversation of the ledger)"
        )
    return thread_id, str(configurable.get("checkpoint_ns") or "")


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _version(version: str | int | float) -> str:
    """A channel version as the text the tables key it by (its JSON: ``1`` and ``"1"`` differ)."""
    return json.dumps(version)

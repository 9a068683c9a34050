"""``GraphCheckpoints``: the checkpoint tables of revision 0014, read and written for a graph
framework's saver (``ledger.graph_checkpoints``; LangGraph's is
``agentledger.integrations.langgraph.LedgerSaver``).

A thread is a conversation: the first checkpoint of a thread creates the conversation whose
id is the thread's (in the handle's scope), and every row of the thread carries its tenant.
Each operation is one transaction (:meth:`GraphCheckpoints.together` lets a saver write the
runs a checkpoint brings in the checkpoint's). The values are plain data
(:mod:`._graph_values`): the framework serializes and reads them; the ledger keeps them,
checks their checksums and forgets them with their conversation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Select, Table, delete, insert, select, tuple_

from .._values import new_id
from ..errors import UsageError
from ._engine import Database
from ._framework_conversations import conversation_tenant
from ._graph_messages import ChannelIds, Ids, Written, bases_held, message_rows
from ._graph_retention import Retention, chosen, clear_parents, listed_checkpoints, stored_values
from ._graph_rows import (
    DELETE_CHECKPOINT,
    DELETE_WRITE,
    INSERT_CHECKPOINT,
    INSERT_VALUE,
    INSERT_WRITE,
    PARENT_VERSIONS,
    VALUE_THERE,
    WRITES_THERE,
    checkpoint_row,
    key_values,
    write_row,
)
from ._graph_values import (
    ChannelValue,
    CheckpointKey,
    CheckpointQuery,
    PendingWrite,
    StoredCheckpoint,
)
from ._statements import statements_for
from .checksums import check_row, sealed
from .tables import (
    conversations,
    graph_channel_values,
    graph_checkpoints,
    graph_writes,
)

T = TypeVar("T")

GRAPH_THREAD_KEY = "graph_thread"
"""The key, in the metadata of a conversation a thread's first checkpoint created, holding the
thread's id."""

KEPT_CHANNELS = 256
"""How many channels' last stored versions a :class:`GraphCheckpoints` keeps in memory."""

_CHUNK = 500
"""Keys bound per statement (SQLite and PostgreSQL both cap a statement's parameters)."""


class GraphCheckpoints:
    """The checkpoints of a graph framework's threads in this ledger (see the module)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._written: OrderedDict[tuple[str, str, str], tuple[str, Written]] = OrderedDict()
        """The version of each channel of messages this object stored last (the most recent
        :data:`KEPT_CHANNELS`), by thread, namespace and channel: the next checkpoint's is
        stored against it without reading it back."""
        self._lock = threading.Lock()

    # --- writes -------------------------------------------------------------------------------

    def together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction that this handle's reads and writes on this
        thread join, each write all or nothing in it (a checkpoint and the runs a saver
        records for it commit at once, with one sync to disk). Not tried again once ``work``
        has begun: see :meth:`~agentledger.ledger._engine.Database.together`."""
        return self._database.together(what, work)

    def put(
        self, stored: StoredCheckpoint, new_values: dict[tuple[str, str], ChannelValue]
    ) -> None:
        """Store a checkpoint (replacing one of the same key) and the channel versions it
        brings, keyed by ``(channel, version)`` (a version already stored is kept)."""
        key = stored.key

        def write(conn: Connection) -> None:
            sql = statements_for(conn.dialect)
            tenant = self._thread(conn, key.thread_id)
            bases = self._parent_versions(conn, stored) if new_values else {}
            sql.execute(conn, DELETE_CHECKPOINT, key_values(key))
            sql.execute(conn, INSERT_CHECKPOINT, checkpoint_row(stored, tenant, self._now()))
            for (channel, version), value in new_values.items():
                columns = _value_columns(value)
                if value.message_ids is None:
                    self._put_value(conn, key, channel, version, columns, tenant)
                    continue
                place = (key.thread_id, key.checkpoint_ns, channel)
                base = bases.get(channel)
                ids = ChannelIds(conn, *place)
                columns["message_ids"] = ids.compacted(
                    value.message_ids, base, self._written_at(place, base)
                )
                if self._put_value(conn, key, channel, version, columns, tenant):
                    self._wrote(
                        place, version, Written.of(value.message_ids, columns["message_ids"])
                    )

        self._write("storing a checkpoint", write)

    def open_thread(self, thread_id: str) -> None:
        """Create thread ``thread_id``'s conversation in the handle's scope unless it exists
        (before the first run recorded in it, so that it is known as a thread)."""
        self._database.write("opening a thread", lambda conn: self._thread(conn, thread_id))

    def put_writes(self, key: CheckpointKey, writes: Sequence[PendingWrite]) -> None:
        """Store the pending writes of a checkpoint's next step: a task's write already there
        is kept, but a special write (negative ``idx``: an error, an interrupt) replaces its
        earlier one."""
        if not writes:
            return

        def write(conn: Connection) -> None:
            sql = statements_for(conn.dialect)
            tenant = self._thread(conn, key.thread_id)
            there = sql.select(conn, WRITES_THERE, key_values(key))
            stored = {(row["task_id"], row["idx"]) for row in there}
            rows: dict[tuple[str, int], PendingWrite] = {}
            for pending in writes:
                place = (pending.task_id, pending.idx)
                if pending.idx < 0 or (place not in stored and place not in rows):
                    rows[place] = pending
            for task_id, idx in [place for place in rows if place[1] < 0 and place in stored]:
                values = {**key_values(key), "task_id": task_id, "idx": idx}
                sql.execute(conn, DELETE_WRITE, values)
            inserted = [write_row(key, pending, tenant) for pending in rows.values()]
            sql.execute_many(conn, INSERT_WRITE, inserted)

        self._write("storing a checkpoint's pending writes", write)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint of a thread, their channel values and writes (its
        conversation and its messages stay: ``Ledger.forget`` deletes those)."""

        def write(conn: Connection) -> None:
            for table in (graph_writes, graph_channel_values, graph_checkpoints):
                conn.execute(
                    delete(table).where(self._scoped(table, table.c.thread_id == thread_id))
                )

        self._database.write("deleting a thread's checkpoints", write)

    def delete_runs(self, graph_run_ids: Sequence[str]) -> None:
        """Delete the checkpoints the framework's runs ``graph_run_ids`` made, with their
        writes and the channel versions no checkpoint left holds."""
        if not graph_run_ids:
            return

        def write(conn: Connection) -> None:
            query = select(graph_checkpoints).where(
                self._scoped(graph_checkpoints, graph_checkpoints.c.graph_run_id.in_(graph_run_ids))
            )
            doomed = [_key_of(row) for row in conn.execute(query).mappings()]
            self._delete_checkpoints(conn, doomed)

        self._database.write("deleting runs' checkpoints", write)

    def prune(self, thread_ids: Sequence[str], *, keep_latest: bool) -> None:
        """Delete the checkpoints of ``thread_ids``: all of them, or (``keep_latest``) all but
        the newest of each namespace (and what it needs: see :meth:`retain`), with their
        writes and the channel versions no checkpoint left holds."""
        if keep_latest:
            self.retain(thread_ids, keep_latest=1)
            return

        def write(conn: Connection) -> None:
            for thread_id in thread_ids:
                listed = listed_checkpoints(conn, self._of_thread(thread_id))
                self._delete_checkpoints(conn, [c.key for c in listed])

        self._database.write("pruning threads' checkpoints", write)

    def retain(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        keep_latest: int | None = None,
        newer_than: datetime | None = None,
        dry_run: bool = False,
    ) -> int:
        """Keep, of each namespace of each thread (``None``: every thread in the handle's
        scope), only the ``keep_latest`` newest checkpoints and those made after
        ``newer_than`` (both given: both limits hold); how many checkpoints went (would go,
        ``dry_run``). What the survivors refer to stays (:mod:`._graph_retention`); the
        thread's conversation and its message rows are never deleted. One transaction per
        thread."""
        policy = Retention(keep_latest, newer_than)
        if isinstance(thread_ids, str):
            raise UsageError(
                f"thread_ids is a list of thread ids, not one id: give [{thread_ids!r}]"
            )
        if thread_ids is None:
            thread_ids = self._database.read("listing graph threads", self._threads)
        return sum(self._retain_thread(thread_id, policy, dry_run) for thread_id in thread_ids)

    def _retain_thread(self, thread_id: str, policy: Retention, dry_run: bool) -> int:
        def apply(conn: Connection) -> int:
            listed = listed_checkpoints(conn, self._of_thread(thread_id))
            choice = chosen(listed, stored_values(conn, thread_id, listed), policy)
            if not dry_run and choice.doomed:
                self._delete_checkpoints(conn, choice.doomed)
                clear_parents(conn, choice.orphaned)
            return len(choice.doomed)

        if dry_run:
            return self._database.read("choosing a thread's checkpoints to delete", apply)
        return self._database.write("deleting a thread's old checkpoints", apply)

    def _threads(self, conn: Connection) -> list[str]:
        """The threads with checkpoints in the handle's scope."""
        c = graph_checkpoints.c
        query = select(c.thread_id).where(self._scoped(graph_checkpoints, c.id.is_not(None)))
        return list(conn.execute(query.distinct().order_by(c.thread_id)).scalars())

    def _of_thread(self, thread_id: str) -> Any:
        return self._scoped(graph_checkpoints, graph_checkpoints.c.thread_id == thread_id)

    def copy_thread(
        self, source: str, target: str, values: dict[tuple[str, str, str], ChannelValue]
    ) -> None:
        """Copy every checkpoint of thread ``source``, with its channel values and writes, to
        thread ``target``. ``values`` replaces the stored value of some channel versions,
        keyed by ``(namespace, channel, version)`` (the saver gives the messages of a channel
        as a serialized value there: the copy does not refer to ``source``'s rows)."""

        def write(conn: Connection) -> None:
            checkpoints = self._rows(conn, graph_checkpoints, source)
            if not checkpoints:
                return
            tenant = self._thread(conn, target)
            for row in checkpoints:
                conn.execute(
                    insert(graph_checkpoints), _moved(graph_checkpoints, row, target, tenant)
                )
            for row in self._rows(conn, graph_channel_values, source):
                replaced = values.get((row["checkpoint_ns"], row["channel"], row["version"]))
                if replaced is not None:
                    row = {**row, **_value_columns(replaced)}
                conn.execute(
                    insert(graph_channel_values), _moved(graph_channel_values, row, target, tenant)
                )
            for row in self._rows(conn, graph_writes, source):
                conn.execute(insert(graph_writes), _moved(graph_writes, row, target, tenant))

        self._database.write("copying a thread's checkpoints", write)

    # --- reads --------------------------------------------------------------------------------

    def get(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        *,
        known: Collection[str] = (),
    ) -> StoredCheckpoint | None:
        """A checkpoint of a thread's namespace, with its values and writes: the one with
        ``checkpoint_id``, or the newest (``None``); ``None`` when there is none."""
        query = CheckpointQuery(thread_id, checkpoint_ns, checkpoint_id, limit=1)
        return next(iter(self.find(query, known=known)), None)

    def find(
        self, query: CheckpointQuery, *, known: Collection[str] = ()
    ) -> list[StoredCheckpoint]:
        """The checkpoints ``query`` chooses, newest first, with their values and writes, and
        the message rows they refer to but those whose ids are ``known`` (the caller read
        them before: a message row does not change)."""
        return self._database.read(
            "reading checkpoints", lambda conn: self._listed(conn, query, known)
        )

    # --- inside a transaction -------------------------------------------------------------------

    def _now(self) -> Any:
        return self._database.clock()

    def _write(self, what: str, work: Callable[[Connection], None]) -> None:
        """``work`` in a transaction of its own, or in the one :meth:`together` encloses it in
        (whose failure it fails whole: no savepoint of its own)."""
        enclosing = self._database.joined()
        if enclosing is not None:
            work(enclosing)
        else:
            self._database.write(what, work)

    def _scoped(self, table: Table, condition: Any) -> Any:
        """``condition``, kept to the threads of the handle's scope."""
        scope = self._database.scope
        if scope.everything:
            return condition
        in_scope = select(conversations.c.id).where(scope.where(conversations))
        return condition & table.c.thread_id.in_(in_scope)

    def _thread(self, conn: Connection, thread_id: str) -> str | None:
        """The tenant of thread ``thread_id``'s conversation, created in the handle's scope
        when the thread is new."""
        return conversation_tenant(
            conn,
            self._database,
            thread_id,
            named="thread id",
            metadata={GRAPH_THREAD_KEY: thread_id},
        )

    def _parent_versions(self, conn: Connection, stored: StoredCheckpoint) -> dict[str, str]:
        """The channel versions of ``stored``'s parent checkpoint (none without one)."""
        if stored.parent_checkpoint_id is None:
            return {}
        parent = CheckpointKey(
            stored.key.thread_id, stored.key.checkpoint_ns, stored.parent_checkpoint_id
        )
        found = statements_for(conn.dialect).select(conn, PARENT_VERSIONS, key_values(parent))
        versions = found[0]["channel_versions"] if found else None
        return dict(versions) if versions else {}

    def _put_value(
        self,
        conn: Connection,
        key: CheckpointKey,
        channel: str,
        version: str,
        columns: dict[str, Any],
        tenant: str | None,
    ) -> bool:
        """Store a channel version unless it is there: whether it was stored."""
        table = graph_channel_values
        sql = statements_for(conn.dialect)
        place = {**key_values(key), "channel": channel, "version": version}
        del place["checkpoint_id"]
        if sql.select(conn, VALUE_THERE, place):
            return False
        row = {
            "id": new_id(),
            "thread_id": key.thread_id,
            "checkpoint_ns": key.checkpoint_ns,
            "channel": channel,
            "version": version,
            **columns,
            "tenant_id": tenant,
        }
        sql.execute(conn, INSERT_VALUE, sealed(table, row))
        return True

    def _written_at(self, place: tuple[str, str, str], version: str | None) -> Written | None:
        """What version ``version`` of channel ``place`` holds, when this object stored it
        last (the parent checkpoint that holds it was read in the same transaction, so it is
        still there)."""
        with self._lock:
            last = self._written.get(place)
        return last[1] if last is not None and last[0] == version else None

    def _ids(self, conn: Connection, place: tuple[str, str, str], row: Any) -> Ids:
        """Every message id a stored version of channel ``place`` holds: as this object
        stored it last, or resolved down its chain."""
        written = self._written_at(place, row["version"])
        if written is not None:
            return written.ids
        return ChannelIds(conn, *place).resolved(row["message_ids"])

    def _wrote(self, place: tuple[str, str, str], version: str, written: Written) -> None:
        with self._lock:
            self._written[place] = (version, written)
            self._written.move_to_end(place)
            if len(self._written) > KEPT_CHANNELS:
                self._written.popitem(last=False)

    def _delete_checkpoints(self, conn: Connection, doomed: Sequence[CheckpointKey]) -> None:
        """Delete the checkpoints ``doomed``, their writes, and the channel versions of their
        threads that no checkpoint left holds."""
        for chunk in _chunks(doomed):
            keys = [(k.thread_id, k.checkpoint_ns, k.checkpoint_id) for k in chunk]
            for table in (graph_writes, graph_checkpoints):
                columns = tuple_(table.c.thread_id, table.c.checkpoint_ns, table.c.checkpoint_id)
                conn.execute(delete(table).where(columns.in_(keys)))
        for thread_id in sorted({k.thread_id for k in doomed}):
            self._collect_values(conn, thread_id)

    def _collect_values(self, conn: Connection, thread_id: str) -> None:
        """Delete the channel versions of a thread no checkpoint of it holds any longer (nor
        any version one of those is stored against)."""
        held = {
            (row["checkpoint_ns"], channel, version)
            for row in self._rows(conn, graph_checkpoints, thread_id)
            for channel, version in row["channel_versions"].items()
        }
        table = graph_channel_values
        query = select(
            table.c.id, table.c.checkpoint_ns, table.c.channel, table.c.version, table.c.message_ids
        )
        rows = conn.execute(query.where(table.c.thread_id == thread_id)).all()
        held = bases_held(rows, held)
        orphans = [
            row.id for row in rows if (row.checkpoint_ns, row.channel, row.version) not in held
        ]
        for chunk in _chunks(orphans):
            conn.execute(delete(table).where(table.c.id.in_(chunk)))

    def _rows(self, conn: Connection, table: Table, thread_id: str) -> list[dict[str, Any]]:
        query = select(table).where(self._scoped(table, table.c.thread_id == thread_id))
        rows = [dict(row) for row in conn.execute(query.order_by(table.c.id)).mappings()]
        for row in rows:
            check_row(table, row)
        return rows

    def _listed(
        self, conn: Connection, query: CheckpointQuery, known: Collection[str]
    ) -> list[StoredCheckpoint]:
        found: list[StoredCheckpoint] = []
        for row in conn.execute(self._chosen(query)).mappings():
            if query.limit is not None and len(found) >= query.limit:
                break
            if query.metadata and not _holds(row["metadata"], query.metadata):
                continue
            check_row(graph_checkpoints, row)
            found.append(_checkpoint_of(row))
        return [self._filled(conn, stored, known) for stored in found]

    def _chosen(self, query: CheckpointQuery) -> Select[Any]:
        table = graph_checkpoints
        c = table.c
        condition: Any = c.id.is_not(None)
        if query.thread_id is not None:
            condition &= c.thread_id == query.thread_id
        if query.checkpoint_ns is not None:
            condition &= c.checkpoint_ns == query.checkpoint_ns
        if query.checkpoint_id is not None:
            condition &= c.checkpoint_id == query.checkpoint_id
        if query.before is not None:
            condition &= c.checkpoint_id < query.before
        return (
            select(table)
            .where(self._scoped(table, condition))
            .order_by(c.checkpoint_id.desc(), c.thread_id, c.checkpoint_ns)
        )

    def _filled(
        self, conn: Connection, stored: StoredCheckpoint, known: Collection[str]
    ) -> StoredCheckpoint:
        """``stored`` with the values of its channel versions and its pending writes."""
        key = stored.key
        values: dict[str, ChannelValue] = {}
        if stored.channel_versions:
            table = graph_channel_values
            where = (table.c.thread_id == key.thread_id) & (
                table.c.checkpoint_ns == key.checkpoint_ns
            )
            pairs = list(stored.channel_versions.items())
            for chunk in _chunks(pairs):
                rows = conn.execute(
                    select(table).where(where & tuple_(table.c.channel, table.c.version).in_(chunk))
                ).mappings()
                for row in rows:
                    check_row(table, row)
                    value = _value_of(row)
                    if row["message_ids"] is not None:
                        place = (key.thread_id, key.checkpoint_ns, row["channel"])
                        value = replace(value, message_ids=self._ids(conn, place, row))
                    values[row["channel"]] = value
        ids = {i for v in values.values() for i in v.message_ids or () if i is not None}
        writes = conn.execute(select(graph_writes).where(_at(graph_writes, key))).mappings()
        pending = []
        for row in writes:
            check_row(graph_writes, row)
            pending.append(_pending_of(row))
        pending.sort(key=lambda w: (w.task_path, w.task_id, w.idx))
        return StoredCheckpoint(
            key=key,
            parent_checkpoint_id=stored.parent_checkpoint_id,
            checkpoint_type=stored.checkpoint_type,
            checkpoint=stored.checkpoint,
            channel_versions=stored.channel_versions,
            metadata=stored.metadata,
            values=values,
            messages=message_rows(conn, sorted(ids.difference(known))),
            writes=tuple(pending),
        )


# --- rows ---------------------------------------------------------------------------------------


def _at(table: Table, key: CheckpointKey) -> Any:
    c = table.c
    return (
        (c.thread_id == key.thread_id)
        & (c.checkpoint_ns == key.checkpoint_ns)
        & (c.checkpoint_id == key.checkpoint_id)
    )


def _value_columns(value: ChannelValue) -> dict[str, Any]:
    ids = None if value.message_ids is None else list(value.message_ids)
    return {"value_type": value.value_type, "value": value.value, "message_ids": ids}


def _moved(table: Table, row: dict[str, Any], thread_id: str, tenant: str | None) -> dict[str, Any]:
    """A copy of ``row`` in thread ``thread_id``, under a new id."""
    copied = {**row, "id": new_id(), "thread_id": thread_id, "tenant_id": tenant}
    return sealed(table, copied)


def _key_of(row: Any) -> CheckpointKey:
    return CheckpointKey(row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])


def _checkpoint_of(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(
        key=_key_of(row),
        parent_checkpoint_id=row["parent_checkpoint_id"],
        checkpoint_type=row["checkpoint_type"],
        checkpoint=bytes(row["checkpoint"]),
        channel_versions=dict(row["channel_versions"]),
        metadata=dict(row["metadata"]),
    )


def _value_of(row: Any) -> ChannelValue:
    """The value of a row, its message ids not resolved yet (:class:`ChannelIds` does)."""
    value = row["value"]
    return ChannelValue(value_type=row["value_type"], value=None if value is None else bytes(value))


def _pending_of(row: Any) -> PendingWrite:
    return PendingWrite(
        task_id=row["task_id"],
        idx=row["idx"],
        channel=row["channel"],
        value_type=row["value_type"],
        value=bytes(row["value"]),
        task_path=row["task_path"],
    )


def _holds(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(key in metadata and metadata[key] == value for key, value in wanted.items())


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]

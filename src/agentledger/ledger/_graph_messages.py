"""The message ids of a channel of messages, stored against the version before it, and the
rows they refer to.

A chat's channel of messages grows by a message or two at each checkpoint: storing each
version's whole list of ids would grow the thread quadratically. A version is stored as a
reference to the first ``count`` ids of the version its checkpoint's parent held, then its own
(``[{"base": version, "count": n, "depth": d}, id, ...]``), or whole every
:data:`MAX_DEPTH` versions, so that reading one resolves a bounded chain. A version another
one is stored against is kept while the other is (:func:`bases_held`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Connection, String, Table, bindparam, func, select

from ..errors import LedgerCorruptError
from ._graph_values import MessageRow
from ._statements import send, statements_for
from ._stored_values import checked_values, stored_json
from .checksums import check_row
from .tables import conversation_messages, graph_channel_values, step_executions, tool_executions

MAX_DEPTH = 64
"""The longest chain of versions stored against each other before one is stored whole."""

Ids = tuple[str | None, ...]


@dataclass(frozen=True)
class Written:
    """A version of a channel of messages as it was stored: every id it holds, and how many
    versions down its chain goes (0: stored whole)."""

    ids: Ids
    depth: int

    @classmethod
    def of(cls, ids: Ids, stored: Sequence[Any]) -> Written:
        """``ids`` stored as ``stored`` (what :meth:`ChannelIds.compacted` made of them)."""
        head = _head(stored)
        return cls(ids, head[2] if head is not None else 0)


class ChannelIds:
    """The message ids of one channel of one namespace of a thread, read in a transaction."""

    def __init__(self, conn: Connection, thread_id: str, ns: str, channel: str) -> None:
        self._conn, self._thread_id, self._ns, self._channel = conn, thread_id, ns, channel
        self._stored: dict[str, list[Any] | None] = {}

    def compacted(self, ids: Ids, base: str | None, written: Written | None = None) -> list[Any]:
        """``ids`` as stored: against version ``base`` (its checkpoint's parent's) when they
        begin with its ids and its chain is not too long, else whole. ``written``: what
        ``base`` holds, when the caller stored it (then nothing is read)."""
        if base is None:
            return list(ids)
        if written is None:
            stored = self._raw(base)
            if stored is None:
                return list(ids)
            head = _head(stored)
            written = Written(self.resolved(stored), head[2] if head is not None else 0)
        depth = written.depth + 1
        if depth > MAX_DEPTH:
            return list(ids)
        held = written.ids
        count = 0
        while count < min(len(held), len(ids)) and held[count] is not None:
            if held[count] != ids[count]:
                break
            count += 1
        if count == 0:
            return list(ids)
        return [{"base": base, "count": count, "depth": depth}, *ids[count:]]

    def resolved(self, stored: list[Any]) -> Ids:
        """The whole list of ids a stored version holds."""
        head = _head(stored)
        if head is None:
            return tuple(None if i is None else str(i) for i in stored)
        base, count, _ = head
        below = self._raw(base)
        if below is None:
            raise LedgerCorruptError(
                f"version {base} of channel {self._channel!r} of thread {self._thread_id!r}, "
                "which a later version is stored against, is not in graph_channel_values: "
                "run `agentledger verify`"
            )
        return self.resolved(below)[:count] + tuple(
            None if i is None else str(i) for i in stored[1:]
        )

    def _raw(self, version: str) -> list[Any] | None:
        if version not in self._stored:
            self._fetch(version)
        return self._stored.get(version)

    def _fetch(self, version: str) -> None:
        """Read version ``version`` and the versions just before it (those a chain is made
        of, for a thread that does not fork) in one statement."""
        table = graph_channel_values
        query = (
            select(table)
            .where(
                (table.c.thread_id == self._thread_id)
                & (table.c.checkpoint_ns == self._ns)
                & (table.c.channel == self._channel)
                & (table.c.version <= version)
            )
            .order_by(table.c.version.desc())
            .limit(MAX_DEPTH + 1)
        )
        self._stored.setdefault(version, None)
        for row in self._conn.execute(query).mappings():
            check_row(table, row)
            self._stored[row["version"]] = row["message_ids"]


def _head(stored: Sequence[Any]) -> tuple[str, int, int] | None:
    first = stored[0] if stored else None
    if not isinstance(first, dict):
        return None
    return str(first["base"]), int(first["count"]), int(first["depth"])


def bases_held(rows: Iterable[Any], held: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """``held`` (``(namespace, channel, version)``) with every version one of them is stored
    against, however far down: ``rows`` are the thread's channel values."""
    base_of = {}
    for row in rows:
        head = _head(row.message_ids) if row.message_ids else None
        if head is not None:
            base_of[(row.checkpoint_ns, row.channel, row.version)] = head[0]
    kept = set(held)
    for ns, channel, version in held:
        base = base_of.get((ns, channel, version))
        while base is not None and (ns, channel, base) not in kept:
            kept.add((ns, channel, base))
            base = base_of.get((ns, channel, base))
    return kept


_MESSAGE_ROWS = (
    (conversation_messages, conversation_messages.c.id, conversation_messages.c.content),
    (tool_executions, tool_executions.c.id, tool_executions.c.result),
    # Last: a final answer is a conversation message and its step's assistant message
    # (same id); the step's row keeps the message's metadata.
    (step_executions, step_executions.c.message_id, step_executions.c.content),
)

_CHUNK = 500

_LISTED = func.json_each(bindparam("ids", type_=String)).table_valued("value")
"""On SQLite, the ids given as one JSON array: a read of any number of them is one statement."""
_LISTED_ROWS = {
    table.name: select(table).where(id_column.in_(select(_LISTED.c.value)))
    for table, id_column, _ in _MESSAGE_ROWS
}


def message_rows(conn: Connection, ids: Sequence[str]) -> dict[str, MessageRow]:
    """The rows holding the messages ``ids`` (of a checkpoint's channels, of a stored
    conversation's entries), by message id, each checked against its checksum; on SQLite one
    statement a table, the rows checked from their stored values and made from them."""
    found: dict[str, MessageRow] = {}
    listed = json.dumps(list(ids))
    for table, id_column, content in _MESSAGE_ROWS:
        if conn.dialect.name == "sqlite":
            found.update(_stored_rows(conn, table, id_column.name, content.name, listed))
            continue
        for row in _rows_of(conn, table, id_column, ids):
            found[row[id_column.name]] = MessageRow(
                row[content.name] or "", dict(row["metadata"] or {}), row.get("arguments")
            )
    return found


def _stored_rows(
    conn: Connection, table: Table, id_name: str, content_name: str, listed: str
) -> Iterator[tuple[str, MessageRow]]:
    """On SQLite, the rows of ``table`` whose ``id_name`` is one of the ids ``listed`` (a
    JSON array), checked from their stored values and made from them: only the columns a
    :class:`MessageRow` holds are decoded."""
    compiled = statements_for(conn.dialect).of(_LISTED_ROWS[table.name])
    sent = send(conn, compiled.sql, compiled.params({"ids": listed}))
    at, fetched = checked_values(compiled, sent, table)
    key, text, metadata = at[id_name], at[content_name], at["metadata"]
    arguments = at.get("arguments")
    for values in fetched:
        yield (
            values[key],
            MessageRow(
                values[text] or "",
                dict(stored_json(values[metadata]) or {}),
                None if arguments is None else stored_json(values[arguments]),
            ),
        )


def _rows_of(
    conn: Connection, table: Table, id_column: Column[str], ids: Sequence[str]
) -> Iterable[Mapping[Any, Any]]:
    """The rows of ``table`` whose ``id_column`` is one of ``ids``, checked."""
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        for row in conn.execute(select(table).where(id_column.in_(chunk))).mappings():
            check_row(table, row)
            yield row

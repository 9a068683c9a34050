"""``StoredConversations``: the tables of revision 0015, read and written for a framework's
conversation store (``ledger.stored_conversations``; pydantic-ai's is
``agentledger.integrations.pydantic_ai.LedgerConversationStore``).

A stored conversation is a conversation of the ledger: its record is created, in the handle's
scope, with the conversation when it is new. A save compares the record's revision and sets
the new one in the database (``UPDATE ... WHERE revision = :expected``, or an insert that a
record already there refuses), in the transaction that inserts its new entries: a save that
lost the race writes nothing. The values are plain data: the framework serializes and reads
them; the ledger keeps them, checks their checksums and forgets them with their conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy import (
    Connection,
    Integer,
    Select,
    Table,
    bindparam,
    insert,
    literal,
    select,
    update,
)

from .._values import new_id
from ..errors import LedgerCorruptError
from ._engine import Database
from ._framework_conversations import conversation_tenant, insert_if_absent
from ._graph_messages import message_rows
from ._graph_values import MessageRow
from ._statements import send, statements_for
from ._stored_values import check_values, checked_values, stored_json, stored_values
from .checksums import check_row, sealed
from .tables import conversations, stored_entries, stored_records

T = TypeVar("T")


@dataclass(frozen=True)
class StoredEntry:
    """One entry of a conversation's tree: its message as the framework serialized it, less
    what the rows ``message_ids`` names hold (``None``: ``message`` is whole).

    ``message_ids`` has one place per part of the message (the framework says what a part is):
    the id of the row holding that part's text or arguments (a conversation message, a tool
    execution, a step's message), or ``None``. Read back, ``rows`` holds those rows, in the
    same places; it is not written."""

    id: str
    parent_id: str | None
    kind: str
    message: JsonValue
    message_ids: tuple[str | None, ...] | None = None
    rows: tuple[MessageRow | None, ...] = ()


@dataclass(frozen=True)
class Claimed:
    """A conversation whose record a save claimed (:meth:`StoredConversations.claim`): its
    entries are added under the tenant the claim found, not looked up again."""

    conversation_id: str
    tenant_id: str | None


@dataclass(frozen=True)
class StoredRecord:
    """A conversation's record (see ``stored_records`` in the schema)."""

    conversation_id: str
    head_id: str | None
    revision: str
    scope: str | None
    forked_from: str | None
    forked_at: str | None
    branches: list[str]
    usage: dict[str, JsonValue]
    deferred: JsonValue
    format_version: int
    updated_at: datetime


class StoredConversations:
    """The stored conversations of this ledger (see the module)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def together(self, what: str, work: Callable[[], T]) -> T:
        """``work`` in one write transaction that this handle's reads and writes on this
        thread join: a save and the runs its entries are recorded as commit at once."""
        return self._database.together(what, work)

    def write(
        self, record: StoredRecord, entries: Sequence[StoredEntry], expected_revision: str | None
    ) -> bool:
        """Store ``record`` and its new ``entries`` (:meth:`claim`, then :meth:`add`) in one
        transaction; ``False``, with nothing written, if the claim is refused."""

        def work(conn: Connection) -> bool:
            new_ids = {entry.id for entry in entries}
            claimed = self._claim(conn, record, new_ids, expected_revision)
            if claimed is None:
                return False
            self._add(conn, claimed, entries)
            return True

        return self._write("saving a conversation", work)

    def claim(
        self, record: StoredRecord, new_ids: Collection[str], expected_revision: str | None
    ) -> Claimed | None:
        """Store ``record`` if the stored revision is ``expected_revision`` (``None``: no
        record yet) and its head is stored or among ``new_ids`` (the entries the caller adds
        next, with :meth:`add`, in the same transaction: see :meth:`together`); ``None``, with
        nothing written, if not."""
        return self._write(
            "saving a conversation's record",
            lambda conn: self._claim(conn, record, new_ids, expected_revision),
        )

    def add(self, claimed: Claimed, entries: Sequence[StoredEntry]) -> None:
        """Insert ``entries``, written by the conversation whose record was ``claimed``."""
        self._write(
            "saving a conversation's entries", lambda conn: self._add(conn, claimed, entries)
        )

    def delete(self, conversation_id: str, expected_revision: str) -> bool:
        """Delete the record of ``conversation_id`` if its revision is ``expected_revision``
        (its entries stay: another record may reach them); ``False`` if there is none."""

        def work(conn: Connection) -> bool:
            deleted = conn.execute(
                stored_records.delete()
                .where(stored_records.c.id == conversation_id)
                .where(stored_records.c.revision == expected_revision)
                .returning(stored_records.c.id)
            ).first()
            return deleted is not None

        return self._write("deleting a conversation's record", work)

    # --- reads --------------------------------------------------------------------------------

    def record(self, conversation_id: str) -> StoredRecord | None:
        """The record of ``conversation_id``, if it has one in the handle's scope. A handle
        of every scope reads it with a statement compiled once (a framework reads the record
        before each load and each save)."""
        if not self._database.scope.everything:
            found = self.records(where=stored_records.c.id == conversation_id)
            return found[0] if found else None

        def read(conn: Connection) -> StoredRecord | None:
            rows = statements_for(conn.dialect).select(conn, _RECORD, {"id": conversation_id})
            return _record_of(rows[0]) if rows else None

        return self._database.read("reading a stored conversation", read)

    def records(
        self, *, scope: str | None = None, limit: int | None = None, where: Any = None
    ) -> list[StoredRecord]:
        """The records (of ``scope``, when given), the last saved first."""
        query = select(stored_records).order_by(
            stored_records.c.updated_at.desc(), stored_records.c.id.desc()
        )
        if where is not None:
            query = query.where(where)
        if scope is not None:
            query = query.where(stored_records.c.scope == scope)
        if limit is not None:
            query = query.limit(limit)

        def read(conn: Connection) -> list[StoredRecord]:
            return [_record_of(row) for row in conn.execute(self._scoped(query)).mappings()]

        return self._database.read("reading stored conversations", read)

    def entry(self, entry_id: str) -> StoredEntry | None:
        """Entry ``entry_id``, if there is one."""
        return self._database.read("reading an entry", lambda conn: self._entry_row(conn, entry_id))

    def history(self, head_id: str, limit: int | None = None) -> list[StoredEntry]:
        """The entries from the root to ``head_id``, oldest first (its last ``limit``): one
        recursive query, whichever conversations wrote them, and one a table of the rows
        holding their texts."""
        walk = _WALK if limit is None else _WALK_LIMITED
        values = {"head": head_id, "limit": limit}

        def read(conn: Connection) -> list[StoredEntry]:
            if conn.dialect.name == "sqlite" and limit is None:
                rows = _path(conn, head_id)
            elif conn.dialect.name == "sqlite":  # checked from the stored values
                compiled = statements_for(conn.dialect).of(walk)
                sent = send(conn, compiled.sql, compiled.params(values))
                at, fetched = checked_values(compiled, sent, stored_entries)
                rows = [_entry_fields(at, values) for values in fetched]
            else:
                rows = [dict(row) for row in conn.execute(walk, values).mappings()]
                for row in rows:
                    check_row(stored_entries, row)
            return _entries_of(conn, rows[::-1])

        return self._database.read("reading a conversation's history", read)

    # --- inside a transaction -------------------------------------------------------------------

    def _write(self, what: str, work: Callable[[Connection], T]) -> T:
        enclosing = self._database.joined()
        if enclosing is not None:
            return work(enclosing)
        return self._database.write(what, work)

    def _claim(
        self,
        conn: Connection,
        record: StoredRecord,
        new_ids: Collection[str],
        expected_revision: str | None,
    ) -> Claimed | None:
        head = record.head_id
        if head is not None and head not in new_ids and not _stored(conn, head):
            return None
        claimed = Claimed(record.conversation_id, self._tenant(conn, record.conversation_id))
        row = sealed(stored_records, _record_row(record, claimed.tenant_id))
        # RETURNING says whether the row was written (psycopg's rowcount of an insert that may
        # do nothing is -1).
        if expected_revision is None:
            statement = insert_if_absent(conn, stored_records).values(row)
        else:
            statement = (
                update(stored_records)
                .where(stored_records.c.id == record.conversation_id)
                .where(stored_records.c.revision == expected_revision)
                .values(row)
            )
        written = conn.execute(statement.returning(stored_records.c.id)).first() is not None
        return claimed if written else None

    def _add(self, conn: Connection, claimed: Claimed, entries: Sequence[StoredEntry]) -> None:
        if not entries:
            return
        now = self._database.clock()
        rows = [
            sealed(
                stored_entries,
                _entry_row(entry, claimed.conversation_id, claimed.tenant_id, now),
            )
            for entry in entries
        ]
        conn.execute(insert(stored_entries), rows)

    def _scoped(self, query: Any) -> Any:
        """``query`` of records, kept to the conversations of the handle's scope."""
        scope = self._database.scope
        if scope.everything:
            return query
        in_scope = select(conversations.c.id).where(scope.where(conversations))
        return query.where(stored_records.c.id.in_(in_scope))

    def _entry_row(self, conn: Connection, entry_id: str) -> StoredEntry | None:
        row = (
            conn.execute(select(stored_entries).where(stored_entries.c.id == entry_id))
            .mappings()
            .first()
        )
        if row is None:
            return None
        check_row(stored_entries, row)
        return _entries_of(conn, [row])[0]

    def _tenant(self, conn: Connection, conversation_id: str) -> str | None:
        """The tenant of conversation ``conversation_id``, created in the handle's scope when
        it is new."""
        return conversation_tenant(
            conn, self._database, conversation_id, named="conversation id", metadata={}
        )


def _walk() -> Select[Any]:
    """The entries from ``:head`` to the root, the head first: the walk carries each entry's
    id and parent only, and the rows are read once it is done (carried through the walk,
    their texts would be copied at each step of it)."""
    entries = stored_entries
    walk = (
        select(entries.c.id, entries.c.parent_id, literal(0).label("depth"))
        .where(entries.c.id == bindparam("head"))
        .cte("walk", recursive=True)
    )
    parent = entries.alias("parent")
    walk = walk.union_all(
        select(parent.c.id, parent.c.parent_id, (walk.c.depth + 1).label("depth")).where(
            parent.c.id == walk.c.parent_id
        )
    )
    return (
        select(*entries.c)
        .join_from(walk, entries, entries.c.id == walk.c.id)
        .order_by(walk.c.depth)
    )


_WALK = _walk()
_OF_CONVERSATION = select(stored_entries).where(
    stored_entries.c.conversation_id
    == select(stored_entries.c.conversation_id)
    .where(stored_entries.c.id == bindparam("head"))
    .scalar_subquery()
)
_RECORD = select(stored_records).where(stored_records.c.id == bindparam("id"))
_ENTRY_THERE = select(stored_entries.c.id).where(stored_entries.c.id == bindparam("id"))


def _path(conn: Connection, head_id: str) -> list[dict[str, Any]]:
    """On SQLite, the entries from ``head_id`` to the root, the head first, each checked from
    its stored values: the entries its conversation wrote read at once (by its index: half the
    time of a recursive walk, which looks each parent up), the path followed through them in
    Python; from the first entry another conversation wrote (a fork's source's), the recursive
    walk."""
    sql = statements_for(conn.dialect)
    compiled = sql.of(_OF_CONVERSATION)
    sent = send(conn, compiled.sql, compiled.params({"head": head_id}))
    at, fetched = stored_values(sent)
    key, parent = at["id"], at["parent_id"]
    written = {values[key]: values for values in fetched}
    path: list[Sequence[Any]] = []
    entry_id: str | None = head_id
    while entry_id is not None and entry_id in written:
        values = written.pop(entry_id)  # popped: an entry met twice ends the path
        path.append(values)
        entry_id = values[parent]
    check_values(compiled, sent, stored_entries, path)
    rows = [_entry_fields(at, values) for values in path]
    if entry_id is None:
        return rows
    compiled = sql.of(_WALK)
    sent = send(conn, compiled.sql, compiled.params({"head": entry_id}))
    at, fetched = checked_values(compiled, sent, stored_entries)
    return rows + [_entry_fields(at, values) for values in fetched]


def _entry_fields(at: Mapping[str, int], values: Sequence[Any]) -> dict[str, Any]:
    """The columns an entry is made of, from its stored values (the others are only checked):
    on SQLite its text columns are read as stored, its JSON decoded."""
    return {
        "id": values[at["id"]],
        "parent_id": values[at["parent_id"]],
        "kind": values[at["kind"]],
        "message": stored_json(values[at["message"]]),
        "message_ids": stored_json(values[at["message_ids"]]),
    }


_WALK_LIMITED = _WALK.limit(bindparam("limit", type_=Integer))


def _stored(conn: Connection, entry_id: str) -> bool:
    """Whether entry ``entry_id`` is stored (its row is not read: a claim only needs to know)."""
    return bool(statements_for(conn.dialect).select(conn, _ENTRY_THERE, {"id": entry_id}))


def _record_row(record: StoredRecord, tenant: str | None) -> dict[str, Any]:
    return {
        "id": record.conversation_id,
        "head_id": record.head_id,
        "revision": record.revision,
        "scope": record.scope,
        "forked_from": record.forked_from,
        "forked_at": record.forked_at,
        "branches": list(record.branches),
        "usage": record.usage,
        "deferred": record.deferred,
        "format_version": record.format_version,
        "updated_at": record.updated_at,
        "tenant_id": tenant,
    }


def _record_of(row: Any) -> StoredRecord:
    check_row(stored_records, row)
    return StoredRecord(
        conversation_id=row["id"],
        head_id=row["head_id"],
        revision=row["revision"],
        scope=row["scope"],
        forked_from=row["forked_from"],
        forked_at=row["forked_at"],
        branches=[str(tip) for tip in row["branches"]],
        usage=row["usage"],
        deferred=row["deferred"],
        format_version=row["format_version"],
        updated_at=row["updated_at"],
    )


def _entry_row(
    entry: StoredEntry, conversation_id: str, tenant: str | None, now: datetime
) -> dict[str, Any]:
    return {
        "id": entry.id,
        "conversation_id": conversation_id,
        "parent_id": entry.parent_id,
        "kind": entry.kind,
        "message": entry.message,
        "message_ids": list(entry.message_ids) if entry.message_ids is not None else None,
        "created_at": now,
        "tenant_id": tenant,
    }


def _entries_of(conn: Connection, rows: Sequence[Any]) -> list[StoredEntry]:
    """The entries of ``rows``, each with the message rows it refers to (read at once)."""
    wanted = [i for row in rows for i in row["message_ids"] or () if i is not None]
    held = message_rows(conn, wanted) if wanted else {}
    return [_entry_of(row, held) for row in rows]


def _entry_of(row: Any, held: Mapping[str, MessageRow]) -> StoredEntry:
    ids = row["message_ids"]
    if ids is None:
        return StoredEntry(row["id"], row["parent_id"], row["kind"], row["message"])
    try:
        rows = tuple(held[i] if i is not None else None for i in ids)
    except KeyError as missing:
        raise LedgerCorruptError(
            f"entry {row['id']!r} of stored_entries refers to message row {missing.args[0]}, "
            "which is not in the ledger: run `agentledger verify`; an entry whose runs were "
            "forgotten is gone with them"
        ) from None
    return StoredEntry(
        id=row["id"],
        parent_id=row["parent_id"],
        kind=row["kind"],
        message=row["message"],
        message_ids=tuple(ids),
        rows=rows,
    )


def release_forks(conn: Connection, conversation_ids: Sequence[str]) -> None:
    """Before conversations ``conversation_ids`` are forgotten with the entries they wrote:
    the stored conversations that reach those entries (a fork's history, and a fork's fork's,
    shares its source's) keep what they wrote themselves. An entry of theirs that follows a
    forgotten one begins its history; a record whose head is a forgotten entry is left with an
    empty history. Each such record gets a new revision, so that a save of what it held
    before is refused (``ConversationConflict``) and its writer loads it again."""
    gone = select(stored_entries.c.id).where(stored_entries.c.conversation_id.in_(conversation_ids))
    others = stored_entries.c.conversation_id.not_in(conversation_ids)
    followers = select(stored_entries).where(others & stored_entries.c.parent_id.in_(gone))
    touched: set[str] = set()
    for row in list(conn.execute(followers).mappings()):
        check_row(stored_entries, row)
        _reseal(conn, stored_entries, {**row, "parent_id": None})
        touched.add(row["conversation_id"])
    records = select(stored_records).where(
        stored_records.c.id.not_in(conversation_ids)
        & (stored_records.c.head_id.in_(gone) | stored_records.c.id.in_(touched))
    )
    released = list(conn.execute(records).mappings())
    gone_ids = set(conn.execute(gone).scalars()) if released else set()
    for row in released:
        check_row(stored_records, row)
        head = None if row["head_id"] in gone_ids else row["head_id"]
        _reseal(conn, stored_records, {**row, "head_id": head, "revision": new_id()})


def _reseal(conn: Connection, table: Table, row: dict[str, Any]) -> None:
    values = sealed(table, {k: v for k, v in row.items() if k != "checksum"})
    conn.execute(update(table).where(table.c.id == row["id"]).values(values))

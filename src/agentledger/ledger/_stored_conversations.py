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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import JsonValue
from sqlalchemy import Connection, insert, literal, select, update

from ..errors import UsageError
from ._engine import Database
from ._graph_rows import insert_if_absent
from .checksums import check_row, sealed
from .tables import ConversationKind, conversations, stored_entries, stored_records

T = TypeVar("T")


@dataclass(frozen=True)
class StoredEntry:
    """One entry of a conversation's tree, its message as the framework serialized it."""

    id: str
    parent_id: str | None
    kind: str
    message: JsonValue


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
        """Store ``record`` and its new ``entries`` if the stored revision is
        ``expected_revision`` (``None``: no record yet) and its head is stored or among
        ``entries``; ``False``, with nothing written, if not."""

        def work(conn: Connection) -> bool:
            new_ids = {entry.id for entry in entries}
            head = record.head_id
            if head is not None and head not in new_ids and self._entry_row(conn, head) is None:
                return False
            tenant = self._conversation(conn, record.conversation_id)
            row = sealed(stored_records, _record_row(record, tenant))
            # RETURNING says whether the row was written (psycopg's rowcount of an insert that
            # may do nothing is -1).
            if expected_revision is None:
                statement = _insert_if_absent(conn).values(row)
            else:
                statement = (
                    update(stored_records)
                    .where(stored_records.c.id == record.conversation_id)
                    .where(stored_records.c.revision == expected_revision)
                    .values(row)
                )
            if conn.execute(statement.returning(stored_records.c.id)).first() is None:
                return False
            now = self._database.clock()
            rows = [
                sealed(stored_entries, _entry_row(entry, record.conversation_id, tenant, now))
                for entry in entries
            ]
            if rows:
                conn.execute(insert(stored_entries), rows)
            return True

        return self._write("saving a conversation", work)

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
        """The record of ``conversation_id``, if it has one in the handle's scope."""
        found = self.records(where=stored_records.c.id == conversation_id)
        return found[0] if found else None

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
        recursive query, whichever conversations wrote them."""
        walk = (
            select(*stored_entries.c, literal(0).label("depth"))
            .where(stored_entries.c.id == head_id)
            .cte("walk", recursive=True)
        )
        parent = stored_entries.alias("parent")
        walk = walk.union_all(
            select(*parent.c, (walk.c.depth + 1).label("depth")).where(
                parent.c.id == walk.c.parent_id
            )
        )
        query = select(walk).order_by(walk.c.depth)
        if limit is not None:
            query = query.limit(limit)

        def read(conn: Connection) -> list[StoredEntry]:
            rows = list(conn.execute(query).mappings())
            for row in rows:
                check_row(stored_entries, {k: v for k, v in row.items() if k != "depth"})
            return [_entry_of(row) for row in reversed(rows)]

        return self._database.read("reading a conversation's history", read)

    # --- inside a transaction -------------------------------------------------------------------

    def _write(self, what: str, work: Callable[[Connection], bool]) -> bool:
        enclosing = self._database.joined()
        if enclosing is not None:
            return work(enclosing)
        return self._database.write(what, work)

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
        return _entry_of(row)

    def _conversation(self, conn: Connection, conversation_id: str) -> str | None:
        """The tenant of conversation ``conversation_id``, created in the handle's scope when
        it is new."""
        scope = self._database.scope
        found = (
            conn.execute(
                select(conversations.c.tenant_id, conversations.c.owner_id).where(
                    conversations.c.id == conversation_id
                )
            )
            .mappings()
            .first()
        )
        if found is None:
            now = self._database.clock()
            row = {
                "id": conversation_id,
                "kind": ConversationKind.MAIN.value,
                "title": None,
                "parent_run_id": None,
                "version": 0,
                "created_at": now,
                "updated_at": now,
                "metadata": {},
                **scope.columns(),
            }
            conn.execute(insert_if_absent(conn), sealed(conversations, row))
            return scope.tenant_id
        tenant, owner = found["tenant_id"], found["owner_id"]
        if (scope.tenant_id not in (None, tenant)) or (scope.owner_id not in (None, owner)):
            raise UsageError(
                f"the conversation id {conversation_id!r} is a conversation outside this "
                "handle's scope: choose another id, or use a handle of that conversation's scope"
            )
        return str(tenant) if tenant is not None else None


def _insert_if_absent(conn: Connection) -> Any:
    """An insert of a record that does nothing when its conversation has one already."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(stored_records).on_conflict_do_nothing(index_elements=["id"])
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(stored_records).on_conflict_do_nothing(index_elements=["id"])


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
        "created_at": now,
        "tenant_id": tenant,
    }


def _entry_of(row: Any) -> StoredEntry:
    return StoredEntry(
        id=row["id"], parent_id=row["parent_id"], kind=row["kind"], message=row["message"]
    )

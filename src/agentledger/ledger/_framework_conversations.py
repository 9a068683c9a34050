"""The ledger conversation a framework's own conversation is (a graph's thread, a stored
conversation): found in the handle's scope, or created there when it is new, in the
transaction that writes the framework's rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Connection, Table, bindparam, select

from ..errors import UsageError
from ._engine import Database
from ._statements import statements_for
from .checksums import sealed
from .tables import ConversationKind, conversations

OWNERS = select(conversations.c.tenant_id, conversations.c.owner_id).where(
    conversations.c.id == bindparam("conversation_id")
)


def insert_if_absent(
    conn: Connection, table: Table = conversations, keys: Sequence[str] = ("id",)
) -> Any:
    """An insert into ``table`` that does nothing when a row of the same ``keys`` (its id,
    unless told) is there (each dialect's own ``ON CONFLICT DO NOTHING``; PostgreSQL's is
    loaded only for a PostgreSQL ledger)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing(index_elements=list(keys))


def conversation_tenant(
    conn: Connection,
    database: Database,
    conversation_id: str,
    *,
    named: str,
    metadata: Mapping[str, JsonValue],
) -> str | None:
    """The tenant of conversation ``conversation_id`` (the framework's ``named``, for the
    error), created in the handle's scope with ``metadata`` when it is new. A conversation of
    another scope is refused."""
    scope = database.scope
    found = statements_for(conn.dialect).select(conn, OWNERS, {"conversation_id": conversation_id})
    if not found:
        _create(conn, database, conversation_id, metadata)
        return scope.tenant_id
    tenant, owner = found[0]["tenant_id"], found[0]["owner_id"]
    if (scope.tenant_id not in (None, tenant)) or (scope.owner_id not in (None, owner)):
        raise UsageError(
            f"the {named} {conversation_id!r} is a conversation outside this handle's scope: "
            f"choose another {named}, or use a handle of that conversation's scope"
        )
    return str(tenant) if tenant is not None else None


def _create(
    conn: Connection,
    database: Database,
    conversation_id: str,
    metadata: Mapping[str, JsonValue],
    owners: Mapping[str, str | None] | None = None,
) -> None:
    """Create the conversation in the handle's scope (or of the tenant and owner ``owners``
    gives); nothing when a transaction beside this one created it first (LangGraph writes a
    step's tasks at once)."""
    now = database.clock()
    row = {
        "id": conversation_id,
        "kind": ConversationKind.MAIN.value,
        "title": None,
        "parent_run_id": None,
        "version": 0,
        "created_at": now,
        "updated_at": now,
        "metadata": dict(metadata),
        **(database.scope.columns() if owners is None else owners),
    }
    conn.execute(insert_if_absent(conn), sealed(conversations, row))

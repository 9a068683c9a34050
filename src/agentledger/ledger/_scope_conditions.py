"""What keeps a handle's reads and writes to its scope (:mod:`._scope`): the conditions its
queries gain, the rows it may see, and the columns a conversation created in it takes.

A scoped handle answers for anything outside its scope exactly as for an id that does not
exist (the same :class:`NotFoundError`, word for word), so that it tells nothing of what other
tenants hold. The unscoped handle's queries gain no condition at all.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Connection, Select, Table, select

from ..errors import UsageError
from ._scope import Scope
from .tables import conversations

S = TypeVar("S", bound=Select[Any])

WHOLE_LEDGER = (
    "{what} reads the whole ledger, whatever the scope: call it on the unscoped ledger (the "
    "one Ledger.open returned; on the command line, without --tenant and --owner, nor "
    "AGENTLEDGER_TENANT and AGENTLEDGER_OWNER)"
)


def within(query: S, scope: Scope, table: Table) -> S:
    """``query`` keeping to ``scope``'s rows of ``table`` (one with ``tenant_id`` and
    ``owner_id``); unchanged when the scope is the whole ledger."""
    return query if scope.everything else query.where(scope.where(table))


def refuse_in_scope(scope: Scope, what: str) -> None:
    """Raise :class:`UsageError` when ``scope`` is not the whole ledger: ``what`` reads it all."""
    if not scope.everything:
        raise UsageError(WHOLE_LEDGER.format(what=what))


def created_in(scope: Scope, tenant_id: str | None, owner_id: str | None) -> dict[str, Any]:
    """The tenant and owner of a conversation created in ``scope``, given ``tenant_id`` and
    ``owner_id`` (each defaults to the scope's; one that contradicts it is a
    :class:`UsageError`, and nothing is written)."""
    chosen = scope.within(
        tenant_id,
        owner_id,
        "this handle is scoped to {name} {mine!r}: it cannot create a conversation with "
        "{name} {given!r}. Create it through a handle of that scope (or the unscoped ledger); "
        "nothing was written",
    )
    return chosen.columns()


def check_id_free(conn: Connection, conversation_id: str) -> None:
    """Refuse a new conversation's chosen id that a conversation has already (whatever its
    scope: ids are the whole ledger's)."""
    taken = select(conversations.c.id).where(conversations.c.id == conversation_id)
    if conn.execute(taken).first() is not None:
        raise id_taken(conversation_id)


def id_taken(conversation_id: str) -> UsageError:
    """The error for a chosen conversation id that another conversation has."""
    return UsageError(
        f"the conversation id {conversation_id!r} is taken in this ledger: choose another "
        "(nothing was written)"
    )

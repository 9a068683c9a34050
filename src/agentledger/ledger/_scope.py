"""A ledger handle's scope: the tenant and the owner whose conversations it sees and writes.

``Ledger.scoped(tenant_id=..., owner_id=...)`` returns a handle whose every read, write and run
keeps to the conversations of that tenant and owner; a conversation (or a run) outside it is
not found, exactly as one that does not exist. On PostgreSQL the database enforces the tenant
too: each transaction of a handle scoped to a tenant sets ``agentledger.tenant_id`` for itself
(``SET LOCAL``), which the row-level security policies of revision 0010 compare every row with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._values import check_storable
from ..errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection, Table

TENANT_SETTING = "agentledger.tenant_id"
"""The PostgreSQL setting a scoped transaction holds its tenant in."""

_SET_TENANT = f"SELECT set_config('{TENANT_SETTING}', :tenant, true)"


@dataclass(frozen=True)
class Scope:
    """A tenant and an owner (``None``: any). ``Scope()`` is the whole ledger."""

    tenant_id: str | None = None
    owner_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("tenant_id", "owner_id"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, str) or not value or value != value.strip():
                raise UsageError(
                    f"{name} must be a non-empty text without leading or trailing spaces, "
                    f"not {value!r}"
                )
            if any(ord(c) < 32 or c == "\x7f" for c in value):
                raise UsageError(f"{name} {value!r} holds a control character: choose another")
            check_storable(value, f"the scope's {name}")

    @property
    def everything(self) -> bool:
        """Whether this scope is the whole ledger (no tenant, no owner)."""
        return self.tenant_id is None and self.owner_id is None

    def narrowed(self, tenant_id: str | None, owner_id: str | None) -> Scope:
        """This scope further limited to ``tenant_id`` and ``owner_id``. A handle scoped to one
        tenant (or owner) cannot be widened or moved to another: that is a :class:`UsageError`."""
        return self.within(
            tenant_id,
            owner_id,
            "this handle is scoped to {name} {mine!r}: it cannot be scoped to {name} "
            "{given!r}. Scope the unscoped ledger instead.",
        )

    def within(self, tenant_id: str | None, owner_id: str | None, refusal: str) -> Scope:
        """This scope with ``tenant_id`` and ``owner_id`` where it has none; a value that
        contradicts its own is a :class:`UsageError` saying ``refusal`` (formatted with the
        column's ``name``, the scope's value ``mine`` and the ``given`` one)."""
        for name, mine, given in (
            ("tenant_id", self.tenant_id, tenant_id),
            ("owner_id", self.owner_id, owner_id),
        ):
            if mine is not None and given is not None and mine != given:
                raise UsageError(refusal.format(name=name, mine=mine, given=given))
        return Scope(
            tenant_id if tenant_id is not None else self.tenant_id,
            owner_id if owner_id is not None else self.owner_id,
        )

    def where(self, table: Table) -> ColumnElement[bool]:
        """The condition that keeps ``table``'s rows (conversations or runs: tables that have
        both columns; others have ``tenant_id`` only) to this scope."""
        from sqlalchemy import and_, true  # a handle's queries are SQLAlchemy's: it is loaded

        conditions = []
        if self.tenant_id is not None:
            conditions.append(table.c.tenant_id == self.tenant_id)
        if self.owner_id is not None:
            conditions.append(table.c.owner_id == self.owner_id)
        return and_(true(), *conditions) if conditions else true()

    def columns(self) -> dict[str, Any]:
        """The values a conversation created in this scope takes."""
        return {"tenant_id": self.tenant_id, "owner_id": self.owner_id}

    def enter(self, conn: Connection) -> None:
        """Begin a transaction of this scope on ``conn``: on PostgreSQL, hold its tenant in
        ``agentledger.tenant_id`` until the transaction ends (nothing on SQLite, where the
        library alone keeps to the scope)."""
        if self.tenant_id is not None and conn.dialect.name == "postgresql":
            from sqlalchemy import text

            conn.execute(text(_SET_TENANT), {"tenant": self.tenant_id})


EVERYTHING = Scope()


def holds(scope: Scope, row: Mapping[Any, Any]) -> bool:
    """Whether ``row`` (of a conversation or a run) is in ``scope``."""
    return (scope.tenant_id is None or row["tenant_id"] == scope.tenant_id) and (
        scope.owner_id is None or row["owner_id"] == scope.owner_id
    )

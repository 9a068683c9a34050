"""What keeps a handle's reads and writes to its scope (:mod:`._scope`): the conditions its
queries gain, the rows it may see, and the columns a conversation created in it takes.

A scoped handle answers for anything outside its scope exactly as for an id that does not
exist (the same :class:`NotFoundError`, word for word), so that it tells nothing of what other
tenants hold. The unscoped handle's queries gain no condition at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
        raise UsageError(
            f"the conversation id {conversation_id!r} is taken in this ledger: choose another "
            "(nothing was written)"
        )


# --- conversations by their metadata --------------------------------------------------------------

_JSON_TYPES = {True: "true", False: "false", None: "null"}


def metadata_condition(dialect: str, wanted: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The conditions, as SQL text (each ``AND ...``) and their parameters, that keep the
    conversations whose metadata has each of ``wanted``'s top-level keys, equal to its value
    (a string, a number, a boolean or ``None`` for JSON null). Keys and values are parameters,
    never part of the SQL text or of a JSON path, so any text is a key."""
    for key, value in wanted.items():
        _check_filter(key, value)
    if dialect == "postgresql":
        return "AND metadata @> CAST(:metadata AS JSONB) ", {"metadata": json.dumps(wanted)}
    conditions, params = [], {}
    for n, (key, value) in enumerate(wanted.items()):
        condition, values = _sqlite_member(n, key, value)
        conditions.append(condition)
        params.update(values)
    return "".join(conditions), params


def _check_filter(key: object, value: object) -> None:
    if not isinstance(key, str):
        raise UsageError(f"a metadata filter's keys are text, not {key!r}")
    if not (value is None or isinstance(value, str | int | float | bool)):
        raise UsageError(
            f"the metadata filter on {key!r} must be a string, a number, a boolean or None "
            f"(JSON null), not {type(value).__name__}: objects and lists are not compared"
        )


def _sqlite_member(n: int, key: str, value: Any) -> tuple[str, dict[str, Any]]:
    """SQLite: the metadata object has ``key``, whose value is ``value`` (``json_each``, so
    the key is compared as data, never read as a JSON path); the ``n``-th such condition."""
    params: dict[str, Any] = {f"key{n}": key}
    if isinstance(value, bool) or value is None:
        matches = f"j.type = '{_JSON_TYPES[value]}'"
    elif isinstance(value, str):
        matches, params[f"value{n}"] = f"j.type = 'text' AND j.atom = :value{n}", value
    else:
        matches = f"j.type IN ('integer', 'real') AND j.atom = :value{n}"
        params[f"value{n}"] = value
    member = (
        f"SELECT 1 FROM json_each(conversations.metadata) AS j WHERE j.key = :key{n} AND {matches}"
    )
    return f"AND EXISTS ({member}) ", params

"""Ids a person can type: a run or a conversation found by its id or by a unique prefix of it,
and the shortest prefix that stands for each id (what the command line shows).

The exact id is always tried first, through the primary key. A prefix needs at least
``SHORT_ID_LENGTH`` characters: one that begins no id is :class:`NotFoundError`, one that begins
several is :class:`AmbiguousIdError`, listing them. On SQLite a prefix is a range of the primary
key's index (text compares as bytes there); on PostgreSQL text compares by the database's
collation, where a prefix is no range, so ``substr`` compares it and the id column is read
through (only once the exact id was not found, or to shorten the ids a listing shows).

The statements are SQL text, the same for :class:`~agentledger.ledger.Ledger` and
:class:`~agentledger.ledger.LedgerReader` (:mod:`._sql`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from .._values import SHORT_ID_LENGTH, find_unstorable, short_ids
from ..errors import AmbiguousIdError, NotFoundError
from ._scope import EVERYTHING, Scope
from ._sql import Reads, in_scope, scope_params

IdKind = Literal["run", "conversation"]
CANDIDATES_LISTED = 10
"""How many ids an ambiguous prefix's error lists."""

TABLES: dict[IdKind, str] = {"run": "agent_runs", "conversation": "conversations"}
"""The table of each kind of id."""
_LISTINGS: dict[IdKind, str] = {
    "run": "agentledger runs",
    "conversation": "agentledger conversations",
}


def not_found(kind: IdKind, given: str) -> NotFoundError:
    """No ``kind`` has the id ``given``, nor one it begins."""
    prefix = (
        f"no {kind} id begins with it"
        if len(given) >= SHORT_ID_LENGTH
        else f"a prefix needs at least {SHORT_ID_LENGTH} characters"
    )
    return NotFoundError(f"no {kind} {given!r} in this ledger ({prefix}; see `{_LISTINGS[kind]}`)")


def check_id(kind: IdKind, given: str) -> None:
    """Not found, before any statement, when ``given`` holds a NUL character or a lone
    surrogate: no id holds one (the ledger refuses to store them), and neither backend can even
    compare one (PostgreSQL refuses a NUL in text, no lone surrogate encodes as UTF-8), so
    asking the database would end in a driver error, not in the answer "no such id"."""
    if find_unstorable(given) is not None:
        raise not_found(kind, given)


def id_by_prefix(reads: Reads, kind: IdKind, given: str, scope: Scope = EVERYTHING) -> str:
    """The one ``kind`` id in ``scope`` that ``given`` begins (once no row has ``given`` as its
    id): the ids of other scopes are neither found nor listed."""
    if len(given) < SHORT_ID_LENGTH:
        raise not_found(kind, given)
    begins, params = _begins(reads.dialect, given, "prefix")
    sql = (
        f"SELECT id FROM {TABLES[kind]} WHERE {begins} {in_scope(scope)}"
        f"ORDER BY id LIMIT {CANDIDATES_LISTED + 1}"
    )
    found = [row["id"] for row in reads.rows(sql, {**params, **scope_params(scope)})]
    if not found:
        raise not_found(kind, given)
    if len(found) > 1:
        raise _ambiguous(kind, given, found)
    return str(found[0])


def _ambiguous(kind: IdKind, given: str, found: list[str]) -> AmbiguousIdError:
    listed = tuple(found[:CANDIDATES_LISTED])
    how_many = (
        f"more than {CANDIDATES_LISTED} {kind}s; the first {CANDIDATES_LISTED}"
        if len(found) > CANDIDATES_LISTED
        else f"{len(found)} {kind}s"
    )
    return AmbiguousIdError(
        f"{given!r} begins the ids of {how_many}: {', '.join(listed)}. Give more characters "
        f"of the {kind} meant (`{_LISTINGS[kind]}` shows each by a prefix that is unique)",
        candidates=listed,
    )


def shortest_prefixes(
    reads: Reads, kind: IdKind, ids: Iterable[str], scope: Scope = EVERYTHING
) -> dict[str, str]:
    """Each of ``ids`` by its shortest unique prefix among every ``kind`` id in ``scope`` (a
    prefix that only another scope's ids share is no longer than one they do not)."""
    wanted = list(dict.fromkeys(ids))
    heads = sorted(
        {
            i[:SHORT_ID_LENGTH]
            for i in wanted
            if len(i) > SHORT_ID_LENGTH and find_unstorable(i) is None  # see check_id
        }
    )
    if not heads:
        return short_ids(wanted)
    conditions, params = [], scope_params(scope)
    for n, head in enumerate(heads):
        condition, values = _begins(reads.dialect, head, f"head{n}")
        conditions.append(f"({condition})")
        params.update(values)
    sql = f"SELECT id FROM {TABLES[kind]} WHERE ({' OR '.join(conditions)}) {in_scope(scope)}"
    return short_ids(wanted, [row["id"] for row in reads.rows(sql, params)])


def _begins(dialect: str, prefix: str, name: str) -> tuple[str, dict[str, Any]]:
    """The condition that ``id`` begins with ``prefix``, case-sensitively (SQLite's LIKE is
    not), as the parameter ``name``; and its parameters."""
    last = prefix[-1]
    if dialect == "sqlite" and ord(last) < 0x10FFFF:
        end = prefix[:-1] + chr(ord(last) + 1)
        return f"id >= :{name} AND id < :{name}_end", {name: prefix, f"{name}_end": end}
    return f"substr(id, 1, {len(prefix)}) = :{name}", {name: prefix}

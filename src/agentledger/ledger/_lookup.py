"""Ids a person can type: a run or a conversation found by its id or by a unique prefix of it,
and the shortest prefix that stands for each id (what the command line shows).

The exact id is always tried first, through the primary key. A prefix needs at least
``SHORT_ID_LENGTH`` characters: one that begins no id is :class:`NotFoundError`, one that begins
several is :class:`AmbiguousIdError`, listing them. A prefix is a range of ids in the order of
their bytes, which one index probe reads: SQLite's primary key index (text compares as bytes
there), and on PostgreSQL, whose primary keys follow the database's collation (where a prefix
need not be a range), the index of the ids in the ``"C"`` collation (revision 0017). Ids are any
text, so the range is what holds in every collation, not a property of UUIDs.

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
        f"SELECT id FROM {TABLES[kind]} WHERE {begins} {_in_scope(reads.dialect, scope)}"
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
    sql = (
        f"SELECT id FROM {TABLES[kind]} WHERE ({' OR '.join(conditions)}) "
        f"{_in_scope(reads.dialect, scope)}"
    )
    return short_ids(wanted, [row["id"] for row in reads.rows(sql, params)])


def _in_scope(dialect: str, scope: Scope) -> str:
    """The scope's conditions, which on SQLite may not pick the tenant's or the owner's index
    over the range of ids: SQLite keeps no statistics in a reader's hands, and would read every
    row of the tenant to find a few ids."""
    return in_scope(scope, unindexed=dialect == "sqlite")


def _begins(dialect: str, prefix: str, name: str) -> tuple[str, dict[str, Any]]:
    """The condition that ``id`` begins with ``prefix``, case-sensitively (SQLite's LIKE is
    not), as the parameter ``name``; and its parameters. It is the range from ``prefix`` up to
    the first text after every text ``prefix`` begins, in the order of bytes (UTF-8's bytes
    sort as the code points do), which an index of that order reads at once."""
    end = _after_every_extension(prefix)
    if end is None:  # the prefix ends in the last code point: no text comes after
        return f"substr(id, 1, {len(prefix)}) = :{name}", {name: prefix}
    column = 'id COLLATE "C"' if dialect == "postgresql" else "id"
    condition = f"{column} >= :{name} AND {column} < :{name}_end"
    return condition, {name: prefix, f"{name}_end": end}


def _after_every_extension(prefix: str) -> str | None:
    """``prefix`` with its last character replaced by the next one a text may hold (the
    surrogates are never stored), or ``None`` after the last code point."""
    following = ord(prefix[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return None if following > 0x10FFFF else prefix[:-1] + chr(following)

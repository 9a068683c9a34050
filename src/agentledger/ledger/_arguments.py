"""The arguments the ledger's methods take from their callers, checked before any statement:
a value of one of the ledger's enumerations (a conversation's kind, a run's status) and a
number of rows. A wrong one is the caller's mistake, so it is a :class:`UsageError` that
says what is accepted, never a ``ValueError`` from the enumeration or a database error (a
negative ``LIMIT`` means "no limit" to SQLite and is refused by PostgreSQL)."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from ..errors import UsageError

E = TypeVar("E", bound=StrEnum)


def member(enum: type[E], value: E | str, what: str) -> E:
    """``value`` as a member of ``enum``; ``what`` names the argument in the error."""
    try:
        return enum(value)
    except ValueError:
        accepted = ", ".join(repr(m.value) for m in enum)
        raise UsageError(f"{what}={value!r} is not one of {accepted}") from None


def row_limit(limit: int | None, what: str = "limit") -> int | None:
    """``limit`` when it is ``None`` (every row) or a number of rows of 0 or more."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"{what}={limit!r}: give a number of rows of 0 or more, or None for all")
    return limit

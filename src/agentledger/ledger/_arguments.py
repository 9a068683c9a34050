"""The arguments the ledger's methods take from their callers, checked before any statement:
a value of one of the ledger's enumerations (a conversation's kind, a run's status), a number
of rows and a number of seconds. A wrong one is the caller's mistake, so it is a
:class:`UsageError` that says what is accepted, never a ``ValueError`` from the enumeration, an
``OverflowError`` from a date or a database error (a negative ``LIMIT`` means "no limit" to
SQLite and is refused by PostgreSQL)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
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


def quiet_since(now: datetime, stale_after: float) -> datetime:
    """When a run must have last beaten to be stale ``stale_after`` seconds after: a finite
    number of 0 or more (a NaN or an infinity failed deep in a query); one reaching back past
    the year 1 is the year 1, before any heartbeat."""
    try:
        if not math.isfinite(stale_after) or stale_after < 0:
            raise ValueError
        quiet = timedelta(seconds=stale_after)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(
            f"stale_after={stale_after!r}: give a finite number of seconds of 0 or more (a run "
            "that has not beaten for that long is stale), or None to go by the leases alone"
        ) from None
    try:
        return now - quiet
    except OverflowError:
        return datetime.min.replace(tzinfo=now.tzinfo)

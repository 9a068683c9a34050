"""Time-ordered text ids (UUIDv7, RFC 9562) and the UTC clock.

Ids sort by creation time as plain text, which keeps B-tree inserts at the right edge of
an index and makes ``ORDER BY id`` a sensible default in SQL over the ledger.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""A source of timezone-aware UTC datetimes; injected wherever the library reads the time."""

SHORT_ID_LENGTH = 8
"""The fewest characters an id is shown with, and the fewest a prefix must have to stand for
an id (git shows commits the same way). A UUIDv7's first 8 characters are the top of its
timestamp: ids made within about a minute of each other share them, and a shorter prefix names
weeks of ids, so it would hardly ever be unique."""

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def utc_now() -> datetime:
    """The default clock: the current time in UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A new UUIDv7 as text: 48 bits of Unix milliseconds, a 12-bit counter, random bits.

    Ids made in the same millisecond by one process keep their order through the counter.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _counter = (_counter + 1) & 0xFFF
            if _counter == 0:
                ms += 1
        else:
            _counter = int.from_bytes(os.urandom(2)) & 0x3FF
        _last_ms = ms
        counter = _counter
    tail = int.from_bytes(os.urandom(8)) & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | tail
    digits = f"{value:032x}"  # str(uuid.UUID(int=value)), without building the object
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def short_ids(
    ids: Iterable[str], known: Iterable[str] = (), *, minimum: int = SHORT_ID_LENGTH
) -> dict[str, str]:
    """Each of ``ids`` cut to its shortest prefix, of at least ``minimum`` characters, that no
    other id (of ``ids`` or of ``known``) begins with: what a person can type for it.

    ``known`` are the other ids that may share a beginning with one of ``ids`` (the ledger
    passes those sharing its first ``minimum`` characters). An id that another one begins with
    is shown whole: given whole, it is found by exact match first.
    """
    wanted = list(dict.fromkeys(ids))
    ordered = sorted({*wanted, *known})
    shortest: dict[str, str] = {}
    for identifier in wanted:
        at = bisect_left(ordered, identifier)
        # In sorted order, the id sharing the longest beginning with this one is a neighbour.
        neighbours = ordered[max(at - 1, 0) : at] + ordered[at + 1 : at + 2]
        shared = max((_common_length(identifier, other) for other in neighbours), default=0)
        shortest[identifier] = identifier[: max(minimum, shared + 1)]
    return shortest


def _common_length(first: str, second: str) -> int:
    """How many characters ``first`` and ``second`` begin with in common."""
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length

"""Time-ordered text ids (UUIDv7, RFC 9562) and the UTC clock.

Ids sort by creation time as plain text, which keeps B-tree inserts at the right edge of
an index and makes ``ORDER BY id`` a sensible default in SQL over the ledger.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""A source of timezone-aware UTC datetimes; injected wherever the library reads the time."""

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

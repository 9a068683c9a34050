"""Times as people type them: an ISO 8601 date or time, or a time ago (``30m``, ``12h``,
``90d``, ``2w``), for the command line's ``--since`` and ``--older-than`` and the MCP server's
``since``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_AGO = re.compile(r"\s*(\d+)\s*([mhdw])\s*", re.IGNORECASE)
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def time_ago(text: str) -> timedelta | None:
    """``text`` as a duration (``30m``, ``12h``, ``90d``, ``2w``: a whole number and a unit:
    minutes, hours, days or weeks); ``None`` when it is not one (or too long to be one)."""
    found = _AGO.fullmatch(text)
    if found is None:
        return None
    try:
        return timedelta(**{_UNITS[found[2].lower()]: int(found[1])})
    except OverflowError:
        return None


def moment(text: str) -> datetime:
    """``text`` as an aware time: ISO 8601, UTC unless it says otherwise. :class:`ValueError`
    saying what is accepted."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO 8601 date or time: give one like 2026-11-01 or "
            "2026-11-01T08:00:00Z"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed

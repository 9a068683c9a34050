"""A framework's message kept as the ledger rows that hold its text and a residue: the JSON of
everything else, kept only where the message it rebuilds is equal to the one given (the
framework's own ``==``), so that what is read back is what was saved. A message that would not
come back equal is kept whole by the caller."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import JsonValue

M = TypeVar("M")


def kept_if_rebuilt(
    message: M, fields: Mapping[str, Any], rebuild: Callable[[dict[str, JsonValue]], M]
) -> dict[str, JsonValue] | None:
    """``fields`` (``message``'s, less the text its rows hold) as JSON, if ``rebuild`` makes
    ``message`` back from that JSON; None when it would not (a field that is not JSON, a
    message the rebuild changes)."""
    try:
        kept: dict[str, JsonValue] = json.loads(json.dumps(fields))
    except (TypeError, ValueError):
        return None
    try:
        same = rebuild(kept) == message
    except (KeyError, TypeError, ValueError):
        return None
    return kept if same else None

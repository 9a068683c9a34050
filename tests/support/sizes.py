"""How big the reliability suite runs: small in ``make test``, large in ``make soak``."""

from __future__ import annotations

import os

SOAK = os.environ.get("AGENTLEDGER_SOAK") == "1"
"""True under ``make soak``."""


def size(small: int, soak: int) -> int:
    """``small`` in ``make test``, ``soak`` in ``make soak``."""
    return soak if SOAK else small


def seconds(small: float, soak: float) -> float:
    return soak if SOAK else small

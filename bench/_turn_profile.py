"""Where a turn's time goes: ``Agent.run`` turns profiled, their self time by area.

A worker process of its own builds a conversation of :data:`HISTORY` turns (untimed), then
runs :data:`TURNS` more under ``cProfile`` and sums each function's own time (``tottime``) by
the area its code belongs to. cProfile adds a cost to every Python call, so the shares, not
the times, are the figures: they say what separates a turn from the raw writer's.
"""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path

from agentledger.ledger import Ledger

from ._turns import _agent, question

HISTORY = 50
TURNS = 40

AREAS = (
    ("sqlite3: statements and commits", ("sqlite3.", "_sqlite3")),
    ("the ledger's Python (rows, checksums, statements)", ("agentledger/ledger/",)),
    ("the scripted model and the tool", ("agentledger/llm/", "bench/")),
    ("the loop and the recorder", ("agentledger/",)),
    ("pydantic", ("pydantic",)),
    ("SQLAlchemy", ("sqlalchemy",)),
)
"""Each area and the markers of its code (a file path, or a built-in's owner); the first that
matches counts, anything else is "other" (json, datetime, uuid, the interpreter's built-ins)."""
OTHER = "other: json, datetime, uuid, built-ins"


def _area(filename: str, name: str) -> str:
    where = filename.replace("\\", "/") if filename != "~" else name
    for area, markers in AREAS:
        if any(marker in where for marker in markers):
            return area
    return OTHER


class TurnProfile:
    """One conversation profiled turn by turn (a worker's object)."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.ledger = Ledger.open(Path(path), synchronous=synchronous)
        self.conversation_id: str | None = None
        for turn in range(HISTORY):
            self._turn(turn)

    def _turn(self, turn: int) -> None:
        agent = _agent(self.ledger)
        self.conversation_id = agent.run(question(turn), self.conversation_id).conversation_id

    def shares(self) -> dict[str, float]:
        """Each area's share of the profiled turns' self time."""
        profile = cProfile.Profile()
        for turn in range(HISTORY, HISTORY + TURNS):
            agent = _agent(self.ledger)  # built outside the profile, as the timed turns do
            profile.enable()
            self.conversation_id = agent.run(question(turn), self.conversation_id).conversation_id
            profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        totals: dict[str, float] = {}
        for (filename, _, name), (_, _, tottime, _, _) in stats.items():
            area = _area(filename, name)
            totals[area] = totals.get(area, 0.0) + tottime
        whole = sum(totals.values())
        return {area: seconds / whole for area, seconds in sorted(totals.items())}

    def close(self) -> None:
        self.ledger.close()

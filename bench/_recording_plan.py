"""What the recording benchmark measures: the systems, the plans, the targets and the samples.

Shared by :mod:`bench.recording` (which measures) and :mod:`bench._recording_report` (which
reports).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from . import _peers
from ._common import Samples
from ._turns import Turns
from ._workers import Worker

AGENT, RECORDER, RAW = "agentledger Agent.run", "agentledger recorder alone", "raw sqlite3"
RAW_MESSAGES = "raw sqlite3 messages"
"""Plain ``sqlite3`` writing the turn's messages and usage alone (``bench/_raw_messages.py``)."""
LANGGRAPH, SESSION = _peers.LANGGRAPH, _peers.SESSION
OURS = {AGENT: "agent", RECORDER: "recorder", RAW: "raw", RAW_MESSAGES: "messages"}
MODES = ("NORMAL", "FULL")
PEER_MODES = {LANGGRAPH: "NORMAL", SESSION: "FULL"}
"""The ``synchronous`` each peer runs at: LangGraph's is set on the connection we give its
saver; the session's is SQLite's default, checked when it runs."""
LIKE_FOR_LIKE = {LANGGRAPH: AGENT, SESSION: RECORDER}
"""What each peer is held against: LangGraph's ``invoke`` runs its whole loop, as
``Agent.run`` does; the session only stores items, as the recorder alone does."""
COLD, WARM, RAW_LOAD = "cold", "warm", "raw"

TARGET_RECORDER = 1.5  # recorder alone / raw, per turn
TARGET_AGENT = 3.0  # Agent.run / raw messages, per turn
TARGET_FLAT = 1.2  # turn @ the longest history / turn @ the shortest
TARGET_LOAD = 1.5  # cold load_conversation / raw


@dataclass(frozen=True)
class Plan:
    histories: tuple[int, ...]
    reps: int
    load_reps: int
    modes: tuple[str, ...] = MODES


PLANS = {
    "quick": Plan((50, 200), reps=15, load_reps=15),
    "default": Plan((50, 200, 1000), reps=25, load_reps=25),
    "full": Plan((50, 200, 1000), reps=51, load_reps=51),
}


@dataclass(frozen=True)
class System:
    """One system at one ``synchronous`` setting, and how a worker sets it up."""

    label: str
    mode: str

    @property
    def name(self) -> str:
        return f"{self.label} {self.mode}"

    @property
    def is_peer(self) -> bool:
        return self.label not in OURS

    def worker(self, path: Path) -> Worker:
        if self.label == LANGGRAPH:
            return Worker(self.name, _peers.LangGraphTurns, path=str(path), synchronous=self.mode)
        if self.label == SESSION:
            return Worker(self.name, _peers.SessionTurns, path=str(path))
        kind = OURS[self.label]
        return Worker(self.name, Turns, path=str(path), kind=kind, synchronous=self.mode)


def key(system: System, turns: int) -> str:
    return f"{system.name} @ {turns}"


def systems(plan: Plan, tmp: Path) -> tuple[list[System], dict[str, str]]:
    """The systems to measure, and the peers skipped with the reason."""
    found = [System(label, mode) for mode in plan.modes for label in OURS]
    skipped: dict[str, str] = {}
    for peer, mode in PEER_MODES.items():
        gone = _peers.missing(peer)
        if gone:
            skipped[peer] = (
                f"not installed ({', '.join(gone)}): `pip install -e '.[bench]'` (`make bench` "
                "does)"
            )
        else:
            found.append(System(peer, mode))
    need = sum(_peers.langgraph_bytes(turns + plan.reps) for turns in plan.histories)
    free = shutil.disk_usage(tmp).free
    if LANGGRAPH not in skipped and free < 1.2 * need:
        skipped[LANGGRAPH] = (
            f"its files would need about {need / 1e9:,.1f} GB and {tmp} has "
            f"{free / 1e9:,.1f} GB free (give --tmpdir a larger disk)"
        )
        found = [s for s in found if s.label != LANGGRAPH]
    return found, skipped


@dataclass
class Measured:
    plan: Plan
    systems: list[System]
    samples: Samples
    """Seconds per turn, by :func:`key`."""
    paths: dict[str, Path]
    sizes: dict[str, int]
    """File sizes after the history was built, before the timed turns."""
    build_seconds: dict[str, float]
    stored: dict[str, dict[str, int]]
    """What each peer holds after its history was built."""
    skipped: dict[str, str]
    peer_synchronous: dict[str, int] = field(default_factory=dict)
    loads: Samples = field(default_factory=Samples)
    loaded_messages: int = 0
    profile: dict[str, float] = field(default_factory=dict)
    """Each area's share of the self time of profiled ``Agent.run`` turns."""

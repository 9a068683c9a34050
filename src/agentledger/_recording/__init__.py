"""The recorder interface: how the loop records a run (begin, each step, commit or fail), the
in-memory default, ``RunResult``, and ``Turn``: the same recording for code that runs its own
model calls.

The loop drives a :class:`Recorder`; the SQL ledger implements one. Both import this package,
and neither imports the other.
"""

from ._aturn import AsyncTurn, AsyncTurnStep, on_an_event_loop
from ._interrupted import (
    INTERRUPTED_RESULT,
    check_shown,
    interrupted_answer,
    interrupted_step,
    interruption_notice,
    with_late_result,
)
from ._memory import InMemoryRecorder
from ._recorder import SPAWNED_BY, HasRecorder, Recorder, RunResult
from ._turn import RECORDED_BY, Pricing, Turn, TurnStep

__all__ = [
    "INTERRUPTED_RESULT",
    "RECORDED_BY",
    "SPAWNED_BY",
    "AsyncTurn",
    "AsyncTurnStep",
    "HasRecorder",
    "InMemoryRecorder",
    "Pricing",
    "Recorder",
    "RunResult",
    "Turn",
    "TurnStep",
    "check_shown",
    "interrupted_answer",
    "interrupted_step",
    "interruption_notice",
    "on_an_event_loop",
    "with_late_result",
]

"""The recorder interface: how the loop records a run (begin, each step, commit or fail), the
in-memory default, and ``RunResult``.

The loop drives a :class:`Recorder`; the SQL ledger implements one. Both import this package,
and neither imports the other.
"""

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

__all__ = [
    "INTERRUPTED_RESULT",
    "SPAWNED_BY",
    "HasRecorder",
    "InMemoryRecorder",
    "Recorder",
    "RunResult",
    "check_shown",
    "interrupted_answer",
    "interrupted_step",
    "interruption_notice",
    "with_late_result",
]

"""The recorder interface: how the loop records a run (begin, each step, commit or fail), the
in-memory default, and ``RunResult``.

The loop drives a :class:`Recorder`; the SQL ledger implements one. Both import this package,
and neither imports the other.
"""

from ._memory import InMemoryRecorder
from ._recorder import (
    INTERRUPTED_RESULT,
    INTERRUPTED_TOOL_CALLS,
    LATE_TOOL_RESULTS,
    SPAWNED_BY,
    HasRecorder,
    Recorder,
    RunResult,
    check_shown,
    interrupted_answer,
)

__all__ = [
    "INTERRUPTED_RESULT",
    "INTERRUPTED_TOOL_CALLS",
    "LATE_TOOL_RESULTS",
    "SPAWNED_BY",
    "HasRecorder",
    "InMemoryRecorder",
    "Recorder",
    "RunResult",
    "check_shown",
    "interrupted_answer",
]

"""The events of a streamed run (``Agent.stream``, ``Agent.astream``): frozen pydantic models
with a ``type`` field, ready for ``model_dump(mode="json")``."""

from ._values import (
    Event,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    StepRecorded,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)

__all__ = [
    "Event",
    "ReasoningDelta",
    "RunFinished",
    "RunStarted",
    "StepRecorded",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
]

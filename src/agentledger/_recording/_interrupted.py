"""Interrupted turns as values: the answer cut short that a cancel commits, and the step that
was in progress, as far as it came, which the same transaction records in the trace.

A cancel (a stopped stream, a cancelled task, Ctrl-C) can land while the model streams its text
or while the tools it called run. The step in flight then becomes an ordinary step flagged
``interrupted``: its text as far as it was shown (or its model's whole response, when it had
answered), and one tool execution per call, either its result when it returned in time or an
error result that says the call was interrupted and whether it had started. A model can be sent
its trace like any other: every call has a result. A sync tool cannot be cancelled and runs on
in its thread; its result, when it comes, is added to its execution (:func:`with_late_result`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from .._values import (
    AgentStep,
    ContinuationOutcome,
    Message,
    Role,
    StepExecution,
    StepType,
    StopReason,
    ToolCall,
    ToolExecution,
    check_storable,
)

INTERRUPTED = "interrupted"
"""``decided_by`` of an interrupted step's outcome: the run ended during the step."""


def interruption_notice(*, started: bool, cancelled: bool = True) -> str:
    """The result (and error) of a tool call that had not returned when its run ended."""
    ended = "was cancelled" if cancelled else "ended"
    if started:
        return (
            f"interrupted: the run {ended} while this tool call ran (it had started); it may "
            "or may not have taken effect, and its result is unknown"
        )
    return f"interrupted: the run {ended} before this tool call started (it had not started)"


INTERRUPTED_RESULT = interruption_notice(started=True)
"""The error result of a tool call its run was cancelled in the middle of."""

LATE_NOTICE = (
    "interrupted: this tool call was still running when its run ended (it had started); it "
    "returned after the run had ended, and nothing acted on its result"
)
"""The error of a tool call whose result came after its run was interrupted."""


def interrupted_answer(partial_text: str) -> Message | None:
    """The assistant message that keeps what the user was shown of an answer cut short:
    exactly ``partial_text``, flagged ``interrupted`` (None when nothing was shown). A model
    is sent it as a plain answer: the tool calls of its step are in the trace, each answered."""
    check_shown(partial_text)
    if not partial_text:
        return None
    return Message(role=Role.ASSISTANT, content=partial_text, interrupted=True)


def check_shown(text: str) -> None:
    """Raise :class:`UnstorableTextError`, before anything is written, when streamed text
    cannot be stored (a NUL character, a lone surrogate): the same rule the model's whole
    response is held to."""
    check_storable(
        text,
        "the streamed text",
        what_to_do="strip or escape such characters from the model's output before they are "
        "shown (the step's whole response would be refused for them too); nothing was recorded",
    )


def interrupted_step(
    step_index: int,
    *,
    answered: AgentStep | None,
    shown: str,
    began: datetime | None,
    started: Mapping[str, datetime],
    returned: Mapping[str, ToolExecution],
    at: datetime,
    error: str | None = None,
) -> StepExecution | None:
    """The step ``step_index`` as far as it came when its run ended at ``at``: cancelled, or
    failed with ``error`` after text was shown. ``answered`` is the step as its model answered
    it, before its tools ran (None while it streamed its text, of which ``shown`` reached the
    user); ``started`` and ``returned`` are its calls that started and returned, by call id.
    None when the step came to nothing anyone saw."""
    if answered is None or answered.assistant_message is None:
        if not shown:
            return None
        message = Message(role=Role.ASSISTANT, content=shown, created_at=at)
        step = AgentStep(
            step_type=StepType.RESPONSE,
            assistant_message=message,
            started_at=began or at,
            finished_at=at,
            interrupted=True,
        )
    else:
        calls = answered.assistant_message.tool_calls
        executions = tuple(
            returned.get(c.id) or _cut(c, started.get(c.id), at, cancelled=error is None)
            for c in calls
        )
        update = {"tool_executions": executions, "finished_at": at, "interrupted": True}
        step = answered.model_copy(update=update)
    outcome = ContinuationOutcome(
        should_continue=False,
        stop_reason=StopReason.CANCELLED if error is None else StopReason.ERROR,
        decided_by=INTERRUPTED,
        detail="the run was cancelled during this step" if error is None else error,
    )
    return StepExecution(step_index=step_index, step=step, outcome=outcome)


def _cut(
    call: ToolCall, started_at: datetime | None, at: datetime, *, cancelled: bool
) -> ToolExecution:
    """The execution of ``call``, which had not returned when its run ended at ``at``."""
    notice = interruption_notice(started=started_at is not None, cancelled=cancelled)
    return ToolExecution(
        tool_call=call,
        result=notice,
        is_error=True,
        error=notice,
        started_at=started_at or at,
        finished_at=at,
    )


def with_late_result(cut: ToolExecution, late: ToolExecution) -> ToolExecution:
    """``cut``, an execution its run's interrupt answered, with what its tool returned after
    the run had ended: the result, when it finished and what the tool kept; still an error,
    since nothing acted on it."""
    return cut.model_copy(
        update={
            "arguments": late.arguments,
            "result": late.result,
            "error": LATE_NOTICE if not late.is_error else f"{LATE_NOTICE}: {late.error}",
            "finished_at": late.finished_at,
            "child_run_id": late.child_run_id,
            "subtree": late.subtree,
            "metadata": late.metadata,
        }
    )

"""Summarizing a conversation's oldest messages (a compaction between runs): the plan, the
summarizer's call, and recording what it made or why it failed."""

from __future__ import annotations

import contextlib
import time
from functools import partial

from .._core import ContextBudget, Summarizer, estimate_tokens, plan_summary, summary_message
from .._recording import Recorder
from .._values import (
    AgentState,
    Clock,
    Compaction,
    CompactionKind,
    CompactionStatus,
    InferenceResponse,
    Message,
    check_storable,
)
from ..errors import CompactionError, LedgerError
from ._engine import Call, Flow


def summarized(
    state: AgentState,
    fixed: list[Message],
    *,
    force: bool,
    budget: ContextBudget,
    summarizer: Summarizer,
    recorder: Recorder,
    clock: Clock,
) -> Flow[tuple[AgentState, Compaction | None]]:
    """Summarize ``state``'s conversation if :func:`plan_summary` says so (``fixed``: what every
    request holds besides it); the state to go on with, and what was recorded. A failed summary
    is recorded as such and raised as :class:`CompactionError`, the conversation unchanged."""
    plan = plan_summary(state, budget, fixed=fixed, force=force)
    if plan is None:
        return state, None
    started = time.perf_counter()
    attempt = Compaction(
        conversation_id=state.conversation_id,
        kind=CompactionKind.SUMMARY,
        messages=plan.replaced,
        tokens_before=plan.tokens_before,
        tokens_after=plan.tokens_before,
        model=summarizer.model,
        created_at=clock(),
    )
    response = None
    try:
        response = yield Call(
            partial(
                summarizer.summarize,
                plan.previous.append_messages(plan.moved),
                budget.summary_limit,
            )
        )
        if not response.content.strip():
            raise CompactionError("the model returned an empty summary")
        check_storable(response.content, "the summary")
    except Exception as exc:
        failed = attempt.model_copy(
            update={
                "status": CompactionStatus.FAILED,
                "error": f"{type(exc).__name__}: {exc}",
                "duration_ms": (time.perf_counter() - started) * 1000,
                **(_spent(response) if response is not None else {}),
            }
        )
        with contextlib.suppress(LedgerError):  # the model's error is the one to report
            yield Call(partial(recorder.record_compaction, state, failed, summary=None, moved=()))
        raise CompactionError(
            f"summarizing conversation {state.conversation_id} failed ({failed.error}); "
            "the conversation is unchanged"
        ) from exc
    summary = summary_message(response.content, plan, attempt.id)
    compaction = attempt.model_copy(
        update={
            "tokens_after": estimate_tokens((summary, *plan.kept)) + plan.fixed_tokens,
            "summary_id": summary.id,
            "duration_ms": (time.perf_counter() - started) * 1000,
            **_spent(response),
        }
    )
    yield Call(
        partial(recorder.record_compaction, state, compaction, summary=summary, moved=plan.moved)
    )
    return (yield Call(partial(recorder.load_conversation, state.conversation_id))), compaction


def _spent(response: InferenceResponse) -> dict[str, object]:
    """What a summarization call spent, as :class:`Compaction` fields."""
    spent: dict[str, object] = {"usage": response.usage, "cost_usd": response.cost_usd}
    if response.model:
        spent["model"] = response.model
    return spent

"""Values of the continuation decision: budgets, stop reasons, verdicts and outcomes.

The criteria that produce them live in :mod:`agentledger.criteria`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, NonNegativeFloat, PositiveInt

from ._usage import Spend


class StopReason(StrEnum):
    """Why a run stopped."""

    COMPLETED = "completed"
    """The model answered without asking for tools."""
    STEPS_LIMIT = "steps_limit"
    TOKEN_LIMIT = "token_limit"
    COST_LIMIT = "cost_limit"
    TIME_LIMIT = "time_limit"
    DEADLINE = "deadline"
    FINISH_REASON = "finish_reason"
    """The provider ended the response in a way that stops the run (``content_filter``, ...)."""
    ERROR = "error"
    """The model call failed."""
    CUSTOM = "custom"
    """A criterion of the user's stopped the run."""
    CANCELLED = "cancelled"
    """The run was cancelled while it ran (a stopped stream, a cancelled task, Ctrl-C, a
    dropped client): it ended ``interrupted``, what the user was shown kept as its answer."""

    @property
    def is_limit(self) -> bool:
        """A stop imposed on the run rather than chosen by the model or caused by an error."""
        return self in _LIMITS


_LIMITS = frozenset(
    {
        StopReason.STEPS_LIMIT,
        StopReason.TOKEN_LIMIT,
        StopReason.COST_LIMIT,
        StopReason.TIME_LIMIT,
        StopReason.DEADLINE,
        StopReason.CUSTOM,
    }
)


class ExecutionBudget(BaseModel):
    """Limits on one run. ``None`` means no limit.

    ``max_seconds`` is measured from the start of the run and ``deadline`` is a point in time
    (timezone-aware); both, like every limit, are checked after each step, so a step in flight
    is never cut short. Tokens are ``Usage.total_tokens``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    max_steps: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    max_cost_usd: NonNegativeFloat | None = None
    max_seconds: NonNegativeFloat | None = None
    deadline: AwareDatetime | None = None

    def tightened(self, other: ExecutionBudget) -> ExecutionBudget:
        """The stricter of two budgets, limit by limit."""
        return ExecutionBudget(
            max_steps=_smaller(self.max_steps, other.max_steps),
            max_tokens=_smaller(self.max_tokens, other.max_tokens),
            max_cost_usd=_smaller(self.max_cost_usd, other.max_cost_usd),
            max_seconds=_smaller(self.max_seconds, other.max_seconds),
            deadline=_smaller(self.deadline, other.deadline),
        )

    def is_unlimited(self) -> bool:
        return self == _UNLIMITED

    def remaining(self, spent: Spend, started_at: datetime | None) -> ExecutionBudget:
        """What is left of this budget once ``spent`` is spent: the most a subagent may use.

        Time left becomes a deadline. A limit already used up leaves the least there is (one
        step, one token, no money), so a child can still give the answer it has.
        """
        deadline = self.deadline
        if self.max_seconds is not None and started_at is not None:
            end = started_at + timedelta(seconds=self.max_seconds)
            deadline = end if deadline is None else min(deadline, end)
        cost = None
        if self.max_cost_usd is not None:
            cost = max(0.0, self.max_cost_usd - (spent.cost_usd or 0.0))
        return ExecutionBudget(
            max_steps=None if self.max_steps is None else max(1, self.max_steps - spent.steps),
            max_tokens=None
            if self.max_tokens is None
            else max(1, self.max_tokens - spent.usage.total_tokens),
            max_cost_usd=cost,
            deadline=deadline,
        )


_UNLIMITED = ExecutionBudget.model_construct()

_Bound = TypeVar("_Bound", int, float, datetime)


def _smaller(a: _Bound | None, b: _Bound | None) -> _Bound | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class Verdict(StrEnum):
    """One criterion's say on whether the run goes on."""

    STOP = "stop"
    """The run must stop (a limit, an error)."""
    CONTINUE = "continue"
    """This criterion asks for another step (the model asked for tools)."""
    ALLOW_STOP = "allow_stop"
    """Stopping is fine by this criterion, and it gives a reason."""
    ABSTAIN = "abstain"
    """No opinion."""


class ContinuationDecision(BaseModel):
    """What one criterion decided after a step."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    verdict: Verdict
    stop_reason: StopReason | None = None
    detail: str = ""

    @classmethod
    def stop(cls, reason: StopReason, detail: str = "") -> ContinuationDecision:
        return cls(verdict=Verdict.STOP, stop_reason=reason, detail=detail)

    @classmethod
    def proceed(cls, detail: str = "") -> ContinuationDecision:
        return cls(verdict=Verdict.CONTINUE, detail=detail)

    @classmethod
    def allow_stop(cls, reason: StopReason, detail: str = "") -> ContinuationDecision:
        return cls(verdict=Verdict.ALLOW_STOP, stop_reason=reason, detail=detail)

    @classmethod
    def abstain(cls) -> ContinuationDecision:
        return _ABSTAIN


_ABSTAIN = ContinuationDecision.model_construct(verdict=Verdict.ABSTAIN)


class ContinuationOutcome(BaseModel):
    """The loop's decision after a step: go on or stop, why, and which criterion decided.

    ``final_response_required`` marks a run that a limit stopped before the model answered:
    one more inference, with no tools offered, asks for the answer; the run then stops with
    the same ``stop_reason``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    should_continue: bool
    stop_reason: StopReason | None = None
    decided_by: str
    detail: str = ""
    final_response_required: bool = False

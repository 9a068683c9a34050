"""Continuation criteria: small pure functions of the state, judged after every step.

A criterion is any callable ``(AgentState) -> ContinuationDecision``; its ``name`` (or
``__name__``) is what ``ContinuationOutcome.decided_by`` reports. How the verdicts combine:

- if no criterion asks to continue, the run stops, and the first criterion (in order) that
  said ``STOP`` or ``ALLOW_STOP`` gives the reason;
- if one asks to continue and none says ``STOP``, the run goes on;
- if one asks to continue and one says ``STOP``, the first ``STOP`` wins.

The built-in order puts ``error`` first, then ``finish_reason``, then ``tool_calls``, then the
limits: a step where the model answered completes the run even when it also used up a limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .._values import (
    AgentState,
    ContinuationDecision,
    ContinuationOutcome,
    StepExecution,
    StepType,
    StopReason,
    Verdict,
)

Criterion = Callable[[AgentState], ContinuationDecision]

DEFAULT_STOP_FINISH_REASONS = frozenset({"content_filter", "refusal"})


def criterion_name(criterion: Criterion) -> str:
    name = getattr(criterion, "name", None) or getattr(criterion, "__name__", None)
    return str(name) if name else type(criterion).__name__


def error(state: AgentState) -> ContinuationDecision:
    """Stop when the model call of the last step failed."""
    step = state.current_step
    if step is not None and step.error is not None:
        # The error itself is the step's (and the run's): said once, there.
        return ContinuationDecision.stop(StopReason.ERROR, "the model call failed")
    return ContinuationDecision.abstain()


def tool_calls(state: AgentState) -> ContinuationDecision:
    """Continue while the model asks for tools, or after an output that could not be parsed
    (the model is shown the error and tries again); otherwise the run is complete."""
    step = state.current_step
    if step is None:
        return ContinuationDecision.abstain()
    if step.step_type is StepType.INVALID_OUTPUT:
        return ContinuationDecision.proceed("the model's output could not be parsed")
    if step.has_tool_calls():
        calls = len(step.tool_executions)
        return ContinuationDecision.proceed(f"{calls} tool call{'' if calls == 1 else 's'}")
    return ContinuationDecision.allow_stop(StopReason.COMPLETED, "the model answered")


def steps_limit(state: AgentState) -> ContinuationDecision:
    """Steps of the run and of its subagents' runs, against ``max_steps``."""
    limit = state.budget.max_steps
    if limit is None:
        return ContinuationDecision.abstain()
    steps = state.step_count + sum(  # state.spend().steps, without summing the tokens too
        tool.subtree.steps
        for execution in state.step_executions
        for tool in execution.step.tool_executions
        if tool.subtree is not None
    )
    if steps >= limit:
        return ContinuationDecision.stop(StopReason.STEPS_LIMIT, f"{steps} of {limit} steps")
    return ContinuationDecision.abstain()


def token_limit(state: AgentState) -> ContinuationDecision:
    limit = state.budget.max_tokens
    if limit is None:
        return ContinuationDecision.abstain()
    spent = state.spend().usage.total_tokens
    if spent >= limit:
        return ContinuationDecision.stop(StopReason.TOKEN_LIMIT, f"{spent} of {limit} tokens")
    return ContinuationDecision.abstain()


def cost_limit(state: AgentState) -> ContinuationDecision:
    limit = state.budget.max_cost_usd
    if limit is None:
        return ContinuationDecision.abstain()
    spent = state.spend().cost_usd
    if spent is not None and spent >= limit:
        return ContinuationDecision.stop(StopReason.COST_LIMIT, f"${spent:.6f} of ${limit:.6f}")
    return ContinuationDecision.abstain()


def time_limit(state: AgentState) -> ContinuationDecision:
    limit = state.budget.max_seconds
    step = state.current_step
    if limit is None or step is None or state.run_started_at is None:
        return ContinuationDecision.abstain()
    elapsed = (step.finished_at - state.run_started_at).total_seconds()
    if elapsed >= limit:
        return ContinuationDecision.stop(StopReason.TIME_LIMIT, f"{elapsed:.3f}s of {limit}s")
    return ContinuationDecision.abstain()


def deadline(state: AgentState) -> ContinuationDecision:
    limit = state.budget.deadline
    step = state.current_step
    if limit is not None and step is not None and step.finished_at >= limit:
        return ContinuationDecision.stop(StopReason.DEADLINE, f"deadline {limit.isoformat()}")
    return ContinuationDecision.abstain()


@dataclass(frozen=True)
class FinishReasonCriterion:
    """Stop when the provider ended the last response with one of ``stop_on``."""

    stop_on: frozenset[str] = DEFAULT_STOP_FINISH_REASONS
    name: str = "finish_reason"

    def __call__(self, state: AgentState) -> ContinuationDecision:
        step = state.current_step
        reason = step.finish_reason if step is not None else None
        if reason is not None and reason in self.stop_on:
            return ContinuationDecision.stop(StopReason.FINISH_REASON, reason)
        return ContinuationDecision.abstain()


@dataclass(frozen=True)
class StopWhen:
    """Stop (reason ``custom``) once ``predicate(state)`` is true."""

    predicate: Callable[[AgentState], bool]
    detail: str = ""
    name: str = "stop_when"

    def __call__(self, state: AgentState) -> ContinuationDecision:
        if self.predicate(state):
            return ContinuationDecision.stop(StopReason.CUSTOM, self.detail)
        return ContinuationDecision.abstain()


def stop_when(predicate: Callable[[AgentState], bool], detail: str = "") -> StopWhen:
    """A criterion that stops the run, reason ``custom``, once ``predicate(state)`` holds."""
    name = getattr(predicate, "__name__", "stop_when")
    return StopWhen(predicate, detail or name, name if name != "<lambda>" else "stop_when")


def default_criteria(
    stop_finish_reasons: Iterable[str] = DEFAULT_STOP_FINISH_REASONS,
) -> tuple[Criterion, ...]:
    """The built-in criteria, in the order their verdicts are read."""
    return (
        error,
        FinishReasonCriterion(frozenset(stop_finish_reasons)),
        tool_calls,
        steps_limit,
        token_limit,
        cost_limit,
        time_limit,
        deadline,
    )


def evaluate(state: AgentState, criteria: Sequence[Criterion]) -> ContinuationOutcome:
    """Combine the verdicts of ``criteria`` on ``state`` (whose last step was just taken)."""
    judged = [(criterion_name(c), c(state)) for c in criteria]
    stops = [(n, d) for n, d in judged if d.verdict is Verdict.STOP]
    wants_more = [(n, d) for n, d in judged if d.verdict is Verdict.CONTINUE]
    if wants_more and not stops:
        name, decision = wants_more[0]
        return ContinuationOutcome(should_continue=True, decided_by=name, detail=decision.detail)
    if wants_more:
        name, decision = stops[0]
    else:
        deciding = [(n, d) for n, d in judged if d.verdict in (Verdict.STOP, Verdict.ALLOW_STOP)]
        if not deciding:
            return ContinuationOutcome(
                should_continue=False, stop_reason=StopReason.COMPLETED, decided_by="default"
            )
        name, decision = deciding[0]
    return ContinuationOutcome(
        should_continue=False,
        stop_reason=decision.stop_reason,
        decided_by=name,
        detail=decision.detail,
    )


def pending_outcome(executions: Sequence[StepExecution]) -> ContinuationOutcome | None:
    """The outcome that decides what the next step is: that of the last step whose model call
    did not fail (a failed call, once the run is continued, is simply tried again)."""
    for execution in reversed(executions):
        if execution.step.step_type is not StepType.ERROR:
            return execution.outcome
    return None


def decide(
    state: AgentState, criteria: Sequence[Criterion], *, final_response: bool
) -> ContinuationOutcome:
    """The outcome after the last step of ``state``, with the final-response policy applied.

    A run that a limit stops before the model answered goes on for one final-response step
    when ``final_response`` is on; after that step it stops with the limit's reason.
    """
    step = state.current_step
    previous = pending_outcome(state.step_executions[:-1])
    if step is not None and step.step_type is StepType.FINAL_RESPONSE and previous is not None:
        if step.error is not None:
            return evaluate(state, criteria)
        return previous.model_copy(
            update={"should_continue": False, "final_response_required": False}
        )
    outcome = evaluate(state, criteria)
    wants_answer = (
        final_response
        and not outcome.should_continue
        and outcome.stop_reason is not None
        and outcome.stop_reason.is_limit
        and step is not None
        and step.final_response() is None
    )
    if wants_answer:
        return outcome.model_copy(update={"should_continue": True, "final_response_required": True})
    return outcome

"""What the loop tells a tracer: the seam through which a run is traced as it happens.

The loop knows no tracing library. An agent built with a :class:`Tracer`
(``AgentBuilder.with_tracing``) opens a run's span when the run begins and ends it with the
run's result; the driver wraps each model call, the executor each tool call. An agent built
without one pays nothing but a ``None`` check at each of those points.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Protocol, TypeVar

from .._core import ToolContext
from .._recording import RunResult
from .._values import AgentState, InferenceRequest, InferenceResponse, ToolExecution
from ._engine import Call, Flow

T = TypeVar("T")


class RunTrace(Protocol):
    """The trace of one run, from its beginning to its end."""

    def within(self, function: Callable[[], T]) -> T:
        """``function()``, with this run as the current span (where the run's steps, tools and
        subagent runs open theirs)."""
        ...

    def ended(self, result: RunResult | None, error: BaseException | None) -> None:
        """The run ended, with ``result``, or before it had one, by ``error``."""
        ...


class ModelCallTrace(Protocol):
    """The trace of one model call."""

    def answered(self, response: InferenceResponse) -> None:
        """The model answered ``response`` (a call that raises never gets here)."""
        ...


class ToolCallTrace(Protocol):
    """The trace of one tool call."""

    def finished(self, execution: ToolExecution) -> None:
        """The call came to ``execution`` (its result, or its error result)."""
        ...


class Tracer(Protocol):
    """Traces runs as they happen: :class:`agentledger.integrations.otel.OpenTelemetryTracer`
    is one, as OpenTelemetry spans."""

    def run_started(self, state: AgentState, agent_name: str) -> RunTrace:
        """A run of ``state`` began (or was resumed), by the agent ``agent_name``."""
        ...

    def model_call(
        self, llm: object, inference: InferenceRequest, state: AgentState, step_index: int
    ) -> AbstractContextManager[ModelCallTrace]:
        """Around a model call of step ``step_index``: ``llm`` asked ``inference``. An
        exception raised inside is the call's failure."""
        ...

    def tool_call(self, context: ToolContext) -> AbstractContextManager[ToolCallTrace]:
        """Around the tool call ``context.tool_call``, while it runs."""
        ...


def traced(
    flow: Flow[RunResult], tracer: Tracer | None, state: AgentState, agent_name: str
) -> Flow[RunResult]:
    """``flow`` (a run of ``state``), traced by ``tracer`` when there is one: each of its calls
    made with the run's span current, and the span ended with the run's result, or with what
    ended it early."""
    if tracer is None:
        return (yield from flow)
    trace = tracer.run_started(state, agent_name)
    value: object = None
    error: BaseException | None = None
    while True:
        try:
            call = flow.send(value) if error is None else flow.throw(error)
        except StopIteration as done:
            trace.ended(done.value, None)
            return done.value  # type: ignore[no-any-return]
        except BaseException as exc:
            trace.ended(None, exc)
            raise
        try:
            value, error = (yield Call(partial(trace.within, call.function))), None
        except GeneratorExit:  # the run's flow is dropped unfinished: so is the inner one
            flow.close()
            raise
        except BaseException as exc:  # the flow decides what a failure leaves behind
            value, error = None, exc

"""One implementation of a run, two shells to drive it.

A run's logic is written once, as a generator (a *flow*) that yields the blocking work it needs
done, each as a :class:`Call` (take a step, write to the recorder, ask a summarizer), and is sent
back the result (or thrown the exception). :func:`run_flow` does that work in the caller's
thread; :func:`arun_flow` does it in a worker thread, awaited, so the event loop never blocks.
Everything else (what to record when, how a run ends, what a failure leaves behind) is the
flow's, and so the same for ``Agent.run`` and ``Agent.arun``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ._runtime import awaiting_on, cancel_in_flight, in_thread, settled, tracking_in_flight

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Blocking work a flow needs done: ``function()``, whose result is sent back."""

    function: Callable[[], Any]


Flow = Generator[Call, Any, T]
"""A run's logic: yields :class:`Call` s, returns its result."""


@dataclass(frozen=True)
class _Outcome:
    """What a call came to: its value, or the exception it raised; ``cancel`` when the run
    was cancelled while the call ended all the same (the flow is told at its next call)."""

    value: Any = None
    error: BaseException | None = None
    cancel: asyncio.CancelledError | None = None


def _next_call(flow: Flow[T], outcome: _Outcome) -> Call | StopIteration:
    """Send ``outcome`` into ``flow``: the next call it needs, or the end (with its result)."""
    try:
        return flow.send(outcome.value) if outcome.error is None else flow.throw(outcome.error)
    except StopIteration as done:
        return done


def _called(call: Call) -> _Outcome:
    try:
        return _Outcome(value=call.function())
    except BaseException as exc:  # the flow decides what a failure leaves behind
        return _Outcome(error=exc)


CANCEL_GRACE_SECONDS = 0.1
"""How long a cancelled run waits for the call it was waiting on to end in its thread (a
ledger write a moment from done, a step whose model and tools were just cancelled) before it
ends the run: long enough that the run ends from a known point, short enough to stay prompt."""


async def _awaited(call: Call) -> _Outcome:
    done = in_thread(call.function)
    try:
        return _Outcome(value=await asyncio.wrap_future(done))
    except asyncio.CancelledError as exc:
        cancel_in_flight()  # the step's thread stops waiting for the model, or for its tools
        await settled(done, CANCEL_GRACE_SECONDS)
        if done.done() and not done.cancelled() and done.exception() is None:
            return _Outcome(value=done.result(), cancel=exc)  # it happened: the flow goes on
        return _Outcome(error=exc)
    except BaseException as exc:  # the flow decides what a failure leaves behind
        return _Outcome(error=exc)


def run_flow(flow: Flow[T]) -> T:
    """Drive ``flow`` here, each call in this thread."""
    step = _next_call(flow, _Outcome())
    while isinstance(step, Call):
        step = _next_call(flow, _called(step))
    return step.value  # type: ignore[no-any-return]


async def arun_flow(flow: Flow[T]) -> T:
    """Drive ``flow`` on the running event loop, each call in a worker thread, and what the
    calls must await (an ``AsyncLLM``, an ``async def`` tool) awaited on this loop. A
    cancellation (``asyncio.CancelledError``) is thrown into the flow where it waits, like
    any failure; when the call it waited on ended all the same (a write that committed), the
    flow is sent its value and thrown the cancellation at its next call instead. A run whose
    last call ended so returns, and the cancellation is raised to the caller."""
    cancelled: asyncio.CancelledError | None = None
    with awaiting_on(asyncio.get_running_loop()), tracking_in_flight():
        step = _next_call(flow, _Outcome())
        while isinstance(step, Call):
            if cancelled is not None:
                outcome, cancelled = _Outcome(error=cancelled), None
            else:
                outcome = await _awaited(step)
                cancelled = cancelled or outcome.cancel
            step = _next_call(flow, outcome)
        if cancelled is not None:
            raise cancelled
        return step.value  # type: ignore[no-any-return]

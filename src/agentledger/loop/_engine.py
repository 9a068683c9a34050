"""One implementation of a run, two shells to drive it.

A run's logic is written once, as a generator (a *flow*) that yields the blocking work it needs
done, each as a :class:`Call` (take a step, write to the recorder, ask a summarizer), and is sent
back the result (or thrown the exception). :func:`run_flow` does that work in the caller's
thread; :func:`arun_flow` does it in a worker thread, awaited, so the event loop never blocks.
Everything else (what to record when, how a run ends, what a failure leaves behind) is the
flow's, and so the same for ``Agent.run`` and ``Agent.arun``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ._runtime import in_thread

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Blocking work a flow needs done: ``function()``, whose result is sent back."""

    function: Callable[[], Any]


Flow = Generator[Call, Any, T]
"""A run's logic: yields :class:`Call` s, returns its result."""


def run_flow(flow: Flow[T]) -> T:
    """Drive ``flow`` here, each call in this thread."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = flow.send(value) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = call.function()
        except BaseException as exc:  # the flow decides what a failure leaves behind
            error = exc


async def arun_flow(flow: Flow[T]) -> T:
    """Drive ``flow`` on the running event loop, each call in a worker thread. A cancellation
    (``asyncio.CancelledError``) is thrown into the flow where it waits, like any failure."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = flow.send(value) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = await in_thread(call.function)
        except BaseException as exc:  # the flow decides what a failure leaves behind
            error = exc

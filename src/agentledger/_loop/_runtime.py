"""Where a step runs: who listens to its events, and which event loop (if any) its awaitables
belong to.

The loop's logic is one implementation, run by a synchronous shell (``Agent.run``) and an
asynchronous one (``Agent.arun``). The asynchronous shell takes each step in a worker thread
(processors and drivers are plain functions) and hands back to its event loop what must be
awaited: an ``AsyncLLM``'s call, ``async def`` tools. Both facts travel in context variables,
which worker threads started with ``asyncio.to_thread`` (or :func:`in_context`) inherit, so a
subagent run started by a tool streams its events to the same listener. They stay the loop's
own: a driver is handed them in its ``StepRequest`` (the event sink, the awaiter).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from .._values import Event

T = TypeVar("T")

EventSink = Callable[[Event], None]

_SINK: contextvars.ContextVar[EventSink | None] = contextvars.ContextVar(
    "agentledger_event_sink", default=None
)
_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "agentledger_event_loop", default=None
)


def listener() -> EventSink | None:
    """Where this run's events go: the caller streaming them, or None when nobody listens."""
    return _SINK.get()


def emit(event: Event) -> None:
    """Tell the listener, if there is one. A listener that raises stops the run (that is how a
    consumer that stopped iterating cancels it)."""
    sink = _SINK.get()
    if sink is not None:
        sink(event)


@contextmanager
def events_to(sink: EventSink) -> Iterator[None]:
    """Send the events of the runs started inside to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


@contextmanager
def awaiting_on(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Have the steps started inside await their awaitables on ``loop``."""
    token = _LOOP.set(loop)
    try:
        yield
    finally:
        _LOOP.reset(token)


def event_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of the asynchronous run this code belongs to, if any."""
    return _LOOP.get()


class _InFlight:
    """What an asynchronous run's steps wait for on its event loop, and whether the run was
    cancelled (then nothing new starts)."""

    def __init__(self) -> None:
        self.futures: set[Future[Any]] = set()
        self.cancelled = threading.Event()


_IN_FLIGHT: contextvars.ContextVar[_InFlight | None] = contextvars.ContextVar(
    "agentledger_in_flight", default=None
)


class RunAwaiter:
    """Waits, from a step's thread, for what it must await: on the event loop of the
    asynchronous run the step belongs to, else on a private event loop (so an ``async def``
    tool works from ``Agent.run`` too). While it runs on the run's loop it is in flight:
    cancelling the run cancels it (:func:`cancel_in_flight`). Bound when made, so it may be
    called from any thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        in_flight: _InFlight | None = None,
    ) -> None:
        self.loop = loop
        self._in_flight = in_flight

    def __call__(self, awaitable: Awaitable[T], /) -> T:
        loop, in_flight = self.loop, self._in_flight
        if loop is not None and in_flight is not None and in_flight.cancelled.is_set():
            if isinstance(awaitable, Coroutine):
                awaitable.close()
            raise asyncio.CancelledError  # the run was cancelled: nothing new starts
        coroutine = _as_coroutine(awaitable)
        if loop is None:
            return asyncio.run(coroutine)
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        if in_flight is not None:
            in_flight.futures.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise asyncio.CancelledError from None  # the run is cancelled: no step's failure
        finally:
            if in_flight is not None:
                in_flight.futures.discard(future)


def awaiter() -> RunAwaiter:
    """The awaiter of the run this code belongs to (its event loop, if it is asynchronous)."""
    return RunAwaiter(_LOOP.get(), _IN_FLIGHT.get())


def wait_for(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, from synchronous code: see :class:`RunAwaiter`."""
    return awaiter()(awaitable)


def check_cancelled() -> None:
    """Raise ``asyncio.CancelledError`` when this code's asynchronous run was cancelled: what a
    step's thread checks before it starts the next tool."""
    in_flight = _IN_FLIGHT.get()
    if in_flight is not None and in_flight.cancelled.is_set():
        raise asyncio.CancelledError


@contextmanager
def tracking_in_flight() -> Iterator[None]:
    """Keep the awaitables that the steps started inside hand to this loop, so that
    :func:`cancel_in_flight` can stop them (the model's stream, ``async def`` tools)."""
    token = _IN_FLIGHT.set(_InFlight())
    try:
        yield
    finally:
        _IN_FLIGHT.reset(token)


def cancel_in_flight() -> None:
    """Cancel what the steps of this run wait for on its event loop, and start nothing more: a
    cancelled run does not wait for its model to finish answering (its step's thread then ends
    at once)."""
    in_flight = _IN_FLIGHT.get()
    if in_flight is None:
        return
    in_flight.cancelled.set()
    for future in list(in_flight.futures):
        future.cancel()


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def in_context(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` bound to a copy of the current context, for a thread pool that does not
    carry it over (each call gets its own copy)."""
    context = contextvars.copy_context()

    def call(*args: Any) -> T:
        return context.copy().run(function, *args)

    return call


_WORKERS: ThreadPoolExecutor | None = None
_WORKERS_LOCK = threading.Lock()

MAX_WORKER_THREADS = 256
"""How many threads the asynchronous loop may block at once (steps, sync tools, ledger writes):
many runs share them, and none of their work waits on the event loop's default executor."""


def _workers() -> ThreadPoolExecutor:
    global _WORKERS
    with _WORKERS_LOCK:
        if _WORKERS is None:
            _WORKERS = ThreadPoolExecutor(MAX_WORKER_THREADS, thread_name_prefix="agentledger")
        return _WORKERS


def submit(function: Callable[[], object]) -> None:
    """Start ``function()`` in a worker thread, and do not wait for it."""
    _workers().submit(function)


def in_thread(function: Callable[[], T]) -> Future[T]:
    """``function()`` started in a worker thread, with this context: await it with
    ``asyncio.wrap_future`` (or :func:`settled`). Our own pool, not the loop's default
    executor: a step waiting on a sync tool's thread must never wait for a thread that steps
    hold (the default executor has a handful)."""
    return _workers().submit(contextvars.copy_context().run, function)


async def settled(future: Future[Any], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``future`` to end, whatever it comes to."""
    if future.done():
        return
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)


class StreamClosed(BaseException):
    """Raised where a run emits its next event once the consumer of its stream has closed it;
    a ``BaseException``, so no ``except Exception`` (a tool's, a model call's) takes it for a
    failure of its own. The run then ends as a cancelled run does."""


def cancels(exc: BaseException) -> bool:
    """Whether ``exc`` cancels the run it reaches (rather than failing it)."""
    return isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, StreamClosed))


def failure_text(exc: BaseException) -> str:
    """What a run that ended early records as its error."""
    if cancels(exc):
        return f"{type(exc).__name__}: the run was cancelled before it ended"
    return f"{type(exc).__name__}: {exc}"

"""The streams ``Agent.stream`` and ``Agent.astream`` return: a run's events as they happen,
then its result.

A run emits its events from wherever it is (the loop, a step's thread, a tool's thread, a
subagent's run); the stream is the queue between those places and the one consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

from .._recording import RunResult
from .._values import Event
from ..errors import UsageError
from ._partials import Shown, showing
from ._runtime import StreamClosed, events_to


@dataclass(frozen=True)
class _Ended:
    """What follows a run's last event: its result, or the exception it raised."""

    result: RunResult | None = None
    error: BaseException | None = None


class _Events:
    """What both streams share: what the consumer was shown, and the end of the run, once the
    consumer has reached it."""

    _ended: _Ended | None = None

    def __init__(self) -> None:
        self._shown = Shown()

    @property
    def result(self) -> RunResult:
        """The run's result, once every event has been read; once the stream was closed, the
        run's result as it ended (status ``interrupted``, its answer the text the consumer
        was shown, when the close stopped it)."""
        first = self._shown.first
        if self._ended is not None and first is not None and first.result is not None:
            return first.result
        if self._ended is None or self._ended.result is None:
            raise UsageError(
                "the stream's result is known once it is exhausted: iterate over every event first"
            )
        return self._ended.result

    def _closed(self, unread: list[Event | _Ended]) -> None:
        """The consumer closed the stream, leaving ``unread``: the run's end, if it is there
        (a run that ended before the close keeps its result)."""
        if self._ended is None:
            ends = [item for item in unread if isinstance(item, _Ended)]
            self._ended = ends[0] if ends else _Ended()

    def _read(self, item: Event | _Ended) -> Event | None:
        """``item`` if it is an event (now shown to the consumer); at the end, None (or the
        run's error, raised)."""
        if not isinstance(item, _Ended):
            self._shown.took(item)
            return item
        self._ended = item
        if item.error is not None:
            raise item.error
        return None


class _Channel:
    """Between a run's thread and its stream: the events, and whether the consumer is gone.
    The thread holds only this, never the stream, so a stream dropped unread is collected
    (and its run stopped)."""

    def __init__(self, shown: Shown) -> None:
        self.items: queue.SimpleQueue[Event | _Ended] = queue.SimpleQueue()
        self.closed = False
        self.shown = shown

    def tell(self, event: Event) -> None:
        if self.closed:
            raise StreamClosed
        self.items.put(event)

    def work(self, start: Callable[[], RunResult]) -> None:
        try:
            with events_to(self.tell), showing(self.shown):
                self.items.put(_Ended(result=start()))
        except StreamClosed:
            self.items.put(_Ended(error=None))
        except BaseException as exc:  # the consumer gets the run's error from next()
            self.items.put(_Ended(error=exc))


class RunStream(_Events, Iterator[Event]):
    """A run's events, for a ``for`` loop; ``result`` once it is exhausted.

    The run goes in a thread of its own from the first ``next``. ``close()`` (or dropping the
    stream) stops it at its next event, and the run ends as a cancelled run does.
    """

    def __init__(self, start: Callable[[], RunResult]) -> None:
        super().__init__()
        self._start = start
        self._channel = _Channel(self._shown)
        self._thread: threading.Thread | None = None

    def __iter__(self) -> RunStream:
        return self

    def __next__(self) -> Event:
        if self._ended is not None:
            raise StopIteration
        if self._thread is None:
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run, args=(self._channel.work, self._start), daemon=True
            )
            self._thread.start()
        event = self._read(self._channel.items.get())
        if event is None:
            raise StopIteration
        return event

    def close(self, timeout: float | None = None) -> bool:
        """Stop the run (if it has not ended) and wait until it is recorded as stopped, or
        for ``timeout`` seconds at most; whether it has stopped. The run stops at its next
        event: at once while the model streams, but only once a long sync tool returns (that
        is what ``timeout`` is for: a caller can say it is stopping, then call ``close()``
        again to wait for the rest). Ctrl-C interrupts the wait, not the stop."""
        self._channel.closed = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        self._closed(_drained(self._channel.items))
        return True

    def __enter__(self) -> RunStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self._channel.closed = True  # a dropped stream stops its run, without waiting for it


class AsyncRunStream(_Events, AsyncIterator[Event]):
    """A run's events, for an ``async for`` loop; ``result`` once it is exhausted.

    The run goes in a task of its own from the first ``__anext__``; ``aclose()`` (or cancelling
    the consuming task) cancels it, and the run ends as a cancelled run does.
    """

    def __init__(self, start: Callable[[], Awaitable[RunResult]]) -> None:
        super().__init__()
        self._start = start
        self._items: asyncio.Queue[Event | _Ended] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def __aiter__(self) -> AsyncRunStream:
        return self

    async def __anext__(self) -> Event:
        if self._ended is not None:
            raise StopAsyncIteration
        if self._task is None:
            self._task = asyncio.create_task(self._work(asyncio.get_running_loop()))
        try:
            item = await self._items.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        event = self._read(item)
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Cancel the run (if it has not ended) and wait until it is recorded as stopped."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        await asyncio.sleep(0)  # what the run's last moments scheduled reaches the queue
        unread = []
        while not self._items.empty():
            unread.append(self._items.get_nowait())
        self._closed(unread)

    async def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        on_loop = threading.get_ident()

        def tell(event: Event) -> None:
            # In order either way; from the loop's own thread (the model's deltas, the run's
            # own events) without the wake-up write that only another thread needs: at one
            # event per delta of many streams, those writes kept the loop busy.
            if threading.get_ident() == on_loop:
                loop.call_soon(self._items.put_nowait, event)
            else:
                loop.call_soon_threadsafe(self._items.put_nowait, event)

        try:
            with events_to(tell), showing(self._shown):
                result = await self._start()
        except BaseException as exc:  # the consumer gets the run's error from __anext__
            loop.call_soon_threadsafe(self._items.put_nowait, _Ended(error=exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        loop.call_soon_threadsafe(self._items.put_nowait, _Ended(result=result))


def _drained(items: queue.SimpleQueue[Event | _Ended]) -> list[Event | _Ended]:
    unread = []
    while True:
        try:
            unread.append(items.get_nowait())
        except queue.Empty:
            return unread

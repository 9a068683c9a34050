"""``async with ledger.aturn(...)``: a :class:`Turn` for code on an event loop.

Each method that writes runs the turn's own in a worker thread, awaited, so the event loop
never waits on the database; what it records and when is the :class:`Turn`'s, the same for
both. Text noted as :meth:`AsyncTurn.shown` goes to a thread only when it is time to make it
durable.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .._values import AgentState, AgentStatus, ToolCall
from ._recorder import RunResult
from ._turn import Turn, TurnStep

P = ParamSpec("P")
R = TypeVar("R")
Inner = TypeVar("Inner")


def _documented(wrapper: Callable[..., Any], method: Callable[..., Any]) -> None:
    wrapper.__doc__, wrapper.__name__ = method.__doc__, method.__name__


def _in_a_thread(
    method: Callable[Concatenate[Inner, P], R],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """``method`` of the wrapped object (``self._inner``), awaited from a worker thread."""

    async def awaited(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self._inner, *args, **kwargs)

    _documented(awaited, method)
    return awaited


def _stepping(
    method: Callable[Concatenate[Turn, P], TurnStep],
) -> Callable[Concatenate[AsyncTurn, P], Coroutine[Any, Any, AsyncTurnStep]]:
    """``Turn.step``, awaited from a worker thread, its handle awaited too."""

    async def awaited(self: AsyncTurn, /, *args: P.args, **kwargs: P.kwargs) -> AsyncTurnStep:
        return AsyncTurnStep(await asyncio.to_thread(method, self._inner, *args, **kwargs))

    _documented(awaited, method)
    return awaited


def _child(
    method: Callable[Concatenate[Turn, P], Turn],
) -> Callable[Concatenate[AsyncTurn, P], AsyncTurn]:
    """``Turn.child``, the child's turn awaited too."""

    def child(self: AsyncTurn, /, *args: P.args, **kwargs: P.kwargs) -> AsyncTurn:
        return AsyncTurn(method(self._inner, *args, **kwargs))

    _documented(child, method)
    return child


def on_an_event_loop(
    turn: Callable[Concatenate[Inner, P], Turn],
) -> Callable[Concatenate[Inner, P], AsyncTurn]:
    """A method making an :class:`AsyncTurn` from one making a :class:`Turn` (``Ledger.aturn``
    from ``Ledger.turn``): the same arguments, one signature kept."""

    def aturn(self: Inner, /, *args: P.args, **kwargs: P.kwargs) -> AsyncTurn:
        return AsyncTurn(turn(self, *args, **kwargs))

    aturn.__doc__ = (
        f":meth:`{turn.__name__}` for code on an event loop: ``async with "
        "ledger.aturn(...) as turn``, each write awaited in a worker thread."
    )
    aturn.__name__ = "aturn"
    # What help() and editors show: ``turn``'s own parameters.
    aturn.__signature__ = inspect.signature(turn).replace(  # type: ignore[attr-defined]
        return_annotation="AsyncTurn"
    )
    return aturn


class AsyncTurnStep:
    """A :class:`TurnStep` whose :meth:`tool_result` is awaited."""

    def __init__(self, inner: TurnStep) -> None:
        self._inner = inner

    tool_result = _in_a_thread(TurnStep.tool_result)

    @property
    def index(self) -> int:
        return self._inner.index

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self._inner.calls

    @property
    def recorded(self) -> bool:
        return self._inner.recorded

    @property
    def waiting_for(self) -> tuple[str, ...]:
        return self._inner.waiting_for


class AsyncTurn:
    """A :class:`Turn` on an event loop (``async with ledger.aturn(...) as turn``): the same
    methods, awaited; the same ends (a cancelled task ends the run ``interrupted`` with the
    text shown)."""

    def __init__(self, inner: Turn) -> None:
        self._inner = inner

    answer = _in_a_thread(Turn.answer)
    fail = _in_a_thread(Turn.fail)
    interrupt = _in_a_thread(Turn.interrupt)
    flush_shown = _in_a_thread(Turn.flush_shown)
    step = _stepping(Turn.step)
    child = _child(Turn.child)

    async def shown(self, text: str) -> None:
        """As :meth:`Turn.shown`; only a flush that is due goes to a thread."""
        if self._inner._note_shown(text):
            await self.flush_shown()

    async def __aenter__(self) -> AsyncTurn:
        await asyncio.to_thread(self._inner.begin)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self._inner.__exit__, kind, exc, traceback)

    @property
    def run_id(self) -> str:
        return self._inner.run_id

    @property
    def conversation_id(self) -> str:
        return self._inner.conversation_id

    @property
    def status(self) -> AgentStatus:
        return self._inner.status

    @property
    def result(self) -> RunResult | None:
        return self._inner.result

    @property
    def state(self) -> AgentState:
        return self._inner.state

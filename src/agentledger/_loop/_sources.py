"""An agent's tool sources (MCP servers): their connections, the tools they list, and closing
them, at :meth:`Agent.close` or when the interpreter exits."""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

from .._core import ToolConnection, ToolSet, ToolSource, combined_tools
from .._logs import library_logger
from ..errors import ToolDefinitionError
from ._executor import ToolExecutor

logger = library_logger(__name__)


class Closable(Protocol):
    def close(self) -> None: ...


class ToolSources:
    """The connections of an agent's tool sources (made when the agent is; each connects when
    first listed) beside the agent's own tools."""

    def __init__(self, own: ToolSet, sources: tuple[ToolSource, ...]) -> None:
        self.own = own
        self.sources = sources
        self._connections: tuple[ToolConnection, ...] = tuple(s.connect() for s in sources)
        self._listing = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._connections)

    def refreshed(
        self, executor: ToolExecutor, executor_of: Callable[[ToolSet], ToolExecutor]
    ) -> ToolExecutor:
        """``executor``, or one made by ``executor_of`` for the tools as listed now when they
        changed: the agent's own and each source's (connected, or reconnected, as needed)."""
        if not self._connections:
            return executor
        with self._listing:
            listed = [
                (source.name, tuple(connection.tools()))
                for source, connection in zip(self.sources, self._connections, strict=True)
            ]
            try:
                tools = combined_tools(self.own, listed)
            except ToolDefinitionError as exc:  # a prefixed name is one of the agent's own
                logger.warning("%s; the tools of %s are left out", exc, self.sources)
                tools = self.own
            if _signature(tools) == _signature(executor.tools):
                return executor
            return executor_of(tools)

    def close(self) -> None:
        """End the connections, and those of the subagents among the agent's own tools."""
        for connection in self._connections:
            connection.close()
        for item in self.own:
            closing = getattr(item, "close", None)
            if callable(closing):
                closing()


def _signature(tools: ToolSet) -> tuple[tuple[str, int], ...]:
    """What tells one listing of tools from another: each name and the tool behind it."""
    return tuple((item.name, id(getattr(item, "tool", item))) for item in tools)


_open: weakref.WeakSet[Closable] = weakref.WeakSet()
"""Agents holding tool-source connections: closed when the interpreter exits."""


def close_at_exit(agent: Closable) -> None:
    """Close ``agent`` when the interpreter exits, if it is still alive then."""
    _open.add(agent)


@atexit.register
def _close_open() -> None:
    for agent in list(_open):
        with contextlib.suppress(Exception):
            agent.close()

"""One agent's connection to one MCP server: a session kept on an event loop of its own.

The MCP SDK is asynchronous (anyio) and the agent runs tools from plain threads as well as from
event loops, so each connection runs its session on a private event loop in a daemon thread,
started at the first listing; every call is handed to that loop and waited for with a timeout.
A server that never started (its first listing failed) is a :class:`ToolServerError` at the
run's start, before anything is recorded. One that listed its tools and then dies, hangs or
answers with an error makes the call a tool error the model sees; the run goes on, and the
next run reconnects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shlex
import tempfile
import threading
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import JsonValue

from ..._core import ToolOutput
from ..._logs import library_logger
from ...errors import ToolServerError
from ._tools import MCPTool, arguments_model, tool_output
from ._transports import HttpTransport, StdioTransport

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams

logger = library_logger("agentledger.mcp")

T = TypeVar("T")

_GRACE = 5.0
"""Seconds waited beyond the SDK's own timeout before a call is given up on from outside."""

_STDERR_TAIL = 400
"""Characters of a server's standard error quoted when it went away."""


class MCPConnection:
    """The session of one MCP server for one agent (``MCPServer.connect()``)."""

    def __init__(
        self,
        name: str,
        transport: StdioTransport | HttpTransport,
        *,
        timeout: float,
        connect_timeout: float,
    ) -> None:
        self.name = name
        self.transport = transport
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._served: concurrent.futures.Future[None] | None = None
        self._gone: str | None = None
        """Why the session is known to be over (the server closed it), or None."""
        self._unreachable = "it was never started"
        """Why there is no session, when the last attempt at one failed."""
        self._stale = True
        self._listed = False
        """Whether the server ever listed its tools to this connection."""
        self._tools: tuple[MCPTool, ...] = ()
        self._stderr: TextIO | None = None

    def __repr__(self) -> str:
        return f"MCPConnection({self.name!r})"

    def tools(self) -> Sequence[MCPTool]:
        """The server's tools: listed when first connected, when it said its list changed,
        and after a reconnection (a server found gone is started again here). A server that
        never listed its tools and cannot be reached now is a :class:`ToolServerError`; one
        that listed them before offers what it last listed, and the log says why."""
        with self._lock:
            try:
                self._check()
                if self._session is None:
                    self._connect()
                if self._stale:
                    self._list()
                    self._listed = True
            except Exception as exc:
                why = f"{_described(exc)}{self._stderr_tail()}"
                self._unreachable = f"it could not be reached: {why}"
                self._disconnect()
                if not self._listed:
                    raise self._never_started(exc) from exc
                logger.warning(
                    "MCP server %r could not be reached (%s); its tools are offered as last "
                    "listed, and calling them fails until it can be",
                    self.name,
                    why,
                )
            return self._tools

    def call(self, tool: MCPTool, arguments: dict[str, JsonValue]) -> ToolOutput:
        """Call ``tool`` on the server: its result, or the tool error that says what went
        wrong and whether the call was made."""
        session, gone = self._session, self._gone
        if session is None or gone is not None:
            why = gone or self._unreachable
            return _error(
                tool,
                f"MCP server {self.name!r} is not running ({why}); the call was not made. "
                "The next run reconnects to it.",
            )
        seconds = self.timeout
        try:
            result = self._submit(session.call_tool(tool.server_name, arguments, seconds))
            return tool_output(tool, result)
        except (TimeoutError, concurrent.futures.TimeoutError):
            return _timed_out(tool, seconds)
        except MCPError as exc:
            return self._failed(tool, exc)
        except Exception as exc:
            return _error(
                tool,
                f"calling tool {tool.server_name!r} on MCP server {self.name!r} failed: "
                f"{_described(exc)}; its result is unknown.",
            )

    def close(self) -> None:
        """End the session (stopping a stdio server's process) and the connection's thread."""
        with self._lock:
            self._disconnect()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(_GRACE)
                if not thread.is_alive():
                    loop.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    def _never_started(self, exc: Exception) -> ToolServerError:
        """The error of a server that could not be started (or reached) before it ever listed
        its tools: what it said, and what to do."""
        stderr = self._stderr_end() or None
        said = f"; its stderr ends: {stderr}" if stderr else ""
        transport = self.transport
        if isinstance(transport, StdioTransport):
            command = shlex.join([transport.command, *transport.args])
            why = "it exited before it answered" if _closed(exc) else _described(exc)
            what = f"could not be started ({why}){said}"
            fix = (
                f"Run `{command}` on its own to see why (install the package it needs, fix its "
                "arguments or environment)"
            )
        else:
            what = f"could not be reached at {transport.url} ({_described(exc)})"
            fix = "Start the server or fix its URL"
        return ToolServerError(
            f"MCP server {self.name!r} {what}. {fix}, or leave it out of with_mcp_servers(). "
            "No run began: nothing was recorded and the model was not asked.",
            server=self.name,
            stderr=stderr,
        )

    def _failed(self, tool: MCPTool, exc: MCPError) -> ToolOutput:
        if exc.code == types.REQUEST_TIMEOUT:
            return _timed_out(tool, self.timeout)
        if exc.code == types.CONNECTION_CLOSED:
            self._gone = f"it closed the connection{self._stderr_tail()}"
            return _error(
                tool,
                f"MCP server {self.name!r} closed the connection during the call"
                f"{self._stderr_tail()}; its result is unknown. The next run reconnects to it.",
            )
        return _error(
            tool,
            f"MCP server {self.name!r} answered tool {tool.server_name!r} with an error: "
            f"{exc.message} (code {exc.code})",
        )

    def _check(self) -> None:
        """Ping a connected server: one found gone is disconnected, to be started again."""
        if self._session is not None and self._gone is None:
            try:
                self._submit(self._session.send_ping(), timeout=self.connect_timeout)
            except Exception as exc:
                self._gone = _described(exc)
        if self._gone is not None:
            logger.info("MCP server %r is gone (%s): reconnecting", self.name, self._gone)
            self._disconnect()

    def _connect(self) -> None:
        loop = self._event_loop()
        ready: concurrent.futures.Future[ClientSession] = concurrent.futures.Future()
        stop = asyncio.Event()
        self._served = asyncio.run_coroutine_threadsafe(self._serve(ready, stop), loop)
        self._stop, self._gone, self._stale = stop, None, True
        try:
            self._session = ready.result(self.connect_timeout + _GRACE)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"no answer within connect_timeout={self.connect_timeout:g} s"
            ) from None

    def _list(self) -> None:
        assert self._session is not None
        self._stale = False  # a change told while listing lists again next time
        listed = self._submit(self._session.list_tools(), timeout=self.timeout)
        known = {t.server_name: t for t in self._tools}
        self._tools = tuple(self._tool(t, known.get(t.name)) for t in listed.tools)

    def _tool(self, listed: types.Tool, known: MCPTool | None) -> MCPTool:
        """The tool as listed; the same object as before when nothing about it changed, so
        that its validator is built once."""
        description = listed.description or listed.title or listed.name
        schema = dict(listed.input_schema)
        if known is not None and (known.description, known.input_schema) == (description, schema):
            return known
        return MCPTool(
            server_name=listed.name,
            description=description,
            input_schema=schema,
            arguments_model=arguments_model(listed.name, schema),
            connection=self,
        )

    def _disconnect(self) -> None:
        stop, served, loop = self._stop, self._served, self._loop
        self._session = self._stop = self._served = None
        if stop is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if served is not None:
            with contextlib.suppress(Exception):
                served.result(self.connect_timeout)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=loop.run_forever, name=f"agentledger-mcp-{self.name}", daemon=True
            )
            self._thread.start()
            self._loop = loop
        return self._loop

    def _submit(self, work: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run ``work`` on the connection's loop and wait for it (``timeout`` plus a grace:
        the SDK's own timeout answers first)."""
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        seconds = (timeout if timeout is not None else self.timeout) + _GRACE
        try:
            return future.result(seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    async def _serve(
        self, ready: concurrent.futures.Future[ClientSession], stop: asyncio.Event
    ) -> None:
        """The session's life: connect, hand the session over, wait to be stopped."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = ClientSession(read, write, message_handler=self._on_message)
                await stack.enter_async_context(session)
                with anyio.fail_after(self.connect_timeout):
                    await session.initialize()
                ready.set_result(session)
                await stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                self._gone = _described(exc)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[TransportStreams]:
        transport = self.transport
        if isinstance(transport, StdioTransport):
            parameters = StdioServerParameters(
                command=transport.command,
                args=list(transport.args),
                env=dict(transport.env) if transport.env is not None else None,
                cwd=transport.cwd,
            )
            async with stdio_client(parameters, errlog=self._errlog()) as streams:
                yield streams
            return
        async with (
            create_mcp_http_client(headers=dict(transport.headers)) as client,
            streamable_http_client(transport.url, http_client=client) as streams,
        ):
            yield streams

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._stale = True

    def _errlog(self) -> TextIO:
        """Where a stdio server's standard error goes: a file, whose end is quoted when the
        server goes away."""
        if self._stderr is None:
            # Kept open for the connection's life (close() closes it): the server writes to it.
            opened = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            self._stderr = cast(TextIO, opened)
        return self._stderr

    def _stderr_tail(self) -> str:
        """`` (its stderr ends: ...)`` for a stdio server that wrote any; else empty."""
        tail = self._stderr_end()
        return f" (its stderr ends: {tail})" if tail else ""

    def _stderr_end(self) -> str:
        """The end of what a stdio server wrote to its standard error, on one line; empty when
        it wrote nothing (or is not a stdio server)."""
        if self._stderr is None:
            return ""
        with contextlib.suppress(Exception):
            self._stderr.flush()
            size = self._stderr.seek(0, 2)
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            return " ".join(self._stderr.read().split())[-_STDERR_TAIL:]
        return ""


def _timed_out(tool: MCPTool, seconds: float) -> ToolOutput:
    return _error(
        tool,
        f"MCP server {tool.connection.name!r} did not answer tool {tool.server_name!r} within "
        f"{seconds:g} s (its timeout); the call may still be running there, its result is "
        "unknown.",
    )


def _error(tool: MCPTool, message: str) -> ToolOutput:
    return ToolOutput(content=f"Error: {message}", is_error=True, metadata=dict(tool.metadata))


def _closed(exc: BaseException) -> bool:
    """Whether ``exc`` (or one of a group's) says the server closed the connection."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_closed(e) for e in exc.exceptions)
    return isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED


def _described(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_described(e) for e in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["MCPConnection"]

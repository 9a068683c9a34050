"""``MCPServer``: how to reach one Model Context Protocol server, as a value.

It describes; it does not connect. ``AgentBuilder.with_mcp_servers`` gives each agent its own
connection (:class:`MCPConnection`), started at the agent's first run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from urllib.parse import urlsplit

from ...errors import ConfigurationError
from ._connection import MCPConnection
from ._transports import HttpTransport, StdioTransport

DEFAULT_TIMEOUT = 60.0
"""Seconds a tool call may take before it is a tool error (``MCPServer(timeout=...)``)."""

DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds starting a server and its handshake may take."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


@dataclass(frozen=True)
class MCPServer:
    """One MCP server whose tools an agent offers its model: :meth:`stdio` or :meth:`http`.

    ``name`` is recorded with every call of its tools (``tool_executions.metadata``
    ``mcp_server``) and prefixes a tool whose name another tool of the agent has; ``timeout``
    bounds each tool call and ``connect_timeout`` the start and handshake.
    """

    name: str
    transport: StdioTransport | HttpTransport
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"MCP server name {self.name!r} cannot prefix a tool name: use 1-32 letters, "
                "digits, '_' or '-' (name=...)"
            )
        for what, seconds in (("timeout", self.timeout), ("connect_timeout", self.connect_timeout)):
            if not seconds > 0:
                raise ConfigurationError(
                    f"MCP server {self.name!r}: {what} must be a positive number of seconds, "
                    f"got {seconds!r}"
                )

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> MCPServer:
        """A server the agent starts as ``command args...`` and speaks to over stdio; ``env``
        is added to a minimal environment (``PATH``, ``HOME``, ...), not to this process's.
        Named after the module of ``python -m module``, else the command, unless ``name``."""
        if isinstance(args, str):
            raise ConfigurationError(
                f"MCPServer.stdio({command!r}, {args!r}): give args as a list of strings"
            )
        transport = StdioTransport(
            command=command,
            args=tuple(args),
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd is not None else None,
        )
        return cls(
            name=name if name is not None else _stdio_name(command, tuple(args)),
            transport=transport,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (``http://host:port/mcp``), each
        request sent with ``headers``. Named after the URL's host unless ``name``."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"MCPServer.http({url!r}): give the server's http:// or https:// URL "
                "(for example http://127.0.0.1:8000/mcp)"
            )
        return cls(
            name=name if name is not None else _safe(parts.hostname),
            transport=HttpTransport(url=url, headers=dict(headers or {})),
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    def connect(self) -> MCPConnection:
        """A connection of this server for one agent; nothing starts until it is listed."""
        return MCPConnection(
            self.name,
            self.transport,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
        )


def _stdio_name(command: str, args: tuple[str, ...]) -> str:
    """``mcp_server_time`` for ``python -m mcp_server_time``; ``mcp-server-git`` for the
    ``mcp-server-git`` script."""
    if "-m" in args[:-1]:
        return _safe(args[args.index("-m") + 1])
    return _safe(PurePath(command).stem)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:32] or "mcp"

"""How a server is reached: a subprocess over stdio, or a URL over streamable HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StdioTransport:
    """A server run as a subprocess, spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None


@dataclass(frozen=True)
class HttpTransport:
    """A server reached over streamable HTTP."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

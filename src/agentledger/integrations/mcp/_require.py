"""The MCP SDK comes with the ``mcp`` extra: importing this package without it raises
:class:`ConfigurationError` naming the extra, not a bare ``ImportError``."""

from __future__ import annotations

from ...errors import ConfigurationError

try:
    import mcp  # noqa: F401
except ImportError:
    raise ConfigurationError(
        "The MCP SDK is not installed: MCP servers as tool sources (MCPServer, "
        "AgentBuilder.with_mcp_servers) come with the mcp extra. Install it: "
        "pip install 'agentledger[mcp]'"
    ) from None

"""The MCP SDK comes with the ``mcp`` extra: importing this package without it raises
:class:`ConfigurationError` naming the extra, not a bare ``ImportError``."""

from __future__ import annotations

from ...errors import ConfigurationError

try:
    import mcp.server.mcpserver  # noqa: F401
except ImportError:
    raise ConfigurationError(
        "the MCP SDK is not installed: the ledger's MCP server (`agentledger mcp serve`) comes "
        "with the mcp extra. Install it: pip install 'agentledger[mcp]'"
    ) from None

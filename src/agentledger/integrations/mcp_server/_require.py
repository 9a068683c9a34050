"""The MCP SDK comes with the ``mcp`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("mcp.server.mcpserver",),
    library="The MCP SDK",
    what="The ledger's MCP server (`agentledger mcp serve`)",
    extra="mcp",
)

"""The MCP SDK comes with the ``mcp`` extra (see :mod:`.._extra`)."""

from __future__ import annotations

from .._extra import require

require(
    ("mcp",),
    library="The MCP SDK",
    what="agentledger's MCP client (MCPServer, AgentBuilder.with_mcp_servers)",
    extra="mcp",
)

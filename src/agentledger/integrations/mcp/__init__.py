"""Model Context Protocol servers as tool sources: the ``mcp`` extra
(``pip install 'agentledger[mcp]'``), on the official MCP Python SDK.

``AgentBuilder().with_mcp_servers([MCPServer.stdio(...), MCPServer.http(...)])`` offers the
model the servers' tools beside the agent's own. Each agent starts (or connects to) each server
at its first run and lists its tools at the start of every run, again when the server says its
list changed; a resumed run reconnects. A call is held to the tool's input schema, then sent;
the answer's text is the result, its structured content kept in the tool execution's metadata
with the server's name (``mcp_server``) and the tool's name there (``mcp_tool``). A server that
never started (not installed, exiting at once, nobody at its URL) is a
:class:`~agentledger.ToolServerError` before the run begins, with nothing recorded. Once it has
listed its tools, an error answer, a server that hangs past its ``timeout`` or one that dies
is a tool error the model sees, never a failed run. ``Agent.close()`` (or ``with agent:``)
stops the servers.
"""

# First: a missing extra is a clear error naming it, before anything imports the SDK.
from . import _require  # noqa: F401  (isort: keep first)
from ._connection import MCPConnection
from ._server_spec import DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, MCPServer
from ._tools import STRUCTURED_KEY, MCPTool

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "STRUCTURED_KEY",
    "MCPConnection",
    "MCPServer",
    "MCPTool",
]

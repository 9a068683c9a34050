"""A small MCP server of our own, for the tests of MCP servers as tool sources: errors, a
timeout, a server that dies mid-call and a tool list that changes.

``python tests/support/mcp_server.py http PORT`` serves it over streamable HTTP on 127.0.0.1;
``python tests/support/mcp_server.py stdio`` over stdio (writing its process id to the file
``MCP_TEST_PID_FILE`` names, when set).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

app = MCPServer("ours")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero: give a non-zero b")
    return a / b


@app.tool(name="text.upper")
def upper(text: str) -> str:
    """A name model APIs refuse (a dot): offered as text_upper."""
    return text.upper()


@app.tool()
def authorization(ctx: Context) -> str:
    """The Authorization header the call came with (over HTTP)."""
    return (ctx.headers or {}).get("authorization", "none")


@app.tool()
def refuse() -> str:
    """Answer with a protocol error (JSON-RPC), not a tool result."""
    raise MCPError(code=-32602, message="refused: this tool takes no calls today")


@app.tool()
def quota() -> CallToolResult:
    """Report a failure the way a server does without raising: an isError result."""
    return CallToolResult(content=[TextContent(type="text", text="quota exceeded")], is_error=True)


@app.tool()
async def slow(seconds: float) -> str:
    """Answer after some seconds."""
    await anyio.sleep(seconds)
    return "finally"


@app.tool()
def die() -> str:
    """End the server's process in the middle of the call."""
    sys.stderr.write("the server was told to die\n")
    sys.stderr.flush()
    os._exit(1)


@app.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``extra`` and tell the client that the list changed."""
    app.add_tool(lambda: "extra says hi", name="extra", description="Added by grow.")
    await ctx.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    if "MCP_TEST_PID_FILE" in os.environ:  # for a test to see the process gone
        with open(os.environ["MCP_TEST_PID_FILE"], "w") as written:
            written.write(str(os.getpid()))
    if sys.argv[1] == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run("stdio")

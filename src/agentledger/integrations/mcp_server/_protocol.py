"""The MCP server: the tools and resources of :class:`ServedLedger`, on the official MCP SDK's
``MCPServer``, over stdio or streamable HTTP on the loopback interface.

Every tool is marked read-only and answers a structured result (JSON) with a text beside it; a
library error (an unknown or ambiguous id, a refused query) becomes a tool error carrying the
library's message, and the server goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, Resource, TextContent, ToolAnnotations

from ...errors import AgentLedgerError, NotFoundError
from ...ledger import Ledger
from ._query import QueryLimits
from ._served import CONVERSATION_URI, Answer, ServedLedger

LOOPBACK = "127.0.0.1"
INSTRUCTIONS = (
    "agentledger's ledger: the conversations and execution traces its agents recorded. Search "
    "and read conversations, list runs, read a run's trace or its tree of subagent runs with "
    "their usage, or run one read-only SQL query over the ledger's tables (schema: "
    "conversations, conversation_messages, agent_runs, step_executions, tool_executions)."
)
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


class LedgerMCPServer(MCPServer[Any]):
    """``MCPServer`` whose ``resources/list`` lists the ledger's conversations as they are
    now (the most recently updated first), not a list fixed at start."""

    def __init__(self, served: ServedLedger) -> None:
        super().__init__(
            "agentledger", version=_version(), instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.served = served

    async def list_resources(self) -> list[Resource]:
        listed = await anyio.to_thread.run_sync(self.served.recent_conversations)
        return [
            Resource(
                uri=CONVERSATION_URI.format(conversation_id=c["id"]),
                name=c["id"],
                title=c["title"],
                description=f"{c['kind']} conversation, updated {c['updated_at']}",
                mime_type="application/json",
            )
            for c in listed
        ]


def _version() -> str:
    try:
        return version("agentledger")
    except PackageNotFoundError:  # a source tree without install
        return "0.0.0"


def ledger_mcp_server(
    ledger: Ledger,
    *,
    tenant_id: str | None = None,
    owner_id: str | None = None,
    limits: QueryLimits | None = None,
) -> LedgerMCPServer:
    """An MCP server over ``ledger`` (which it only reads), keeping to ``tenant_id`` and
    ``owner_id`` when given; ``limits`` bound the ``query`` tool."""
    served = ServedLedger(ledger, tenant_id, owner_id, limits or QueryLimits())
    server = LedgerMCPServer(served)
    _add_tools(server, served)
    _add_resources(server, served)
    return server


def _add_tools(server: MCPServer[Any], served: ServedLedger) -> None:
    def tool(function: Callable[..., CallToolResult]) -> None:
        server.add_tool(function, annotations=_READ_ONLY, structured_output=False)

    def search_conversations(query: str, limit: int = 20) -> CallToolResult:
        """Search every conversation's messages for all the words of `query`, best matches
        first (at most 100)."""
        return _answer(lambda: served.search_conversations(query, limit))

    def get_conversation(id: str) -> CallToolResult:
        """A conversation as its user saw it: every question and answer in order, without the
        tool calls of its runs. `id`: the conversation's id, or a unique prefix of it (8
        characters or more)."""
        return _answer(lambda: served.get_conversation(id))

    def get_trace(run_id: str) -> CallToolResult:
        """A run's execution trace: its steps (model, usage, timing), its tool calls with their
        arguments and results, and the trace messages in order. `run_id` may be a unique
        prefix."""
        return _answer(lambda: served.get_trace(run_id))

    def list_runs(
        conversation_id: str | None = None,
        status: str | None = None,
        since: str | None = None,
        limit: int = 20,
    ) -> CallToolResult:
        """Runs, newest first (oldest first within one conversation): of `conversation_id`,
        with `status` (running, completed, stopped, failed, interrupted), started at or after
        `since` (ISO 8601, UTC unless it says otherwise); at most `limit` (200 at most)."""
        return _answer(lambda: served.list_runs(conversation_id, status, since, limit))

    def run_tree(run_id: str) -> CallToolResult:
        """A run and the subagent runs below it, each with its own usage (exclusive) and with
        its subtree's (inclusive). Give a root run's id for the whole tree."""
        return _answer(lambda: served.run_tree(run_id))

    def query(sql: str) -> CallToolResult:
        """Run one read-only SQL statement (SELECT, WITH, VALUES or EXPLAIN) over the
        ledger's tables: columns and rows, at most the server's row limit (`truncated` says
        when more were left out), stopped at its time limit. Writes are refused."""
        return _answer(lambda: served.query(sql))

    for function in (
        search_conversations, get_conversation, get_trace, list_runs, run_tree, query
    ):  # fmt: skip
        tool(function)


def _answer(ask: Callable[[], Answer]) -> CallToolResult:
    """The tool's answer, or a tool error with the library's message."""
    try:
        record, text = ask()
    except AgentLedgerError as exc:
        raise ToolError(str(exc)) from None
    return CallToolResult(content=[TextContent(text=text)], structured_content=record)


def _add_resources(server: MCPServer[Any], served: ServedLedger) -> None:
    @server.resource(
        CONVERSATION_URI,
        name="conversation",
        description="A conversation as its user saw it (JSON: the conversation and its "
        "messages), as the get_conversation tool answers it.",
        mime_type="application/json",
    )
    def conversation(conversation_id: str) -> str:
        try:
            return served.conversation_json(conversation_id)
        except NotFoundError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except AgentLedgerError as exc:
            raise ResourceError(str(exc)) from None


def serve(
    url: str | os.PathLike[str],
    *,
    read_only: bool = False,
    tenant_id: str | None = None,
    owner_id: str | None = None,
    http_port: int | None = None,
    limits: QueryLimits | None = None,
) -> None:
    """Serve the ledger at ``url`` over MCP until the client goes away (stdio) or the process
    is stopped (``http_port``: streamable HTTP on 127.0.0.1 at that port, path ``/mcp``). The
    server only ever reads; ``read_only`` also opens the ledger read-only."""
    with Ledger.open(url, migrate=False, read_only=read_only) as ledger:
        server = ledger_mcp_server(ledger, tenant_id=tenant_id, owner_id=owner_id, limits=limits)
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host=LOOPBACK, port=http_port)

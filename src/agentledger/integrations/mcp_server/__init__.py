"""The ledger as an MCP server: every conversation and trace a ledger holds, for any MCP
client (``agentledger mcp serve``; the ``mcp`` extra, ``pip install 'agentledger[mcp]'``).

Tools: ``search_conversations``, ``get_conversation`` (as the user saw it), ``get_trace``,
``list_runs``, ``run_tree`` (with inclusive usage) and ``query`` (one read-only SQL statement,
bounded in rows and time); resources: each conversation at
``agentledger://conversations/{id}``. In a scope (a tenant, an owner) every tool keeps to it.
The server never writes.
"""

# First: a missing extra is a clear error naming it, before anything imports the SDK.
from . import _require  # noqa: F401  (isort: keep first)
from ._protocol import LedgerMCPServer, ledger_mcp_server, serve
from ._query import QueryLimits, QueryResult
from ._served import CONVERSATION_URI, ServedLedger
from ._sql import read_only_query

__all__ = [
    "CONVERSATION_URI",
    "LedgerMCPServer",
    "QueryLimits",
    "QueryResult",
    "ServedLedger",
    "ledger_mcp_server",
    "read_only_query",
    "serve",
]

"""What agentledger gives the tools around it, each integration in a package of its own and
behind its own extra, loaded only when used (``import agentledger`` loads none of them):
:mod:`agentledger.integrations.otel`, :mod:`agentledger.integrations.openai_agents`,
:mod:`agentledger.integrations.datasette` and :mod:`agentledger.integrations.mcp_server` (the
ledger as an MCP server)."""

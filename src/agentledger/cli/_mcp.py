"""``agentledger mcp serve``: the ledger as an MCP server (a thin shell over
:mod:`agentledger.integrations.mcp_server`, imported when the command runs: the ``mcp`` extra)."""

from __future__ import annotations

import click

from ._app import cli, cli_errors, database, read_only, require_file, scope


@cli.group()
def mcp() -> None:
    """The ledger as an MCP server.

    Needs the mcp extra: pip install 'agentledger[mcp]'.

    \b
    Examples:
      agentledger mcp serve --db ledger.db
      agentledger mcp serve --db ledger.db --http 8765
    """


@mcp.command()
@click.option(
    "--http",
    "http_port",
    type=click.IntRange(1, 65535),
    default=None,
    metavar="PORT",
    help="Serve streamable HTTP on 127.0.0.1 at this port (path /mcp) instead of stdio.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="The most rows the query tool returns (it says `truncated` when there were more).",
)
@click.option(
    "--query-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Stop a query tool's statement that runs longer than this.",
)
@click.pass_context
def serve(ctx: click.Context, http_port: int | None, max_rows: int, query_timeout: float) -> None:
    """Serve the ledger to MCP clients.

    The ledger --db names, over stdio (an MCP client starts this command), or over
    streamable HTTP on the loopback interface with --http PORT.

    Tools: search_conversations(query, limit), get_conversation(id), get_trace(run_id),
    list_runs(conversation_id, status, since, limit), run_tree(run_id) and query(sql), one
    read-only SQL statement bounded by --max-rows and --query-timeout. Resources: every
    conversation at agentledger://conversations/{id}. With --tenant or --owner every tool keeps
    to that scope. The server never writes; --read-only also opens the ledger read-only.
    Messages go to standard error: standard output is the stdio transport.

    \b
    Examples:
      agentledger mcp serve --db ledger.db
      agentledger mcp serve --db ledger.db --http 8765 --max-rows 500
    """
    require_file(ctx, "record runs in it first, or give --db the ledger to serve")
    tenant, owner = scope(ctx)
    with cli_errors():
        from ..integrations.mcp_server import QueryLimits
        from ..integrations.mcp_server import serve as serve_ledger

        limits = QueryLimits(max_rows=max_rows, seconds=query_timeout)
        where = "stdio" if http_port is None else f"http://127.0.0.1:{http_port}/mcp"
        click.echo(f"agentledger mcp: serving {database(ctx)} over {where}", err=True)
        serve_ledger(
            database(ctx),
            read_only=read_only(ctx),
            tenant_id=tenant,
            owner_id=owner,
            http_port=http_port,
            limits=limits,
        )

"""``agentledger ui``: the ledger in a browser (a thin shell over :mod:`agentledger.ui`,
imported when the command runs: the ``ui`` extra)."""

from __future__ import annotations

import click

from ._app import cli, cli_errors, database, require_file, scope


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="The port to listen on (0: any free port).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on. Another than the loopback interface needs --token.",
)
@click.option(
    "--token",
    envvar="AGENTLEDGER_UI_TOKEN",
    default=None,
    help="A secret every request must carry (16 characters or more; or set "
    "AGENTLEDGER_UI_TOKEN). The address printed holds it once; the browser then keeps it.",
)
@click.pass_context
def ui(ctx: click.Context, port: int, host: str, token: str | None) -> None:
    """Browse the ledger in a web browser, read-only.

    The conversations (searched, filtered by agent, status, tenant and owner), each as its
    user saw it with the run behind every answer, and each run's trace and run tree with what
    it spent. Serves 127.0.0.1 only, unless --host and --token are given; never writes. With
    --tenant or --owner it shows that scope alone. Prints the address to open, then serves
    until Ctrl-C.

    Needs the ui extra: pip install 'agentledger[ui]'.

    \b
    Examples:
      agentledger ui --db trips.db
      agentledger ui --db trips.db --port 9000 --tenant acme
      agentledger ui --db postgresql:///ledger --host 0.0.0.0 --token "$TOKEN"
    """
    require_file(ctx, "record runs in it first, or give --db the ledger to view")
    tenant, owner = scope(ctx)
    with cli_errors():
        from ..ui import serve

        serve(
            database(ctx),
            host=host,
            port=port,
            token=token,
            tenant_id=tenant,
            owner_id=owner,
            announce=lambda address: click.echo(f"agentledger ui: {database(ctx)} at {address}"),
        )

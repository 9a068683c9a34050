"""``agentledger datasette-metadata``: Datasette's metadata for the ledger (a thin shell over
:mod:`agentledger.integrations.datasette`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._app import cli, cli_errors, database, require_file


@cli.command("datasette-metadata")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the metadata to this file instead of standard output.",
)
@click.pass_context
def datasette_metadata(ctx: click.Context, output: Path | None) -> None:
    """Datasette's metadata for the ledger.

    For the ledger --db names: a description of every table and column (from the schema's
    documentation) and canned queries (a conversation, a run's trace, a run tree with its
    usage, the most expensive runs, the slowest tools, search, the ids a prefix begins), which
    take the short ids the other commands print and link each id to its trace and its tree.

    Datasette names a database by its file's stem (ledger for ledger.db), and so does the
    metadata: serve the file --db named. The ledger must be at the newest schema revision
    (`agentledger db upgrade`); it is only read.

    \b
    Examples:
      agentledger datasette-metadata --db ledger.db --output metadata.json
      datasette ledger.db -m metadata.json
    """
    from ..integrations.datasette import datasette_metadata as metadata

    path = _served_file(ctx)
    text = json.dumps(metadata(path.stem), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def _served_file(ctx: click.Context) -> Path:
    """The SQLite file --db names, which must be a ledger at the newest revision: the file
    Datasette will serve, whose stem names it there."""
    from ..ledger import Ledger, normalize_url, sqlite_path

    with cli_errors():
        path = sqlite_path(normalize_url(database(ctx)))
    if path is None:
        raise click.UsageError(
            f"Datasette serves SQLite files, and --db names {database(ctx)!r}: give --db the "
            "SQLite ledger file Datasette will serve (its name is the database's name there)"
        )
    require_file(ctx, "give --db the ledger file Datasette will serve")
    with cli_errors():
        Ledger.open(path, migrate=False, read_only=True).close()
    return path

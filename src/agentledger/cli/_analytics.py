"""``agentledger analytics ...`` and ``agentledger export ...``: DuckDB over the ledger."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import AgentLedgerError
from ._app import cli, cli_errors, database, render, scope
from ._json import json_option, print_json_lines

if TYPE_CHECKING:
    from ..analytics import Analytics, Report


@cli.group()
def analytics() -> None:
    """Reports and SQL views over the ledger, in DuckDB.

    The ledger is attached read-only, or copied into a DuckDB file with --cache and kept in
    step by `analytics sync`. DuckDB comes with the analytics extra: pip install
    'agentledger[analytics]'.

    \b
    Examples:
      agentledger analytics report --html report.html
      agentledger analytics sql > views.sql && duckdb -init views.sql
    """


cache_option = click.option(
    "--cache",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read a copy of the ledger kept in this DuckDB file (made if missing, brought up to "
    "date first): many times faster on a large ledger.",
)


@contextlib.contextmanager
def _analytics(ctx: click.Context, cache: Path | None = None) -> Iterator[Analytics]:
    """DuckDB over the --db ledger (or over its copy in ``cache``, synced first, progress on
    stderr), kept to the --tenant and --owner given; library and DuckDB errors as CLI errors,
    DuckDB missing (it comes with the analytics extra) among them."""
    from ..analytics import Analytics, require_duckdb

    with cli_errors():
        require_duckdb()
    import duckdb

    tenant, owner = scope(ctx)
    try:
        with Analytics.open(
            database(ctx), cache=cache, progress=_progress, tenant_id=tenant, owner_id=owner
        ) as opened:
            yield opened
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise click.ClickException(f"DuckDB failed on the ledger {database(ctx)}: {exc}") from exc


def _progress(line: str) -> None:
    click.echo(line, err=True)


@analytics.command()
@cache_option
@json_option
@click.pass_context
def sync(ctx: click.Context, cache: Path | None, as_json: bool) -> None:
    """Bring the analytics cache up to date.

    The cache is the DuckDB file --cache names (default ledger.duckdb): only what changed in
    the ledger since its last sync is read; the first sync copies everything.

    \b
    Examples:
      agentledger analytics sync
      agentledger analytics sync --cache trips.duckdb
    """
    target = cache or Path("ledger.duckdb")
    with _analytics(ctx, target) as opened:
        result = opened.last_sync
    assert result is not None
    record = {
        "cache": str(target),
        "full": result.full,
        "reason": result.reason,
        "rows": result.rows,
        "deleted": result.deleted,
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        print_json_lines([record])
        return
    kind = f"copied in full ({result.reason})" if result.full else "updated"
    read = sum(result.rows.values())
    gone = sum(result.deleted.values())
    click.echo(f"{target}: {kind}: {read:,} rows read, {gone:,} deleted, in {result.seconds:.2f} s")


@analytics.command()
@cache_option
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write the report, with charts, as one self-contained HTML page.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many runs and conversations the tables list.",
)
@json_option
@click.pass_context
def report(
    ctx: click.Context, cache: Path | None, html_file: Path | None, top: int, as_json: bool
) -> None:
    """A report of usage, cost, tools and run trees.

    Usage by conversation, agent and model, the most expensive runs, tools, the shape of the
    run trees, and what the totals do not cover yet (running runs, unpriced steps). A narrow
    terminal shows the columns that fit, the most telling first.

    With --json, one object per row of every table, its "table" naming the table:
    conversations, agents, models, runs, tools, tree_shape, completeness, running_runs.

    \b
    Examples:
      agentledger analytics report
      agentledger analytics report --html report.html --top 20
      agentledger analytics report --json | jq 'select(.table == "tools")'
    """
    from ..analytics import build_report, render_terminal

    with _analytics(ctx, cache) as opened:
        built = build_report(opened, top=top)
    written = None if html_file is None else _write_html(built, html_file)
    if as_json:
        print_json_lines({"table": t.name, **r} for t in built.tables for r in t.records)
    else:
        render(render_terminal(built))
    if written is not None:
        click.echo(f"wrote {written}", err=as_json)


def _write_html(built: Report, path: Path) -> Path:
    from ..analytics import write_html

    try:
        return write_html(built, path)
    except OSError as exc:
        raise click.ClickException(
            f"cannot write the report to {path}: {exc.strerror or exc}. "
            "Choose a writable path with --html."
        ) from exc


@analytics.command("sql")
@click.pass_context
def analytics_sql(ctx: click.Context) -> None:
    """A script for the duckdb shell with every view.

    It attaches the ledger and defines every view (with --tenant or --owner, views of that
    scope's rows only).

    \b
    Examples:
      agentledger analytics sql > views.sql && duckdb -init views.sql
    """
    from ..analytics import script

    with _analytics(ctx) as opened:
        text = script(_absolute(opened.url), tenant_id=opened.tenant_id, owner_id=opened.owner_id)
    click.echo(text)


def _absolute(url: str) -> str:
    """A SQLite ledger by its absolute path, so a script works from any directory."""
    from ..ledger import sqlite_path

    path = sqlite_path(url)
    return url if path is None else str(path.resolve())


@cli.group()
def export() -> None:
    """Copy the ledger out, as Parquet or OpenTelemetry.

    Its tables as Parquet, through DuckDB (the analytics extra), or its runs as OpenTelemetry
    traces (the otel extra), for other engines.

    \b
    Examples:
      agentledger export parquet exported/
      agentledger export otlp --endpoint http://localhost:4318
    """


@export.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@cache_option
@json_option
@click.pass_context
def parquet(ctx: click.Context, directory: Path, cache: Path | None, as_json: bool) -> None:
    """Every table as Parquet files, by day.

    Under DIRECTORY/<table>/, partitioned by day (day=YYYY-MM-DD), for Spark, DuckDB, Polars
    and other engines beyond one machine. With --tenant or --owner, that scope's rows only.
    Each table's folder from an earlier export is replaced whole.

    \b
    Examples:
      agentledger export parquet exported/
      agentledger export parquet exported/ --tenant acme --cache ledger.duckdb
    """
    from ..analytics import render_export, summarize_export

    with _analytics(ctx, cache) as opened:
        try:
            files = opened.export_parquet(directory)
        except OSError as exc:
            raise click.ClickException(
                f"cannot write Parquet under {directory}: {exc.strerror or exc}"
            ) from exc
    exported = summarize_export(directory, files)
    if as_json:
        print_json_lines(exported)
    else:
        render(render_export(directory, exported))

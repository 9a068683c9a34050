"""``agentledger prune``: retention for graph threads' checkpoints (LangGraph's, kept by
``LedgerSaver``): the latest of each thread, or those newer than an age; a thin shell over
``ledger.graph_checkpoints.retain``."""

from __future__ import annotations

import sys
from datetime import timedelta

import click

from ._app import cli, open_ledger, refuse_read_only
from ._forget import Age
from ._json import json_option, print_json_lines


@cli.command()
@click.argument("thread_ids", nargs=-1)
@click.option(
    "--keep-latest",
    type=click.IntRange(min=1),
    default=None,
    help="Keep this many of the newest checkpoints of each thread (of each of its namespaces).",
)
@click.option(
    "--older-than",
    type=Age(),
    default=None,
    help="Delete the checkpoints made longer ago than this (90d, 12h, 2w, 30m).",
)
@click.option("--dry-run", is_flag=True, help="Say how many would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation at a terminal.")
@json_option
@click.pass_context
def prune(
    ctx: click.Context,
    thread_ids: tuple[str, ...],
    keep_latest: int | None,
    older_than: timedelta | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete old checkpoints of LangGraph threads.

    Of THREAD_IDS (or of every thread in --tenant and --owner), keep the --keep-latest newest
    checkpoints of each namespace, and only those made within --older-than; given both, both
    limits hold. What a kept checkpoint refers to stays (its messages, its pending writes, the
    checkpoints a DeltaChannel is rebuilt from); the oldest kept one starts the thread's
    history. The conversation, its messages, runs and steps stay: `forget` deletes those.
    Asks for confirmation when run at a terminal, unless --yes.

    \b
    Examples:
      agentledger prune --keep-latest 20
      agentledger prune --older-than 30d --dry-run
      agentledger prune thread-7 --keep-latest 5 --yes
    """
    if keep_latest is None and older_than is None:
        raise click.UsageError(
            "nothing to prune by: give --keep-latest N (how many checkpoints of each thread "
            "to keep), --older-than AGE (older ones go), or both"
        )
    if not dry_run:
        refuse_read_only(ctx, "prune")
    with open_ledger(ctx) as ledger:  # kept to --tenant and --owner
        newer_than = None if older_than is None else ledger.clock() - older_than
        threads = list(thread_ids) or None

        def run(preview: bool) -> int:
            return ledger.graph_checkpoints.retain(
                threads, keep_latest=keep_latest, newer_than=newer_than, dry_run=preview
            )

        if not dry_run and not yes and sys.stdin.isatty():
            _confirm(run(True))
        _report(run(dry_run), dry_run, as_json)


def _confirm(count: int) -> None:
    """Ask before deleting ``count`` checkpoints; stop, having deleted nothing, unless the
    answer is yes. None to delete: nothing to ask."""
    if count and not click.confirm(f"Delete {_checkpoints(count)} for good?", default=False):
        raise click.ClickException("nothing was deleted")


def _report(count: int, dry_run: bool, as_json: bool) -> None:
    if as_json:
        print_json_lines([{"checkpoints": count, "dry_run": dry_run}])
    elif dry_run:
        click.echo(f"{_checkpoints(count)} would be deleted (dry run: nothing deleted)")
    else:
        click.echo(f"{_checkpoints(count)} deleted")


def _checkpoints(count: int) -> str:
    return f"{count} checkpoint{'' if count == 1 else 's'}"

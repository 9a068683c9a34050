"""``agentledger forget``: delete conversations on request (by id, or all of an owner's) or
by age (retention), with everything that came from them; a thin shell over ``Ledger.forget``,
``forget_owner`` and ``forget_inactive``."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click

from ._app import cli, open_ledger, refuse_read_only, render, scope, time_text
from ._json import json_option, print_json_lines

if TYPE_CHECKING:
    from ..ledger import Forgotten


class Age(click.ParamType[timedelta]):
    """A duration as ``90d``, ``12h``, ``2w`` or ``30m``: a whole, positive number and a unit."""

    name = "age"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        from .._values import time_ago

        age = time_ago(str(value))
        if age is not None and age > timedelta(0):
            return age
        self.fail(
            f"{value!r} is not an age: give a whole number above 0 and a unit, m (minutes), "
            "h (hours), d (days) or w (weeks), such as 90d",
            param,
            ctx,
        )


@cli.command()
@click.argument("conversation_ids", nargs=-1)
@click.option(
    "--older-than",
    type=Age(),
    default=None,
    help="Forget the conversations with no activity for this long (90d, 12h, 2w), in the "
    "--tenant and --owner given: retention.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be forgotten; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation at a terminal.")
@json_option
@click.pass_context
def forget(
    ctx: click.Context,
    conversation_ids: tuple[str, ...],
    older_than: timedelta | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete conversations and all that came from them.

    Their messages, runs, steps, tool executions, subagents and search entries go, in one
    transaction logged in forget_log (ids and counts, no content).

    Give CONVERSATION_IDS (or unique prefixes); or no id and the group's --owner to forget all
    of that owner's conversations; or --older-than AGE to forget those inactive that long.
    Asks for confirmation when run at a terminal, unless --yes.

    \b
    Examples:
      agentledger forget 01a2b3c4 --dry-run
      agentledger forget --owner ann --yes
      agentledger forget --older-than 90d
    """
    _, owner = scope(ctx)
    if conversation_ids and older_than is not None:
        raise click.UsageError("give conversation ids or --older-than, not both")
    if not conversation_ids and older_than is None and owner is None:
        raise click.UsageError(
            "nothing to forget: give conversation ids, --owner OWNER (every conversation of "
            "that owner) or --older-than AGE (the conversations inactive that long)"
        )
    if not dry_run:
        refuse_read_only(ctx, "forget")
    with open_ledger(ctx) as ledger:  # kept to --tenant and --owner

        def run(preview: bool) -> Forgotten:
            if conversation_ids:
                return ledger.forget(conversation_ids, dry_run=preview)
            if older_than is not None:
                return ledger.forget_inactive(older_than, dry_run=preview)
            assert owner is not None
            return ledger.forget_owner(owner, dry_run=preview)

        if not dry_run and not yes and sys.stdin.isatty():
            _confirm(run(True))
        _report(run(dry_run), as_json)


def _confirm(preview: Forgotten) -> None:
    """Show what would go and ask; stop, having deleted nothing, unless the answer is yes.
    Nothing to go: nothing to ask."""
    if not preview.conversation_ids:
        return
    _show(preview)
    if not click.confirm(f"Forget these {preview.rows} rows for good?", default=False):
        raise click.ClickException("nothing was forgotten")


def _report(forgotten: Forgotten, as_json: bool) -> None:
    if as_json:
        print_json_lines([{**forgotten.model_dump(), "rows": forgotten.rows}])
        return
    _show(forgotten)
    if forgotten.log_id is not None:
        click.echo(f"logged in forget_log as {forgotten.log_id}")
    if forgotten.checkpointed is False:
        click.echo(
            "a reader kept the write-ahead log from being emptied: the forgotten text may stay "
            "in the ledger's -wal file until its next checkpoint"
        )


def _show(forgotten: Forgotten) -> None:
    """The conversations' ids in full (what a record of the deletion quotes; they no longer
    begin any id of the ledger), then the rows by table; or one line when there were none."""
    from rich.text import Text

    from .._width import FittedColumn, FittedTable

    if not forgotten.conversation_ids:
        render(Text(f"nothing to forget: {_none_found(forgotten.reason)}"))
        return
    verb = "would be forgotten (dry run: nothing deleted)" if forgotten.dry_run else "forgotten"
    ids = ", ".join(forgotten.conversation_ids)
    count = len(forgotten.conversation_ids)
    render(Text(f"{count} conversation{'' if count == 1 else 's'} {verb}: {ids}"))
    rows = [(name, str(rows)) for name, rows in forgotten.counts.items()]
    total = (Text("total", style="bold"), Text(str(forgotten.rows), style="bold"))
    columns = (FittedColumn("table"), FittedColumn("rows", justify="right"))
    render(FittedTable(columns, [*rows, total]))


def _none_found(reason: str) -> str:
    """Why a forgetting found no conversation, from its ``reason`` (as ``forget_log`` holds
    it: ``owner``, or ``inactive since`` and an ISO time); within --tenant and --owner."""
    if reason == "owner":
        return "the owner has no conversation"
    since = reason.removeprefix("inactive since ")
    if since == reason:
        return "no conversation"
    return f"no conversation has been inactive since {time_text(datetime.fromisoformat(since))} UTC"

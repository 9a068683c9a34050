"""``agentledger import``: the conversations of another program's SQLite file brought into the
ledger; a thin shell over :func:`agentledger.importing.import_history`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._app import cli, cli_errors, database, in_scope, refuse_read_only, scope
from ._json import json_option, print_json_lines

if TYPE_CHECKING:
    from ..importing import ImportSummary
    from ..ledger import Ledger


@cli.command("import")
@click.argument("source_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--kind",
    default=None,
    metavar="KIND",
    help="What the file is: agents-sdk (an OpenAI Agents SDK SQLiteSession file), llm (an "
    "llm logs database) or langgraph (a LangGraph SqliteSaver file). Recognised from its "
    "tables when not given.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be imported; write nothing.")
@json_option
@click.pass_context
def import_(
    ctx: click.Context, source_file: Path, kind: str | None, dry_run: bool, as_json: bool
) -> None:
    """Bring the conversations of SOURCE_FILE into the ledger.

    Each conversation of the file becomes a conversation (in --tenant and --owner), each of
    its turns a run recorded at the time the file gives: the user's message and the answer in
    the conversation, the model calls as steps with their usage, the tool calls as tool
    executions. The file is only read. Importing it again adds only what it gained since.

    \b
    Examples:
      agentledger import sessions.db --db app.db --dry-run
      agentledger import "$(llm logs path)" --db app.db --tenant acme --owner ann
      agentledger import checkpoints.sqlite --db app.db --kind langgraph
    """
    if not dry_run:
        refuse_read_only(ctx, "import")
    from ..importing import import_history, recognise

    with cli_errors():  # a file it cannot import leaves no ledger made for it
        kind = recognise(source_file, kind)
    with _ledger(ctx, dry_run) as ledger, cli_errors():
        summary = import_history(
            ledger, source_file, kind=kind, dry_run=dry_run, progress=_progress(dry_run)
        )
    if as_json:
        print_json_lines([dataclasses.asdict(summary)])
        return
    click.echo(summary_line(summary))


@contextlib.contextmanager
def _ledger(ctx: click.Context, dry_run: bool) -> Iterator[Ledger | None]:
    """The --db ledger in --tenant and --owner: created when it does not exist yet; for a
    dry run only read, and None when there is none (nothing is created)."""
    from ..ledger import Ledger, normalize_url, sqlite_path

    with cli_errors():
        path = sqlite_path(normalize_url(database(ctx)))
        if dry_run and path is not None and not path.exists():
            yield None
            return
        ledger = Ledger.open(database(ctx), migrate=not dry_run, read_only=dry_run)
    try:
        yield in_scope(ledger, *scope(ctx))
    finally:
        ledger.close()


def _progress(dry_run: bool) -> Callable[[int, int], None]:
    verb = "read" if dry_run else "imported"

    def progress(done: int, total: int) -> None:
        click.echo(f"{verb} {done} of {total} conversations", err=True)

    return progress


def summary_line(summary: ImportSummary) -> str:
    """What was imported (or would be), in one line, and what the file did not say."""
    from ._render import counted as _counted

    what = (
        f"{_counted(summary.turns, 'turn')} ({_counted(summary.steps, 'step')}, "
        f"{_counted(summary.tool_executions, 'tool execution')}) in "
        f"{_counted(summary.conversations, 'conversation')}"
    )
    verb = "Would import" if summary.dry_run else "Imported"
    line = f"{verb} {what} from {summary.path} ({summary.kind})"
    if summary.skipped:
        line += f"; {_counted(summary.skipped, 'turn')} already imported, left as they were"
    if summary.unanswered:
        line += f"; {_counted(summary.unanswered, 'turn')} without an answer, recorded failed"
    if not summary.usage_recorded:
        line += "; the file records no token usage, so the steps are unpriced"
    return line + (". Nothing was written (dry run)." if summary.dry_run else ".")

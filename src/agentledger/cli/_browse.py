"""The commands that read a ledger: its conversations, runs, traces and search; recovering
stale runs; and the offline demo."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .._width import FittedColumn, FittedTable
from ..values import cost_text
from ._app import cli, cli_errors, console, database, given, open_ledger, render, time_text
from ._json import json_option, print_json_lines, run_records, table_row
from ._render import counted, plain, preview, quoted, run_tree_view

if TYPE_CHECKING:
    from ..ledger import AgentRun, Conversation, Ledger, SearchHit
    from ..values import Messages

_LIMIT_HELP = "List at most this many."


@cli.command()
@click.option(
    "--db-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    hidden=True,
    help="Deprecated: the old name of --db.",
)
@click.pass_context
def demo(ctx: click.Context, db_file: Path | None) -> None:
    """Run the offline demo, a scripted travel assistant.

    Its runs are recorded in a SQLite ledger: the file --db names, else agentledger-demo.db
    here. An earlier demo's file is started afresh; any other file is left as it is.

    \b
    Examples:
      agentledger demo
      agentledger demo --db demo.db
    """
    from .demo import run_demo

    with cli_errors():
        run_demo(db_path=_demo_file(ctx, db_file))


def _demo_file(ctx: click.Context, db_file: Path | None) -> Path | None:
    """The SQLite file --db names (or --db-file, its old name), None for the default."""
    from ..ledger import normalize_url, sqlite_path

    if db_file is not None:
        if given(ctx, "db"):
            raise click.UsageError(
                "give the demo's ledger once, with --db (--db-file is its old name)"
            )
        click.echo("agentledger: --db-file is deprecated, use --db", err=True)
        return db_file
    if not given(ctx, "db"):
        return None
    with cli_errors():
        path = sqlite_path(normalize_url(database(ctx)))
    if path is None:
        raise click.UsageError(
            "the demo records into a SQLite file: give --db (or AGENTLEDGER_DB) a file path, "
            "or leave it out for agentledger-demo.db here"
        )
    return path


@cli.command()
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help=_LIMIT_HELP
)
@json_option
@click.pass_context
def conversations(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Conversations, most recently updated first.

    \b
    Examples:
      agentledger conversations --db trips.db
      agentledger conversations --limit 5 --json
    """
    with open_ledger(ctx) as ledger:
        listed = [(c, len(ledger.messages(c.id))) for c in ledger.conversations(limit=limit)]
        if as_json:
            print_json_lines({**table_row(c), "messages": count} for c, count in listed)
        else:
            render(_conversations_table(ledger, listed))


_CONVERSATION_COLUMNS = (
    FittedColumn("id"),
    FittedColumn("kind", 2),
    FittedColumn("title", 1, min_width=16),
    FittedColumn("version", 3, justify="right"),
    FittedColumn("messages", 2, justify="right"),
    FittedColumn("updated", 1),
)


def _conversations_table(ledger: Ledger, listed: list[tuple[Conversation, int]]) -> FittedTable:
    short = ledger.short_ids((c.id for c, _ in listed), of="conversation")
    rows = [
        (
            plain(short[c.id]),
            c.kind,
            plain(c.title or ""),
            str(c.version),
            str(count),
            time_text(c.updated_at),
        )
        for c, count in listed
    ]
    return FittedTable(_CONVERSATION_COLUMNS, rows, title="conversations")


@cli.command()
@click.argument("conversation")
@click.option(
    "--as",
    "view",
    type=click.Choice(["user", "model"]),
    default="user",
    show_default=True,
    help="user: the conversation as the user saw it, including what summaries replaced. "
    "model: what the model sees now, the summary first.",
)
@click.option(
    "--section",
    default=None,
    help="Only this section: messages (the conversation), summary or buffer (the messages "
    "summaries replaced).",
)
@json_option
@click.pass_context
def show(
    ctx: click.Context, conversation: str, view: str, section: str | None, as_json: bool
) -> None:
    """A conversation, as the user saw it.

    What the user said and what the agent answered; with --as model, what the model sees of
    it now. CONVERSATION is its id, or a prefix of it that is unique (as `agentledger
    conversations` shows it).

    \b
    Examples:
      agentledger show 01a2b3c4
      agentledger show 01a2b3c4 --as model
    """
    with open_ledger(ctx) as ledger:
        record = ledger.conversation(conversation)  # by its id or a unique prefix of it
        if section is not None:
            messages, heading = ledger.messages(record.id, section), f"section {section}"
        elif view == "model":
            messages, heading = ledger.model_context(record.id), "as the model sees it"
        else:
            messages, heading = ledger.history(record.id), "as the user saw it"
        summarized = {m.id for m in ledger.messages(record.id, "buffer")}
    if as_json:
        print_json_lines(
            {"conversation_id": record.id, **m.model_dump(), "summarized": m.id in summarized}
            for m in messages
        )
        return
    console().rule(plain(f"conversation {record.id} · version {record.version} · {heading}"))
    _print_messages(messages, summarized, section)


def _print_messages(messages: Messages, summarized: set[str], section: str | None) -> None:
    out = console()
    for message in messages:
        style = {"user": "bold cyan", "system": "bold magenta"}.get(message.role, "bold green")
        note = " [dim](summarized)[/dim]" if message.id in summarized else ""
        # An answer cut short (its run was cancelled, or its process died): said so, at once.
        cut = " [bold yellow](interrupted)[/bold yellow]" if message.interrupted else ""
        when = time_text(message.created_at)
        out.print(f"[{style}]{message.role}[/{style}]{cut} [dim]{when}[/dim]{note}")
        out.print(plain(message.content))
        out.print()
    if not messages:
        out.print(_empty(section), style="dim", markup=False)


def _empty(section: str | None) -> str:
    """What an empty view says, so that it is not taken for a failure."""
    if section is None:
        return "(no messages yet)"
    return (
        f"(section {section} is empty: a conversation's messages are in the section messages; "
        "summary and buffer fill once it has been summarized)"
    )


@cli.command()
@click.argument("run")
@click.option(
    "--verbose",
    is_flag=True,
    help="Also show each failed tool call's whole error and the traceback of what it raised.",
)
@json_option
@click.pass_context
def trace(ctx: click.Context, run: str, verbose: bool, as_json: bool) -> None:
    """A run's steps, tool calls and subagent runs.

    Each step and tool call with its tokens and timings, and the subagent runs it started,
    each with its own (exclusive) and its subtree's (inclusive) usage. RUN is its id, or a
    prefix of it that is unique (as `agentledger runs` shows it).

    With --json, one object per run of the tree (the run itself first, then its subagent runs
    depth first), each with its usage and its steps.

    \b
    Examples:
      agentledger trace 01a2b3c4
      agentledger trace 01a2b3c4 --verbose
    """
    with open_ledger(ctx) as ledger:
        tree = ledger.run_tree(run)
        if as_json:
            print_json_lines(run_records(ledger, tree))
        else:
            render(run_tree_view(ledger, tree, verbose=verbose))


_STATUSES = ["running", "completed", "stopped", "failed", "interrupted"]


@cli.command()
@click.option(
    "--conversation",
    default=None,
    help="Only this conversation's runs (its id or a unique prefix).",
)
@click.option(
    "--status", type=click.Choice(_STATUSES), default=None, help="Only the runs with this status."
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help=_LIMIT_HELP
)
@json_option
@click.pass_context
def runs(
    ctx: click.Context, conversation: str | None, status: str | None, limit: int, as_json: bool
) -> None:
    """Runs, newest first (a conversation's, oldest first).

    \b
    Examples:
      agentledger runs --status failed
      agentledger runs --conversation 01a2b3c4 --json
    """
    with open_ledger(ctx) as ledger:
        listed = ledger.runs(conversation, status=status, limit=limit)
        if as_json:
            print_json_lines(table_row(r) for r in listed)
        else:
            render(_runs_table(ledger, listed))


_RUN_COLUMNS = (
    FittedColumn("id"),
    FittedColumn("conversation", 1),
    FittedColumn("agent", 1, min_width=12),
    FittedColumn("status", 1),
    FittedColumn("stop", 3),
    FittedColumn("steps", 3, justify="right"),
    FittedColumn("tokens", 2, justify="right"),
    FittedColumn("cost", 1, justify="right"),
    FittedColumn("started", 2),
)


def _runs_table(ledger: Ledger, listed: list[AgentRun]) -> FittedTable:
    runs_shown = ledger.short_ids((r.id for r in listed), of="run")
    conversations_shown = ledger.short_ids((r.conversation_id for r in listed), of="conversation")
    rows = [
        (
            plain(runs_shown[r.id]),
            plain(conversations_shown[r.conversation_id]),
            plain(r.agent_name),
            r.status,
            r.stop_reason or "",
            str(r.step_count),
            str(r.usage.total_tokens),
            cost_text(r.cost_usd, fully_priced=r.fully_priced),
            time_text(r.started_at),
        )
        for r in listed
    ]
    return FittedTable(_RUN_COLUMNS, rows, title="runs")


@cli.command()
@click.argument("text")
@click.option(
    "--conversation", default=None, help="Only this conversation (its id or a unique prefix)."
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help=_LIMIT_HELP
)
@json_option
@click.pass_context
def search(
    ctx: click.Context, text: str, conversation: str | None, limit: int, as_json: bool
) -> None:
    """Find the messages that hold every word of TEXT.

    Conversation messages, best matches first.

    \b
    Examples:
      agentledger search "Lisbon hotel"
      agentledger search invoice --conversation 01a2b3c4
    """
    with open_ledger(ctx) as ledger:
        hits = ledger.search(text, conversation_id=conversation, limit=limit)
        if as_json:
            print_json_lines(hits)
        else:
            render(_search_table(ledger, text, hits))


_SEARCH_COLUMNS = (
    FittedColumn("conversation"),
    FittedColumn("seq", 2, justify="right"),
    FittedColumn("role", 1),
    FittedColumn("content", 1, min_width=20),
)


def _search_table(ledger: Ledger, text: str, hits: list[SearchHit]) -> FittedTable:
    short = ledger.short_ids((h.conversation_id for h in hits), of="conversation")
    rows = [
        (
            plain(short[hit.conversation_id]),
            str(hit.seq),
            hit.message.role,
            plain(preview(hit.message.content, 80)),
        )
        for hit in hits
    ]
    return FittedTable(_SEARCH_COLUMNS, rows, title=plain(f"search: {text}"))


@cli.command()
@click.option(
    "--stale-after",
    type=click.FloatRange(min=0),
    default=None,
    help="Also treat running runs silent for this many seconds as stale.",
)
@click.option("--dry-run", is_flag=True, help="List the stale runs without touching them.")
@json_option
@click.pass_context
def recover(ctx: click.Context, stale_after: float | None, dry_run: bool, as_json: bool) -> None:
    """Abandon stale runs, freeing their conversations.

    A stale run is marked interrupted, and what a streaming one had shown is kept as its
    answer (flagged interrupted). To resume them instead, call Agent.recover() from code that
    has the agent's model and tools.

    \b
    Examples:
      agentledger recover --dry-run
      agentledger recover --stale-after 600
    """
    with open_ledger(ctx) as ledger:
        found = ledger.stale_runs(stale_after)
        shown = {r.id: len(r.partial_output or "") for r in found}
        stale = found if dry_run else ledger.recover(stale_after=stale_after)
        if as_json:
            print_json_lines(table_row(r) for r in stale)
        else:
            _print_stale(ledger, stale, "stale" if dry_run else "abandoned", shown)


def _print_stale(ledger: Ledger, stale: list[AgentRun], verb: str, shown: dict[str, int]) -> None:
    if not stale:
        console().print("no stale runs: nothing to recover")
        return
    runs_shown = ledger.short_ids((r.id for r in stale), of="run")
    conversations_shown = ledger.short_ids((r.conversation_id for r in stale), of="conversation")
    for r in stale:
        # What a streaming run had shown is kept (or, in a dry run, would be): say how much.
        kept = f", {counted(shown[r.id], 'character')} shown kept" if shown.get(r.id) else ""
        console().print(
            f"{verb}: run {quoted(runs_shown[r.id])} of conversation "
            f"{quoted(conversations_shown[r.conversation_id])} "
            f"({counted(r.step_count, 'step')}{kept})"
        )
    console().print(f"{counted(len(stale), 'run')} {verb}")

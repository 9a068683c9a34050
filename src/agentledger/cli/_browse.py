"""The commands that read a ledger: its conversations, runs, traces and search; recovering
stale runs; and the offline demo.

The commands that only read open a SQLite ledger with :class:`LedgerReader` (no SQLAlchemy),
and import rich and the views (:mod:`._render`) in their bodies."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._app import (
    cli,
    cli_errors,
    console,
    database,
    given,
    open_ledger,
    open_reader,
    render,
    time_text,
)
from ._json import json_option, print_json_lines, run_records, table_row

if TYPE_CHECKING:
    from rich.table import Table

    from ..ledger import AgentRun, Ledger, SearchHit
    from ..values import Messages
    from ._app import Reading

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
    """Run the offline demo: a scripted travel assistant, recorded in a SQLite ledger: the
    file --db names, else a new temporary file."""
    from .demo import run_demo

    run_demo(db_path=_demo_file(ctx, db_file))


def _demo_file(ctx: click.Context, db_file: Path | None) -> Path | None:
    """The SQLite file --db names (or --db-file, its old name), None for a temporary one."""
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
            "or leave it out for a temporary file"
        )
    return path


@cli.command()
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help=_LIMIT_HELP
)
@json_option
@click.pass_context
def conversations(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Conversations, most recently updated first."""
    with open_reader(ctx) as ledger:
        listed = [(c, len(ledger.messages(c.id))) for c in ledger.conversations(limit=limit)]
        if as_json:
            print_json_lines({**table_row(c), "messages": count} for c, count in listed)
        else:
            render(_conversations_table(ledger, listed))


def _conversations_table(ledger: Reading, listed: list[tuple[Any, int]]) -> Table:
    from rich.table import Table

    from ._render import id_column, plain

    short = ledger.short_ids((c.id for c, _ in listed), of="conversation")
    table = Table(title="conversations")
    id_column(table, "id", short.values())
    for header in ("kind", "title", "version", "messages", "updated"):
        table.add_column(header)
    for c, count in listed:
        table.add_row(
            plain(short[c.id]),
            c.kind,
            plain(c.title or ""),
            str(c.version),
            str(count),
            time_text(c.updated_at),
        )
    return table


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
    """The conversation: what the user said and what the agent answered; with --as model,
    what the model sees of it now. CONVERSATION is its id, or a prefix of it that is unique
    (as `agentledger conversations` shows it)."""
    with open_reader(ctx) as ledger:
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
    from ._render import plain

    console().rule(plain(f"conversation {record.id} · version {record.version} · {heading}"))
    _print_messages(messages, summarized, section)


def _print_messages(messages: Messages, summarized: set[str], section: str | None) -> None:
    from ._render import plain

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
    """A run's steps and tool calls with tokens and timings, and the subagent runs it started,
    each with its own (exclusive) and its subtree's (inclusive) usage. RUN is its id, or a
    prefix of it that is unique (as `agentledger runs` shows it).

    With --json, one object per run of the tree (the run itself first, then its subagent runs
    depth first), each with its usage and its steps."""
    with open_reader(ctx) as ledger:
        tree = ledger.run_tree(run)
        if as_json:
            print_json_lines(run_records(ledger, tree))
        else:
            from ._render import run_tree_view

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
    """Runs, newest first (a conversation's, oldest first)."""
    with open_reader(ctx) as ledger:
        listed = ledger.runs(conversation, status=status, limit=limit)
        if as_json:
            print_json_lines(table_row(r) for r in listed)
        else:
            render(_runs_table(ledger, listed))


def _runs_table(ledger: Reading, listed: Sequence[Any]) -> Table:
    from rich.table import Table

    from ._render import id_column, plain

    runs_shown = ledger.short_ids((r.id for r in listed), of="run")
    conversations_shown = ledger.short_ids((r.conversation_id for r in listed), of="conversation")
    table = Table(title="runs")
    id_column(table, "id", runs_shown.values())
    id_column(table, "conversation", conversations_shown.values())
    for header in ("agent", "status", "stop", "steps", "tokens", "cost", "started"):
        table.add_column(header)
    for r in listed:
        table.add_row(
            plain(runs_shown[r.id]),
            plain(conversations_shown[r.conversation_id]),
            plain(r.agent_name),
            r.status,
            r.stop_reason or "",
            str(r.step_count),
            str(r.usage.total_tokens),
            "" if r.cost_usd is None else f"${r.cost_usd:.4f}",
            time_text(r.started_at),
        )
    return table


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
    """Conversation messages that contain every word of TEXT, best matches first."""
    with open_reader(ctx) as ledger:
        hits = ledger.search(text, conversation_id=conversation, limit=limit)
        if as_json:
            print_json_lines(hits)
        else:
            render(_search_table(ledger, text, hits))


def _search_table(ledger: Reading, text: str, hits: list[SearchHit]) -> Table:
    from rich.table import Table

    from ._render import id_column, plain, preview

    short = ledger.short_ids((h.conversation_id for h in hits), of="conversation")
    table = Table(title=plain(f"search: {text}"))
    id_column(table, "conversation", short.values())
    for header in ("seq", "role", "content"):
        table.add_column(header)
    for hit in hits:
        table.add_row(
            plain(short[hit.conversation_id]),
            str(hit.seq),
            hit.message.role,
            plain(preview(hit.message.content, 80)),
        )
    return table


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
    """Abandon stale runs: mark them interrupted, keep what a streaming one had shown as its
    answer (flagged interrupted), and free their conversations.

    To resume them instead, call Agent.recover() from code that has the agent's model and tools.
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
    from ._render import counted, quoted

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

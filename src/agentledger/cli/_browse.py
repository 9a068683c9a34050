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
from ._json import json_option, message_record, print_json_lines, run_records, table_row

if TYPE_CHECKING:
    from rich.text import Text

    from .._values import Messages
    from .._width import FittedTable
    from ..ledger import AgentRun, Conversation, ConversationRecord, Ledger, SearchHit, TraceHit
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
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also list the subagents' conversations (each subagent run has one of its own).",
)
@json_option
@click.pass_context
def conversations(ctx: click.Context, limit: int, everything: bool, as_json: bool) -> None:
    """Conversations, most recently updated first.

    The main ones (what users said to an agent; --all adds the subagents'), each by its title,
    else its first user message.

    \b
    Examples:
      agentledger conversations --db trips.db
      agentledger conversations --all --limit 5 --json
    """
    with open_reader(ctx) as ledger:
        found = ledger.conversations(kind=None if everything else "main", limit=limit)
        listed = [(c, ledger.messages(c.id)) for c in found]
        if as_json:
            print_json_lines({**table_row(c), "messages": len(m)} for c, m in listed)
        elif not listed:
            _none("no conversations")
        else:
            render(_conversations_table(ledger, listed))


def _conversations_table(ledger: Reading, listed: list[tuple[Any, Messages]]) -> FittedTable:
    from .._width import FittedColumn, FittedTable
    from ._render import plain

    short = ledger.short_ids((c.id for c, _ in listed), of="conversation")
    columns = (
        FittedColumn("id"),
        FittedColumn("kind", 2),
        FittedColumn("title", 1, min_width=16),
        FittedColumn("version", 3, justify="right"),
        FittedColumn("messages", 2, justify="right"),
        FittedColumn("updated", 1),
    )
    rows = [
        (
            plain(short[c.id]),
            c.kind,
            _title(c.title, messages),
            str(c.version),
            str(len(messages)),
            time_text(c.updated_at),
        )
        for c, messages in listed
    ]
    return FittedTable(columns, rows, title="conversations")


def _title(title: str | None, messages: Messages) -> Text:
    """A conversation's title, else its first user message on one line (dim: not a title),
    cut to fit by the table."""
    from ._render import plain, preview

    if title:
        return plain(title)
    first = next((m.content for m in messages if m.role == "user"), "")
    shown = plain(preview(first, TITLE_LENGTH))
    shown.stylize("dim")
    return shown


TITLE_LENGTH = 200
"""The most of a first message a listing takes as a title (the table cuts it to fit)."""


def _none(what: str) -> None:
    """What an empty listing says, on a line of its own, instead of an empty table."""
    console().print(what, markup=False, highlight=False)


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
@click.option(
    "--trace",
    "beside",
    is_flag=True,
    help="Each turn with its run beside it: the tool calls with their arguments and results, "
    "the errors, the subagent runs it started.",
)
@click.option("--full", is_flag=True, help="With --trace: print calls and results whole.")
@json_option
@click.pass_context
def show(
    ctx: click.Context,
    conversation: str,
    view: str,
    section: str | None,
    beside: bool,
    full: bool,
    as_json: bool,
) -> None:
    """A conversation, as the user saw it.

    What the user said and what the agent answered; with --trace, each turn beside the trace of
    the run that answered it; with --as model, what the model sees of it now. CONVERSATION is
    its id, or a prefix of it that is unique (as `agentledger conversations` shows it).

    \b
    Examples:
      agentledger show 01a2b3c4
      agentledger show 01a2b3c4 --trace
      agentledger show 01a2b3c4 --as model
    """
    if beside and (section is not None or view == "model"):
        raise click.UsageError(
            "--trace shows the conversation as the user saw it: leave out --as model and --section"
        )
    with open_reader(ctx) as ledger:
        if beside:  # what the turns print is read in one snapshot, as they are printed
            ledger.reading(
                "showing a conversation's turns",
                lambda: _show_turns(ledger, conversation, full=full, as_json=as_json),
            )
            return
        record, messages, heading, summarized = ledger.reading(
            "reading a conversation", lambda: _shown(ledger, conversation, section, view)
        )
    if as_json:
        print_json_lines(message_record(record.id, m, summarized) for m in messages)
        return
    from ._render import plain

    console().rule(plain(f"conversation {record.id} · version {record.version} · {heading}"))
    _print_messages(messages, summarized, section)


def _shown(
    ledger: Reading, conversation: str, section: str | None, view: str
) -> tuple[Conversation | ConversationRecord, Messages, str, set[str]]:
    """What ``show`` prints of ``conversation`` (its id or a unique prefix of it): its record,
    its messages with their heading, and the ids of those summarized."""
    record = ledger.conversation(conversation)
    if section is not None:
        messages, heading = ledger.messages(record.id, section), f"section {section}"
    elif view == "model":
        messages, heading = ledger.model_context(record.id), "as the model sees it"
    else:
        messages, heading = ledger.history(record.id), "as the user saw it"
    return record, messages, heading, {m.id for m in ledger.messages(record.id, "buffer")}


def _show_turns(ledger: Reading, conversation: str, *, full: bool, as_json: bool) -> None:
    """``show --trace``: the conversation turn by turn, each beside its run's trace."""
    from ._turns import print_turns, turn_records

    conversation_id = ledger.conversation(conversation).id  # by its id or a unique prefix
    turns = ledger.turns(conversation_id)
    summarized = {m.id for m in ledger.messages(conversation_id, "buffer")}
    if as_json:
        print_json_lines(turn_records(ledger, turns, conversation_id, summarized))
    else:
        print_turns(ledger, conversation_id, turns, summarized, full=full)


def _print_messages(messages: Messages, summarized: set[str], section: str | None) -> None:
    from ._turns import print_message

    out = console()
    for message in messages:
        print_message(out, message, summarized)
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
    with open_reader(ctx) as ledger:
        ledger.reading("reading a run's trace", lambda: _trace(ledger, run, verbose, as_json))


def _trace(ledger: Reading, run: str, verbose: bool, as_json: bool) -> None:
    """``trace``: run ``run``'s tree, read in the snapshot of the caller's reading."""
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
    """Runs, newest first (a conversation's, oldest first).

    \b
    Examples:
      agentledger runs --status failed
      agentledger runs --conversation 01a2b3c4 --json
    """
    with open_reader(ctx) as ledger:
        listed = ledger.runs(conversation, status=status, limit=limit)
        if as_json:
            print_json_lines(table_row(r) for r in listed)
        elif not listed:
            filters = [f"with status {status}"] if status else []
            filters += [f"in conversation {conversation}"] if conversation else []
            _none(" ".join(["no runs", *filters]))
        else:
            render(_runs_table(ledger, listed))


def _runs_table(ledger: Reading, listed: Sequence[Any]) -> FittedTable:
    from .._values import cost_text
    from .._width import FittedColumn, FittedTable
    from ._render import plain

    runs_shown = ledger.short_ids((r.id for r in listed), of="run")
    conversations_shown = ledger.short_ids((r.conversation_id for r in listed), of="conversation")
    columns = (
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
    return FittedTable(columns, rows, title="runs")


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
    """Find the messages and tool calls holding TEXT.

    Conversation messages, and tool calls of the trace (their arguments and results), best
    matches first; a word followed by * is a prefix (Lis*). Each hit is shown around the word
    found; those in the trace are marked so.

    \b
    Examples:
      agentledger search "Lisbon hotel"
      agentledger search "Lis*" --conversation 01a2b3c4
    """
    with open_reader(ctx) as ledger:
        hits = ledger.search(text, conversation_id=conversation, limit=limit, trace=True)
        if as_json:
            print_json_lines(_found(hit) for hit in hits)
        elif not hits:
            _none(f"no matches for {text}")
        else:
            render(_search_table(ledger, text, hits))


def _found(hit: SearchHit | TraceHit) -> dict[str, Any]:
    """A hit as ``search --json`` prints it: its fields, and where it was found."""
    from ..ledger import SearchHit

    where = "conversation" if isinstance(hit, SearchHit) else "trace"
    return {**hit.model_dump(), "found_in": where}


def _search_table(ledger: Reading, text: str, hits: list[SearchHit | TraceHit]) -> FittedTable:
    from .._width import FittedColumn, FittedTable
    from ..ledger import SearchHit, search_snippet
    from ._render import plain
    from ._streaming import call_text

    short = ledger.short_ids((h.conversation_id for h in hits), of="conversation")
    columns = (
        FittedColumn("conversation"),
        FittedColumn("found in", 1, min_width=12),
        FittedColumn("text", 1, min_width=20),
    )
    rows = []
    for hit in hits:
        if isinstance(hit, SearchHit):
            found, said = f"{hit.message.role} (message {hit.seq})", hit.message.content
        else:
            tool = hit.tool_execution
            found = f"trace: {tool.tool_name} (step {hit.step_index})"
            said = f"{call_text(tool.tool_call)} → {tool.result}"
        rows.append(
            (
                plain(short[hit.conversation_id]),
                plain(found),
                plain(search_snippet(said, text, SNIPPET_LENGTH)),
            )
        )
    return FittedTable(columns, rows, title=plain(f"search: {text}"))


SNIPPET_LENGTH = 80
"""How much of a hit's text a search shows, centred on the word found."""


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
    from ._render import counted, quoted

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

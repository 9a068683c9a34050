"""The ``agentledger`` command: a thin shell over the library's functions."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from . import __version__
from ._render import preview, run_tree_view
from .builder import DEFAULT_MAX_STEPS
from .errors import AgentLedgerError

if TYPE_CHECKING:
    from ._chat import Provider, Session, Setup, ToolLike
    from .analytics import Analytics, Report
    from .llm import PriceTable

DEFAULT_DB = "./agentledger.db"
WIDE = 240
"""Width of the output when it is not a terminal (a pipe, a file): wide enough for full ids."""


def _console() -> Console:
    """A console on the current standard output (which tests and pipes replace)."""
    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=WIDE)


def _print(renderable: Any) -> None:
    _console().print(renderable)


class _Context:
    def __init__(self, db: str) -> None:
        self.db = db


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentledger")
@click.option(
    "--db",
    envvar="AGENTLEDGER_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="The ledger: a SQLite path or URL, or a postgresql:// URL (or set AGENTLEDGER_DB).",
)
@click.pass_context
def cli(ctx: click.Context, db: str) -> None:
    """agentledger: an LLM agent loop whose memory is a relational ledger."""
    ctx.obj = _Context(db)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except AgentLedgerError as exc:  # pragma: no cover - click handles most exits itself
        _console().print(f"[red]error:[/red] {exc}")
        sys.exit(1)


@contextlib.contextmanager
def _ledger(ctx: click.Context) -> Iterator[Any]:
    """The ledger named by --db, which must exist and be at the newest schema."""
    from .ledger import Ledger
    from .ledger._engine import normalize_url, sqlite_path

    db = ctx.find_object(_Context)
    assert db is not None
    path = sqlite_path(normalize_url(db.db))
    if path is not None and not path.exists():
        raise click.ClickException(
            f"no ledger at {path}: run an agent with it first, or `agentledger db upgrade` "
            "to create an empty one (choose the file with --db or AGENTLEDGER_DB)"
        )
    try:
        ledger = Ledger.open(db.db, migrate=False)
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield ledger
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        ledger.close()


@cli.command()
@click.option(
    "--db-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to keep the demo's ledger (default: a new temporary file).",
)
def demo(db_file: Path | None) -> None:
    """Run the offline demo: a scripted travel assistant, recorded in a SQLite ledger."""
    from .demo import run_demo

    run_demo(db_path=db_file)


@cli.command()
@click.option("--limit", type=int, default=50, show_default=True)
@click.pass_context
def conversations(ctx: click.Context, limit: int) -> None:
    """Conversations, most recently updated first."""
    with _ledger(ctx) as ledger:
        table = Table(
            "id", "kind", "title", "version", "messages", "updated", title="conversations"
        )
        for c in ledger.conversations(limit=limit):
            count = len(ledger.messages(c.id))
            table.add_row(
                c.id, c.kind, c.title or "", str(c.version), str(count), _time(c.updated_at)
            )
        _print(table)


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
@click.pass_context
def show(ctx: click.Context, conversation: str, view: str, section: str | None) -> None:
    """The conversation: what the user said and what the agent answered; with --as model,
    what the model sees of it now."""
    with _ledger(ctx) as ledger:
        record = ledger.conversation(conversation)
        if section is not None:
            messages, heading = ledger.messages(conversation, section), f"section {section}"
        elif view == "model":
            messages, heading = ledger.model_context(conversation), "as the model sees it"
        else:
            messages, heading = ledger.history(conversation), "as the user saw it"
        summarized = {m.id for m in ledger.messages(conversation, "buffer")}
        console = _console()
        console.rule(f"conversation {record.id} · version {record.version} · {heading}")
        for message in messages:
            style = {"user": "bold cyan", "system": "bold magenta"}.get(message.role, "bold green")
            note = " [dim](summarized)[/dim]" if message.id in summarized else ""
            console.print(
                f"[{style}]{message.role}[/{style}] [dim]{_time(message.created_at)}[/dim]{note}"
            )
            console.print(message.content, markup=False)
            console.print()


@cli.command()
@click.argument("run")
@click.pass_context
def trace(ctx: click.Context, run: str) -> None:
    """A run's steps and tool calls with tokens and timings, and the subagent runs it started,
    each with its own (exclusive) and its subtree's (inclusive) usage."""
    with _ledger(ctx) as ledger:
        _print(run_tree_view(ledger, ledger.run_tree(run)))


@cli.command()
@click.option("--conversation", default=None, help="Only this conversation's runs.")
@click.option("--status", default=None, help="running, completed, stopped, failed or interrupted.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.pass_context
def runs(ctx: click.Context, conversation: str | None, status: str | None, limit: int) -> None:
    """Runs, newest first."""
    with _ledger(ctx) as ledger:
        table = Table(
            "id",
            "conversation",
            "agent",
            "status",
            "stop",
            "steps",
            "tokens",
            "cost",
            "started",
            title="runs",
        )
        for r in ledger.runs(conversation, status=status, limit=limit):
            cost = "" if r.cost_usd is None else f"${r.cost_usd:.4f}"
            table.add_row(
                r.id,
                r.conversation_id,
                r.agent_name,
                r.status,
                r.stop_reason or "",
                str(r.step_count),
                str(r.usage.total_tokens),
                cost,
                _time(r.started_at),
            )
        _print(table)


@cli.command()
@click.argument("text")
@click.option("--conversation", default=None, help="Only this conversation.")
@click.option("--limit", type=int, default=20, show_default=True)
@click.pass_context
def search(ctx: click.Context, text: str, conversation: str | None, limit: int) -> None:
    """Conversation messages that contain every word of TEXT."""
    with _ledger(ctx) as ledger:
        table = Table("conversation", "seq", "role", "content", title=f"search: {text}")
        for hit in ledger.search(text, conversation_id=conversation, limit=limit):
            table.add_row(
                hit.conversation_id,
                str(hit.seq),
                hit.message.role,
                preview(hit.message.content, 80),
            )
        _print(table)


@cli.command()
@click.option(
    "--stale-after",
    type=float,
    default=None,
    help="Also treat running runs silent for this many seconds as stale.",
)
@click.option("--dry-run", is_flag=True, help="List the stale runs without touching them.")
@click.pass_context
def recover(ctx: click.Context, stale_after: float | None, dry_run: bool) -> None:
    """Abandon stale runs: mark them interrupted and free their conversations.

    To resume them instead, call Agent.recover() from code that has the agent's model and tools.
    """
    with _ledger(ctx) as ledger:
        stale = (
            ledger.stale_runs(stale_after) if dry_run else ledger.recover("abandon", stale_after)
        )
        verb = "stale" if dry_run else "abandoned"
        for r in stale:
            _console().print(
                f"{verb}: run {r.id} of conversation {r.conversation_id} ({r.step_count} steps)"
            )
        _console().print(f"{len(stale)} run(s) {verb}")


def _tools(
    ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]
) -> tuple[ToolLike, ...]:
    """--tool MODULE:ATTR, imported (from the current directory too, as uvicorn and flask do)."""
    if not specs:
        return ()
    from ._chat import load_tools
    from .errors import UsageError

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_tools(specs)
    except UsageError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def _prices(ctx: click.Context, param: click.Parameter, path: Path | None) -> PriceTable | None:
    if path is None:
        return None
    from .llm import PriceTable

    try:
        return PriceTable.load(path)
    except AgentLedgerError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


_AGENT_OPTIONS = (
    click.option(
        "--provider",
        type=click.Choice(["openai", "anthropic"]),
        required=True,
        help="openai: any OpenAI-compatible Chat Completions API (Ollama, vLLM, ...); "
        "anthropic: the Messages API. The key comes from OPENAI_API_KEY or ANTHROPIC_API_KEY.",
    ),
    click.option("--model", required=True, help="The model name, e.g. gpt-4o-mini."),
    click.option(
        "--base-url",
        default=None,
        help="The API's base URL (default: OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the "
        "provider's), e.g. http://localhost:11434/v1 for Ollama.",
    ),
    click.option("--system", "system_prompt", default=None, help="The system prompt."),
    click.option(
        "--tool",
        "tools",
        multiple=True,
        metavar="MODULE:ATTR",
        callback=_tools,
        help="A tool for the model: a typed function (or a list of them) in an importable "
        "module, e.g. mytools:search. Repeatable.",
    ),
    click.option(
        "--max-steps",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_STEPS,
        show_default=True,
        help="Steps per run before the model must answer.",
    ),
    click.option(
        "--prices",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=_prices,
        default=None,
        help="A price table (JSON shaped like agentledger's prices.json) for the cost.",
    ),
    click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Seconds to wait for the model's answer (default 60).",
    ),
    click.option("--conversation", default=None, help="Continue this conversation (its id)."),
)


def _agent_options(command: Callable[..., None]) -> Callable[..., None]:
    """Adds the options ``chat`` and ``run`` share, handing the command one ``setup``."""

    @functools.wraps(command)
    def with_setup(
        *args: Any,
        provider: Provider,
        model: str,
        base_url: str | None,
        system_prompt: str | None,
        tools: tuple[ToolLike, ...],
        max_steps: int,
        prices: PriceTable | None,
        timeout: float | None,
        conversation: str | None,
        **rest: Any,
    ) -> None:
        from ._chat import Setup

        db = _db(click.get_current_context())
        setup = Setup(
            provider=provider,
            model=model,
            base_url=base_url,
            system_prompt=system_prompt,
            tools=tools,
            max_steps=max_steps,
            prices=prices,
            timeout=timeout,
            conversation_id=conversation,
            db_option=None if db == DEFAULT_DB else db,
        )
        command(*args, setup=setup, **rest)

    for option in reversed(_AGENT_OPTIONS):
        with_setup = option(with_setup)
    return with_setup


def _db(ctx: click.Context) -> str:
    found = ctx.find_object(_Context)
    assert found is not None
    return found.db


@contextlib.contextmanager
def _session(ctx: click.Context, setup: Setup) -> Iterator[Session]:
    """The chat session ``setup`` describes, on the --db ledger; errors as CLI errors."""
    from ._chat import open_session

    try:
        with open_session(_db(ctx), setup, _console()) as session:
            yield session
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc


@cli.command()
@click.pass_context
@_agent_options
def chat(ctx: click.Context, setup: Setup) -> None:
    """Talk to a model: a conversation kept in the ledger, a run per line you type.

    Tool calls are printed as they happen, then the answer and the run's tokens and cost.
    Leave with /exit, /quit or Ctrl-D; continue later with --conversation ID.
    """
    from ._chat import chat_loop, read_prompt

    with _session(ctx, setup) as session:
        code = chat_loop(session, read_prompt)
    ctx.exit(code)


@cli.command()
@click.argument("question")
@click.pass_context
@_agent_options
def run(ctx: click.Context, question: str, setup: Setup) -> None:
    """Ask a model one QUESTION: one run, recorded in the ledger; exits 1 if the run failed.

    Tool calls are printed as they happen, then the answer, the run's tokens and cost, and
    how to continue the conversation.
    """
    from ._chat import run_once

    with _session(ctx, setup) as session:
        code = run_once(session, question)
    ctx.exit(code)


@cli.group()
def db() -> None:
    """Schema migrations of the ledger (Alembic)."""


@contextlib.contextmanager
def _engine(ctx: click.Context, *, create: bool = False) -> Iterator[Any]:
    """An engine on the --db database; only ``create`` may bring a new SQLite file about."""
    from .ledger._engine import make_engine, normalize_url, sqlite_path

    found = ctx.find_object(_Context)
    assert found is not None
    path = sqlite_path(normalize_url(found.db))
    if path is not None and not create and not path.exists():
        raise click.ClickException(
            f"no ledger at {path}: `agentledger db upgrade` creates one "
            "(choose the file with --db or AGENTLEDGER_DB)"
        )
    try:
        engine = make_engine(found.db)
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        yield engine
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.dispose()


@db.command()
@click.argument("revision", default="head")
@click.pass_context
def upgrade(ctx: click.Context, revision: str) -> None:
    """Migrate the ledger up to REVISION (default: the newest)."""
    from .ledger import _migrate

    with _engine(ctx, create=True) as engine:
        _migrate.upgrade(engine, revision)
        with engine.connect() as conn:
            _console().print(f"at revision {_migrate.current_revision(conn)}")


@db.command()
@click.argument("revision")
@click.pass_context
def downgrade(ctx: click.Context, revision: str) -> None:
    """Migrate the ledger down to REVISION (``base`` removes every table)."""
    from .ledger import _migrate

    with _engine(ctx) as engine:
        _migrate.downgrade(engine, revision)
        with engine.connect() as conn:
            _console().print(f"at revision {_migrate.current_revision(conn) or 'base'}")


@db.command()
@click.pass_context
def current(ctx: click.Context) -> None:
    """The ledger's schema revision."""
    from .ledger import _migrate

    with _engine(ctx) as engine, engine.connect() as conn:
        revision = _migrate.current_revision(conn)
    head = _migrate.head_revision()
    _console().print(
        f"{revision or 'base'}{' (head)' if revision == head else f' (newest: {head})'}"
    )


@db.command()
def history() -> None:
    """The migrations this agentledger ships, newest first."""
    from alembic.script import ScriptDirectory

    from .ledger import _migrate

    for script in ScriptDirectory.from_config(_migrate.alembic_config()).walk_revisions():
        _console().print(
            f"{script.revision}  {(script.doc or '').splitlines()[0] if script.doc else ''}"
        )


@db.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Exit 0 when the ledger is at the newest schema, 1 when it needs `db upgrade`."""
    from .ledger import _migrate

    with _engine(ctx) as engine:
        ok = _migrate.is_current(engine)
    if not ok:
        raise click.ClickException(
            "the ledger is not at the newest schema: run `agentledger db upgrade`"
        )
    _console().print(f"up to date at {_migrate.head_revision()}")


@db.command()
@click.pass_context
def verify(ctx: click.Context) -> None:
    """Check the whole ledger for damage: every row against its checksum, the positions of
    every conversation, buffer, run and step, each run's step count and, on SQLite, every page
    and index (integrity_check) and foreign key. Exit 1, listing what is wrong, on damage."""
    from .errors import LedgerCorruptError

    with _ledger(ctx) as ledger:
        try:
            problems = ledger.verify()
        except LedgerCorruptError as exc:  # SQLite could not even read the file through
            problems = [str(exc)]
        counts = None if problems else _checked_rows(ledger)
    for problem in problems:
        _console().print(problem, markup=False, soft_wrap=True)
    if counts is None:
        _console().print(
            f"{len(problems)} problem(s): the ledger is damaged. Restore it from a backup "
            "(for SQLite, with its -wal and -shm files).",
            markup=False,
            soft_wrap=True,
        )
        ctx.exit(1)
    _console().print(
        _verified(counts, sqlite=ledger.dialect == "sqlite"), markup=False, soft_wrap=True
    )


def _checked_rows(ledger: Any) -> dict[str, tuple[int, int]]:
    """Each table's rows, and how many of them carry a checksum."""
    from sqlalchemy import func, select

    from .ledger._checksum import COVERED
    from .ledger._engine import with_retries
    from .ledger.tables import metadata

    def count() -> dict[str, tuple[int, int]]:
        counted: dict[str, tuple[int, int]] = {}
        with ledger.engine.connect() as conn:
            for name in COVERED:
                table = metadata.tables[name]
                query = select(func.count(), func.count(table.c.checksum))
                total, sealed = conn.execute(query).one()
                counted[name] = (total, sealed)
        return counted

    return with_retries(ledger.settings, count, what="counting the rows checked")


def _verified(counts: dict[str, tuple[int, int]], *, sqlite: bool) -> str:
    rows = ", ".join(f"{total} {name}" for name, (total, _) in counts.items())
    unsealed = sum(total - sealed for total, sealed in counts.values())
    running = (
        f" ({unsealed} without a checksum, not checked: runs are sealed when they end)"
        if unsealed
        else ""
    )
    pages = (
        "; integrity_check, foreign_key_check and the full-text index check found nothing"
        if sqlite
        else ""
    )
    return (
        f"ok: {rows}{running}: every checksum matches, no position is missing and every run "
        f"has the steps it counted{pages}"
    )


@db.command()
@click.option(
    "--dialect", type=click.Choice(["sqlite", "postgresql"]), default="sqlite", show_default=True
)
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
def schema(dialect: str, output: Path | None) -> None:
    """The schema's DDL, from the migrations (what schema/*.sql hold)."""
    from .ledger.schema import ddl

    text = ddl(dialect)  # type: ignore[arg-type]
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


def _time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


@cli.group()
def analytics() -> None:
    """DuckDB analytics over the ledger (attached read-only): a report, and the views for the
    duckdb shell."""


@contextlib.contextmanager
def _analytics(ctx: click.Context) -> Iterator[Analytics]:
    """DuckDB over the --db ledger; library and DuckDB errors as CLI errors."""
    import duckdb

    from .analytics import Analytics

    try:
        with Analytics.open(_db(ctx)) as opened:
            yield opened
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    except duckdb.Error as exc:
        raise click.ClickException(f"DuckDB failed on the ledger {_db(ctx)}: {exc}") from exc


@analytics.command()
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
@click.pass_context
def report(ctx: click.Context, html_file: Path | None, top: int) -> None:
    """Usage by conversation, agent and model, the most expensive runs, tools, the shape of
    the run trees, and what the totals do not cover yet (running runs, unpriced steps)."""
    from .analytics import build_report, render_terminal

    with _analytics(ctx) as opened:
        built = build_report(opened, top=top)
    written = None if html_file is None else _write_html(built, html_file)
    _print(render_terminal(built))
    if written is not None:
        _console().print(f"wrote {written}", markup=False)


def _write_html(built: Report, path: Path) -> Path:
    from .analytics import write_html

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
    """A script for the duckdb shell that attaches the ledger and defines every view:

    agentledger analytics sql > views.sql && duckdb -init views.sql
    """
    from .analytics import script

    with _analytics(ctx) as opened:
        text = script(_absolute(opened.url))
    click.echo(text)


def _absolute(url: str) -> str:
    """A SQLite ledger by its absolute path, so a script works from any directory."""
    from .ledger._engine import sqlite_path

    path = sqlite_path(url)
    return url if path is None else str(path.resolve())


@cli.group()
def export() -> None:
    """Copy the ledger out for other engines."""


@export.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.pass_context
def parquet(ctx: click.Context, directory: Path) -> None:
    """Every table as Parquet under DIRECTORY/<table>/, partitioned by day (day=YYYY-MM-DD),
    for Spark, DuckDB, Polars and other engines beyond one machine."""
    from .analytics import render_export, summarize_export

    with _analytics(ctx) as opened:
        try:
            files = opened.export_parquet(directory)
        except OSError as exc:
            raise click.ClickException(
                f"cannot write Parquet under {directory}: {exc.strerror or exc}"
            ) from exc
    _print(render_export(directory, summarize_export(directory, files)))

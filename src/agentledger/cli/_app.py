"""The ``agentledger`` command group, and what its commands share: the console, the ledger
named by ``--db`` (read-only with ``--read-only``), and errors turned into one-line CLI
errors."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from .. import __version__
from ..errors import AgentLedgerError

if TYPE_CHECKING:
    from ..ledger import Ledger

DEFAULT_DB = "./agentledger.db"
WIDE = 240
"""Width of the output when it is not a terminal (a pipe, a file): wide enough for full ids."""


def console() -> Console:
    """A console on the current standard output (which tests and pipes replace)."""
    terminal = Console()
    return terminal if terminal.is_terminal else Console(width=WIDE)


def render(renderable: Any) -> None:
    console().print(renderable)


class Options:
    """The options of the group, for its commands: the ledger's database, and whether it may
    only be read."""

    def __init__(self, db: str, read_only: bool = False) -> None:
        self.db = db
        self.read_only = read_only


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentledger")
@click.option(
    "--db",
    envvar="AGENTLEDGER_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="The ledger: a SQLite path or URL, or a postgresql:// URL (or set AGENTLEDGER_DB).",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Only read the ledger: commands that read work, commands that would write are "
    "refused, and no file is created beside a SQLite ledger. Chosen by itself when this user "
    "may not write the SQLite file or its directory.",
)
@click.pass_context
def cli(ctx: click.Context, db: str, read_only: bool) -> None:
    """agentledger: an LLM agent loop whose memory is a relational ledger."""
    ctx.obj = Options(db, read_only)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except AgentLedgerError as exc:  # pragma: no cover - click handles most exits itself
        console().print(f"[red]error:[/red] {exc}")
        sys.exit(1)


def database(ctx: click.Context) -> str:
    """The ``--db`` of the command's group."""
    return _options(ctx).db


def read_only(ctx: click.Context) -> bool:
    """The ``--read-only`` of the command's group."""
    return _options(ctx).read_only


def refuse_read_only(ctx: click.Context, command: str) -> None:
    """Refuse the command ``command``, which writes the ledger, under ``--read-only``."""
    if read_only(ctx):
        raise click.ClickException(
            f"`agentledger {command}` writes the ledger, and --read-only was given, so nothing "
            "was done. Run it without --read-only."
        )


def _options(ctx: click.Context) -> Options:
    found = ctx.find_object(Options)
    assert found is not None
    return found


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """The library's errors as one-line CLI errors (exit 1)."""
    try:
        yield
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc


def require_file(ctx: click.Context, what_to_do: str) -> None:
    """Refuse a ``--db`` SQLite file that does not exist (``what_to_do`` says how to make
    one), before anything could create it."""
    from ..ledger import normalize_url, sqlite_path

    with cli_errors():
        path = sqlite_path(normalize_url(database(ctx)))
    if path is not None and not path.exists():
        raise click.ClickException(
            f"no ledger at {path}: {what_to_do} (choose the file with --db or AGENTLEDGER_DB)"
        )


@contextlib.contextmanager
def open_ledger(ctx: click.Context) -> Iterator[Ledger]:
    """The ledger named by --db, which must exist and be at the newest schema (read-only with
    --read-only, or where this user may not write it)."""
    from ..ledger import Ledger

    require_file(
        ctx,
        "run an agent with it first, or `agentledger db upgrade` to create an empty one",
    )
    with cli_errors():
        ledger = Ledger.open(database(ctx), migrate=False, read_only=read_only(ctx))
    try:
        with cli_errors():
            yield ledger
    finally:
        ledger.close()


def time_text(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""

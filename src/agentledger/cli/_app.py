"""The ``agentledger`` command group, and what its commands share: the group's options (taken
before or after a command's name), the console, the ledger named by ``--db`` (read-only with
``--read-only``), and errors turned into one-line CLI errors.

Importing the command line loads click and nothing heavy: each command imports what it needs
(rich, the ledger, SQLAlchemy) in its body, so that ``agentledger --help`` and the commands
that only read answer at once."""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from ..errors import AgentLedgerError

if TYPE_CHECKING:
    from rich.console import Console

    from ..ledger import Ledger, LedgerReader

    Reading = Ledger | LedgerReader
    """What the commands that only read are given: a :class:`LedgerReader` for a SQLite
    ledger, a :class:`Ledger` for PostgreSQL. Both read the same rows alike."""

DEFAULT_DB = "./agentledger.db"


def console() -> Console:
    """A console on the current standard output (which tests and pipes replace), as wide as
    ``COLUMNS`` or the terminal says (:func:`~agentledger._width.fitted_console`)."""
    from .._width import fitted_console  # rich loads when something is printed

    return fitted_console()


def render(renderable: Any) -> None:
    console().print(renderable)


@dataclass
class Options:
    """The options of the group, for its commands: each taken before or after the command's
    name (``agentledger --db X runs`` and ``agentledger runs --db X`` alike)."""

    db: str = DEFAULT_DB
    read_only: bool = False
    """Only read the ledger."""
    tenant: str | None = None
    """Keep to this tenant's conversations."""
    owner: str | None = None
    """Keep to this owner's conversations."""
    given: set[str] = field(default_factory=set)
    """The options the user gave, on the command line or in the environment (the others hold
    their defaults)."""


class _TakesGroupOptions(click.Command):
    """A command (or a group below the top one) that takes the top group's options too, after
    its own name: ``agentledger db upgrade --db X``.

    Every option of the top group is carried, whatever it is: adding one to ``cli`` (and its
    field to :class:`Options`) is all a new group option needs. Given after the command, an
    option overrides the one given before it; the environment and the default are read once,
    by the top group. The command's help names them in one line: ``agentledger --help``
    describes them, once."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        top = ctx.find_root().command
        if ctx.parent is None or not isinstance(top, LedgerGroup):
            return params
        taken = {opt for param in params for opt in param.opts}
        carried = [
            _after_the_command(option)
            for option in top.params
            if isinstance(option, click.Option)
            and not option.is_eager  # --version and --help
            and not taken.intersection(option.opts)
        ]
        own = len(self.params)
        return [*params[:own], *carried, *params[own:]]  # before --help

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command's own options, then the group's named in one line."""
        params = self.get_params(ctx)
        records = [
            record
            for param in params
            if isinstance(param, click.Option) and (record := param.get_help_record(ctx))
        ]
        carried = [param.opts[0] for param in params if _carried(param)]
        with formatter.section("Options"):
            formatter.write_dl(records)
            if carried:
                formatter.write_paragraph()
                formatter.write_text(f"Also {', '.join(carried)}: see `agentledger --help`.")


class LedgerCommand(_TakesGroupOptions):
    """A command of ``agentledger``."""


class LedgerGroup(_TakesGroupOptions, click.Group):
    """``agentledger`` and its groups of commands, whose commands take the top group's
    options after their names."""

    command_class = LedgerCommand
    group_class = type  # a group made by a group is of its class

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_options(ctx, formatter)
        self.format_commands(ctx, formatter)


@functools.cache
def _after_the_command(option: click.Option) -> click.Option:
    """``option`` of the top group, as a command takes it after its name: no default and no
    environment variable of its own, so that only a value given there overrides the group's;
    left out of the command's help, which names it with the others in one line."""
    carried = copy.copy(option)
    carried.default = None
    carried.envvar = None
    carried.show_default = False
    carried.show_envvar = False
    carried.required = False
    carried.expose_value = False
    carried.hidden = True
    carried.callback = _override_the_group
    return carried


def _carried(param: click.Parameter) -> bool:
    """Whether ``param`` is an option of the top group that a command carries."""
    return param.callback is _override_the_group


def _override_the_group(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A group option given after the command: it wins over the one given before it."""
    assert param.name is not None
    if ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        options = ctx.find_object(Options)
        assert options is not None
        setattr(options, param.name, value)
        options.given.add(param.name)
    return value


@click.group(cls=LedgerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentledger", prog_name="agentledger")
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
@click.option(
    "--tenant",
    envvar="AGENTLEDGER_TENANT",
    default=None,
    help="Keep to this tenant's conversations: every read, write and export sees only them "
    "(or set AGENTLEDGER_TENANT).",
)
@click.option(
    "--owner",
    envvar="AGENTLEDGER_OWNER",
    default=None,
    help="Keep to this owner's conversations (or set AGENTLEDGER_OWNER).",
)
@click.pass_context
def cli(ctx: click.Context, /, **options: Any) -> None:
    """agentledger: an LLM agent loop whose memory is a relational ledger.

    The options below name the ledger and whose conversations a command sees. Every command
    takes them, before or after its name: agentledger --db trips.db runs, or agentledger runs
    --db trips.db.

    \b
    Examples:
      agentledger demo
      agentledger --db trips.db runs --status failed
      agentledger --db trips.db trace 01a2b3c4
    """
    defaults = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    given = {name for name in options if ctx.get_parameter_source(name) not in defaults}
    ctx.obj = Options(**options, given=given)


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


def scope(ctx: click.Context) -> tuple[str | None, str | None]:
    """The ``--tenant`` and ``--owner`` of the command's group (``None``: not given)."""
    options = _options(ctx)
    return options.tenant, options.owner


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


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave the group's option ``name`` (on the command line, before or after
    the command, or in the environment) rather than leaving it to its default."""
    found = ctx.find_object(Options)
    return found is not None and name in found.given


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """The library's errors as one-line CLI errors (exit 1)."""
    try:
        yield
    except AgentLedgerError as exc:
        raise click.ClickException(str(exc)) from exc


def require_file(ctx: click.Context, what_to_do: str) -> None:
    """Refuse a ``--db`` SQLite file that does not exist (``what_to_do`` says how to make
    one), before anything could create it; or whose directory does not exist."""
    from ..ledger import normalize_url, sqlite_path

    with cli_errors():
        path = sqlite_path(normalize_url(database(ctx)))
    if path is None or path.exists():
        return
    choose = "choose the file with --db or AGENTLEDGER_DB"
    if not path.parent.is_dir():
        raise click.ClickException(
            f"no ledger at {path}: the directory {path.parent} does not exist ({choose})"
        )
    raise click.ClickException(f"no ledger at {path}: {what_to_do} ({choose})")


_CREATE = "run an agent with it first, or `agentledger db upgrade` to create an empty one"


@contextlib.contextmanager
def open_ledger(ctx: click.Context) -> Iterator[Ledger]:
    """The ledger named by --db, which must exist and be at the newest schema (read-only with
    --read-only, or where this user may not write it), kept to --tenant and --owner."""
    from ..ledger import Ledger

    require_file(ctx, _CREATE)
    with cli_errors():
        ledger = Ledger.open(database(ctx), migrate=False, read_only=read_only(ctx))
    try:
        with cli_errors():
            yield in_scope(ledger, *scope(ctx))
    finally:
        ledger.close()


@contextlib.contextmanager
def open_reader(ctx: click.Context) -> Iterator[Reading]:
    """What the commands that only read read through: as :func:`open_ledger`, but a SQLite
    ledger is read by a :class:`LedgerReader` (the standard library's sqlite3, without
    SQLAlchemy, which would take longer to load than the whole command may)."""
    from ..ledger import LedgerReader, normalize_url, sqlite_path

    require_file(ctx, _CREATE)
    with cli_errors():
        if sqlite_path(normalize_url(database(ctx))) is None:
            with open_ledger(ctx) as ledger:
                yield ledger
            return
        reader = LedgerReader.open(database(ctx), read_only=read_only(ctx))
    try:
        with cli_errors():
            yield in_scope(reader, *scope(ctx))
    finally:
        reader.close()


H = TypeVar("H", "Ledger", "LedgerReader")


def in_scope(handle: H, tenant: str | None, owner: str | None) -> H:
    """``handle`` kept to ``--tenant`` and ``--owner`` when either is given (a scoped handle:
    closing ``handle`` closes it)."""
    return handle if tenant is None and owner is None else handle.scoped(tenant, owner)


def time_text(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""

"""``agentledger db ...``: migrations (a thin shell over :mod:`agentledger.ledger.migrate`),
verification, the schema's DDL and the SQL of PostgreSQL's application role."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import LedgerCorruptError, SchemaVersionError, UsageError
from ._app import cli, cli_errors, console, database, open_ledger, refuse_read_only, require_file
from ._json import json_option, print_json_lines

_CREATE = "`agentledger db upgrade` creates one"


@cli.group()
def db() -> None:
    """Migrate, verify and describe the ledger's schema.

    Schema migrations (Alembic), verification, and the schema's DDL.

    \b
    Examples:
      agentledger db upgrade --db ledger.db
      agentledger db verify --db ledger.db
    """


@db.command()
@click.argument("revision", default="head")
@click.pass_context
def upgrade(ctx: click.Context, revision: str) -> None:
    """Migrate the ledger up to REVISION (default: the newest).

    \b
    Examples:
      agentledger db upgrade --db ledger.db
      agentledger db upgrade --db postgresql://app@db.example/ledger
    """
    from ..ledger import migrate

    refuse_read_only(ctx, "db upgrade")
    with cli_errors():
        console().print(f"at revision {migrate.upgrade(database(ctx), revision)}")


@db.command()
@click.argument("revision")
@click.pass_context
def downgrade(ctx: click.Context, revision: str) -> None:
    """Migrate the ledger down to REVISION (base removes every table).

    \b
    Examples:
      agentledger db downgrade 0010 --db ledger.db
      agentledger db downgrade base --db scratch.db
    """
    from ..ledger import migrate

    refuse_read_only(ctx, "db downgrade")
    require_file(ctx, _CREATE)
    with cli_errors():
        console().print(f"at revision {migrate.downgrade(database(ctx), revision) or 'base'}")


@db.command()
@click.pass_context
def current(ctx: click.Context) -> None:
    """The ledger's schema revision.

    \b
    Examples:
      agentledger db current --db ledger.db
    """
    from ..ledger import migrate

    require_file(ctx, _CREATE)
    with cli_errors():
        revision, head = migrate.current(database(ctx)), migrate.head()
    newest = " (head)" if revision == head else f" (newest: {head})"
    console().print(f"{revision or 'base'}{newest}")


@db.command()
@json_option
def history(as_json: bool) -> None:
    """The migrations this agentledger ships, newest first.

    \b
    Examples:
      agentledger db history
    """
    from ..ledger import migrate

    revisions = [
        (r.revision, r.down_revision, r.doc.splitlines()[0] if r.doc else "")
        for r in migrate.history()
    ]
    if as_json:
        print_json_lines(
            {"revision": revision, "down_revision": down, "doc": doc}
            for revision, down, doc in revisions
        )
        return
    for revision, _, doc in revisions:
        console().print(f"{revision}  {doc}", markup=False)


@db.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Exit 0 if the ledger's schema is the newest, else 1.

    Exit 1 means it needs `agentledger db upgrade`.

    \b
    Examples:
      agentledger db check --db ledger.db || agentledger db upgrade --db ledger.db
    """
    from ..ledger import migrate

    require_file(ctx, _CREATE)
    try:
        migrate.check(database(ctx))
    except SchemaVersionError as exc:
        raise click.ClickException(str(exc)) from exc
    console().print(f"up to date at {migrate.head()}")


@db.command("verify")
@json_option
@click.pass_context
def verify_command(ctx: click.Context, as_json: bool) -> None:
    """Check every row, position and count for damage.

    Every row against its checksum, the positions of every conversation, buffer, run and
    step, each run's and each step's counts and, on SQLite, every page and index
    (integrity_check), every foreign key and the full-text index. Exit 1, listing what is
    wrong, on damage.

    With --json, one object per problem ({"problem": ...}), or when there is none, one per
    table with the rows it holds and how many of them carry a checksum.

    \b
    Examples:
      agentledger db verify --db ledger.db
      agentledger db verify --db ledger.db --json
    """
    from ._render import counted

    with open_ledger(ctx) as ledger:
        try:
            problems = ledger.verify()
        except LedgerCorruptError as exc:  # SQLite could not even read the file through
            problems = [str(exc)]
        counts = None if problems else ledger.row_counts()
        sqlite = ledger.dialect == "sqlite"
    if as_json:
        print_json_lines({"problem": problem} for problem in problems)
        print_json_lines(
            {"table": name, "rows": rows, "rows_with_checksum": sealed}
            for name, (rows, sealed) in (counts or {}).items()
        )
        ctx.exit(1 if problems else 0)
    for problem in problems:
        console().print(problem, markup=False, soft_wrap=True)
    if counts is None:
        console().print(
            f"{counted(len(problems), 'problem')}: the ledger is damaged. Restore it from a backup "
            "(for SQLite, with its -wal and -shm files).",
            markup=False,
            soft_wrap=True,
        )
        ctx.exit(1)
    console().print(_verified(counts, sqlite=sqlite), markup=False, soft_wrap=True)


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
        f"ok: {rows}{running}: every checksum matches, no position is missing, every run has "
        f"the steps and every step the tool executions it counted{pages}"
    )


@db.command()
@click.option(
    "--dialect",
    type=click.Choice(["sqlite", "postgresql"]),
    default="sqlite",
    show_default=True,
    help="The database the DDL is written for.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the DDL to this file instead of standard output.",
)
def schema(dialect: str, output: Path | None) -> None:
    """The schema's DDL, from the migrations (what schema/*.sql hold).

    \b
    Examples:
      agentledger db schema --dialect postgresql --output schema.sql
    """
    from ..ledger.schema import ddl

    text = ddl("postgresql" if dialect == "postgresql" else "sqlite")
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


@db.command("app-role")
@click.argument("name")
@click.option(
    "--schema",
    "schema_name",
    default="public",
    show_default=True,
    help="The PostgreSQL schema the ledger's tables are in.",
)
@click.option(
    "--password-env",
    metavar="VAR",
    default=None,
    help="Give the role the password held in the environment variable VAR (kept off the "
    "command line). Without it the role gets no password: set one with ALTER ROLE.",
)
def app_role(name: str, schema_name: str, password_env: str | None) -> None:
    """Print the SQL that creates an application's role.

    NAME is the PostgreSQL role an application connects as: it may read and write the
    ledger's rows, only within the tenant each transaction sets (row-level security), and
    nothing more (no DDL, no TRUNCATE). Run the SQL as a superuser, or as the role that owns
    the ledger's tables if it may create roles.

    It only prints SQL: it connects to no database, so neither --db nor a server is needed.

    \b
    Examples:
      agentledger db app-role app | psql "$OWNER_URL"
      agentledger db app-role app --password-env APP_PASSWORD | psql "$OWNER_URL"
    """
    from ..ledger.roles import application_role_sql

    with cli_errors():
        password = _password_from(password_env)
        text = application_role_sql(name, schema=schema_name, password=password)
    click.echo(text, nl=False)


def _password_from(variable: str | None) -> str | None:
    """The password held in the environment variable ``variable`` (``None``: none asked for)."""
    if variable is None:
        return None
    password = os.environ.get(variable)
    if not password:
        raise UsageError(
            f"--password-env {variable}: the environment variable {variable} is not set or is "
            "empty. Set it to the role's password, or leave --password-env out and give the role "
            "a password with ALTER ROLE afterwards."
        )
    return password

"""Schema migrations, as plain functions in the style of Alembic's ``command`` module: each
takes the ledger's database (a file path, a ``sqlite:///`` or ``postgresql://`` URL, or a
SQLAlchemy ``Engine``) and does one thing. ``agentledger db ...`` is a thin shell over them.

The migrations are Alembic scripts shipped inside the package; the version table is
``agentledger_version``, so a ledger can share a database with an application's own Alembic
migrations. :func:`upgrade` and :func:`downgrade` take a lock first (``BEGIN IMMEDIATE`` on
SQLite, an advisory lock on PostgreSQL), so several processes migrating one database at once
migrate it once. A database migrated by a newer agentledger is refused
(:class:`~agentledger.errors.SchemaVersionError`), never touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path
from typing import TextIO

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from ..errors import MigrationError, SchemaVersionError, UsageError
from ._access import read_only_access
from ._engine import WRITE, make_engine
from ._failures import is_refused
from ._revisions import HEAD, VERSION_TABLE, tables
from ._revisions import check_not_newer as _check_not_newer
from ._schema_files import ddl_revision, ddl_statements, find_schema_file
from ._urls import normalize_url, sqlite_path

__all__ = [
    "VERSION_TABLE",
    "Revision",
    "Target",
    "alembic_config",
    "check",
    "check_not_newer",
    "current",
    "downgrade",
    "head",
    "history",
    "is_current",
    "locked",
    "upgrade",
]

_ADVISORY_LOCK = 0x616C6564  # "aled": the PostgreSQL advisory lock key for migrations

Target = str | os.PathLike[str] | Engine
"""The ledger to migrate: a file path, a ``sqlite:///`` or ``postgresql://`` URL, or an
engine."""


@dataclass(frozen=True)
class Revision:
    """One migration the package ships: its id, the one before it, and what it does."""

    revision: str
    down_revision: str | None
    doc: str


def upgrade(database: Target, revision: str = "head") -> str | None:
    """Migrate the ledger up to ``revision`` (the newest by default); the revision it is at.
    At that revision already, it changes nothing and needs no privilege beyond reading the
    version table (an application role opens a ledger at head); a role that may not change the
    schema raises :class:`~agentledger.errors.MigrationError`.

    An empty database asked for ``head`` gets the newest schema at once, from the DDL the
    migrations generate (``schema/``, shipped in the package), in the same one transaction:
    the same tables, indexes, triggers and policies as running every migration in turn, in a
    fraction of the time. Any other upgrade, and an upgrade to a revision named by its id, runs
    the migrations one by one."""
    with locked(database) as conn, _known(revision):
        at = _current(conn)
        check_not_newer(at)
        with _permitted(conn, at, revision):
            if revision == "head" and at is None and _created_at_head(conn):
                return HEAD
            command.upgrade(alembic_config(conn), revision)
        return _current(conn)


def _created_at_head(conn: Connection) -> bool:
    """Create the newest schema in an empty database from its DDL, and say so; ``False``
    (nothing done) when the database holds a table of the ledger already, or the package holds
    no DDL of the newest revision (a checkout whose ``schema/`` is out of date, ``make
    schema``; a copy of the package without it), so the migrations run instead."""
    dialect = conn.dialect.name
    script = find_schema_file(f"{dialect}.sql")
    if script is None or ddl_revision(script) != HEAD:
        return False
    present = tables(dialect, lambda sql: conn.exec_driver_sql(sql).all())
    if {VERSION_TABLE, "conversations", "conversation_messages"} & set(present):
        return False
    statements = ddl_statements(script, dialect)
    if dialect == "postgresql":  # one round trip: PostgreSQL runs a script of statements
        statements = [";\n".join(statements)]
    for statement in statements:
        conn.exec_driver_sql(statement)
    conn.execute(
        text(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:revision)"), {"revision": HEAD}
    )
    return True


def downgrade(database: Target, revision: str) -> str | None:
    """Migrate the ledger down to ``revision`` (``base`` removes every table); the revision it
    is at (``None`` at base). A revision that would lose data refuses
    (:class:`~agentledger.errors.MigrationError`) and changes nothing."""
    with locked(database) as conn, _known(revision):
        at = _current(conn)
        check_not_newer(at)
        with _permitted(conn, at, revision):
            command.downgrade(alembic_config(conn), revision)
        return _current(conn)


@contextlib.contextmanager
def _permitted(conn: Connection, at: str | None, revision: str) -> Iterator[None]:
    """PostgreSQL's refusal of a migration to a role that may not change the schema (the
    application role of ``agentledger db app-role``) as a :class:`MigrationError` saying which
    role may: the migration's transaction is rolled back whole."""
    try:
        yield
    except DBAPIError as exc:
        if not is_refused(exc):
            raise
        role = conn.engine.url.username or "this role"
        refused = " ".join(str(exc.orig).split())[:300]
        raise MigrationError(
            f"the database role {role!r} may not change the ledger's schema ({refused}), "
            f"so nothing was changed: the ledger is at revision {at or 'base'} and this "
            f"agentledger needs {revision}. An application role (`agentledger db app-role`) "
            "cannot migrate: run `agentledger db upgrade` as the role that owns the ledger's "
            "tables (the migration role), then open the ledger again."
        ) from exc


@contextlib.contextmanager
def _known(revision: str) -> Iterator[None]:
    """Alembic's refusal of a revision it cannot find or reach, as a :class:`UsageError`
    naming the revisions there are."""
    try:
        yield
    except CommandError as exc:
        known = ", ".join(r.revision for r in history())
        raise UsageError(
            f"cannot migrate to revision {revision!r}: {exc}. Give head, base or one of the "
            f"revisions this agentledger ships ({known}; `agentledger db history` says what "
            "each does)"
        ) from exc


def current(database: Target) -> str | None:
    """The ledger's revision (``None`` for an empty database)."""
    with _engine(database) as engine, engine.connect() as conn:
        return _current(conn)


def check(database: Target) -> None:
    """Raise :class:`~agentledger.errors.SchemaVersionError` unless the ledger is at the newest
    revision (saying to run ``agentledger db upgrade``, or that the ledger is newer than this
    agentledger)."""
    revision = current(database)
    check_not_newer(revision)
    if revision != head():
        raise SchemaVersionError(
            f"the ledger is at schema revision {revision or 'base'}, not the newest "
            f"({head()}): run `agentledger db upgrade`"
        )


def history() -> list[Revision]:
    """The migrations this agentledger ships, newest first."""
    return [
        Revision(
            revision=script.revision,
            down_revision=_single(script.down_revision),
            doc=(script.doc or "").strip(),
        )
        for script in _scripts().walk_revisions()
    ]


def head() -> str:
    """The newest revision this agentledger ships."""
    heads = _scripts().get_heads()
    if len(heads) != 1:
        raise AssertionError(f"the packaged migrations have {len(heads)} heads: {heads}")
    return heads[0]


@contextlib.contextmanager
def locked(database: Target) -> Iterator[Connection]:
    """A connection to ``database`` in a write transaction that holds the migration lock
    (committed when the block ends): where migrations run. A SQLite file or directory this
    user may not write raises :class:`~agentledger.errors.LedgerReadOnlyError` before anything is
    opened or created."""
    if not isinstance(database, Engine):
        url = normalize_url(database)
        access = read_only_access(sqlite_path(url), asked=False)
        if access is not None:
            raise access.refusal("migrating the schema", _shown(url))
    with (
        _engine(database) as engine,
        engine.connect() as conn,
        conn.execution_options(**WRITE).begin(),
    ):
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
        yield conn


def alembic_config(connection: Connection | None = None, *, stdout: TextIO | None = None) -> Config:
    """An Alembic config for the packaged migrations, bound to ``connection`` if given."""
    config = Config(stdout=stdout) if stdout is not None else Config()
    with as_file(files("agentledger") / "migrations") as location:
        config.set_main_option("script_location", str(Path(location)))
    config.attributes["connection"] = connection
    return config


# --- what Ledger.open and Analytics.open need ---------------------------------------------------


def is_current(engine: Engine) -> bool:
    """Whether the database is at the newest revision; :class:`SchemaVersionError` when it is
    newer than this agentledger."""
    with engine.connect() as conn:
        revision = _current(conn)
    check_not_newer(revision)
    return revision == head()


def check_not_newer(revision: str | None) -> None:
    """Raise :class:`SchemaVersionError` when ``revision`` is not one this agentledger ships
    (the database was migrated by a newer one)."""
    _check_not_newer(revision)


def _current(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def _shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _single(down: str | Sequence[str] | None) -> str | None:
    return down if down is None or isinstance(down, str) else down[0]


@contextlib.contextmanager
def _engine(database: Target) -> Iterator[Engine]:
    """The engine of ``database``: the one given, or one made for a URL and disposed after
    (read-only where this user may not write the SQLite file or its directory)."""
    if isinstance(database, Engine):
        yield database
        return
    url = normalize_url(database)
    read_only = read_only_access(sqlite_path(url), asked=False) is not None
    engine = make_engine(url, read_only=read_only)
    try:
        yield engine
    finally:
        engine.dispose()

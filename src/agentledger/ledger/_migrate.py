"""Schema migrations: Alembic, with the scripts shipped inside the package.

``upgrade`` takes a lock first (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL),
so several processes opening one database at once migrate it once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path
from typing import TextIO

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from ..errors import SchemaVersionError
from ._engine import WRITE

VERSION_TABLE = "agentledger_version"
"""Alembic's version table, named so it cannot clash with an application's own migrations."""

_ADVISORY_LOCK = 0x616C6564  # "aled": the PostgreSQL advisory lock key for migrations


@contextlib.contextmanager
def script_location() -> Iterator[Path]:
    with as_file(files("agentledger") / "migrations") as path:
        yield Path(path)


def alembic_config(connection: Connection | None = None, *, stdout: TextIO | None = None) -> Config:
    """An Alembic config for the packaged migrations, bound to ``connection`` if given."""
    config = Config(stdout=stdout) if stdout is not None else Config()
    with script_location() as location:
        config.set_main_option("script_location", str(location))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise AssertionError(f"the packaged migrations have {len(heads)} heads: {heads}")
    return heads[0]


def current_revision(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def known_revisions() -> set[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return {revision.revision for revision in script.walk_revisions()}


def check_not_newer(revision: str | None) -> None:
    if revision is not None and revision not in known_revisions():
        raise SchemaVersionError(
            f"the database is at schema revision {revision!r}, which this agentledger does not "
            f"know (its newest is {head_revision()!r}): it was migrated by a newer agentledger. "
            "Upgrade agentledger, or open a database made by this version."
        )


@contextlib.contextmanager
def locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction that holds the migration lock."""
    with engine.connect() as conn, conn.execution_options(**WRITE).begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
        yield conn


def upgrade(engine: Engine, revision: str = "head") -> None:
    with locked(engine) as conn:
        check_not_newer(current_revision(conn))
        command.upgrade(alembic_config(conn), revision)


def downgrade(engine: Engine, revision: str) -> None:
    with locked(engine) as conn:
        check_not_newer(current_revision(conn))
        command.downgrade(alembic_config(conn), revision)


def is_current(engine: Engine) -> bool:
    with engine.connect() as conn:
        revision = current_revision(conn)
    check_not_newer(revision)
    return revision == head_revision()

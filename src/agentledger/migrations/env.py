"""Alembic environment for the ledger's schema.

Used two ways: by agentledger itself (``Ledger.open``, ``agentledger db ...``), which passes a
connection that already holds the migration lock, and by Alembic's own command line from a
checkout (``alembic upgrade head``), which reads the database from ``AGENTLEDGER_DB``.

Unlike the revisions, the environment may import the live package: it compares the database
with the current models (``alembic check``), takes the migration lock, and raises a revision's
refusal again as :class:`~agentledger.errors.MigrationError`.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from agentledger.errors import MigrationError
from agentledger.ledger import normalize_url, tables
from agentledger.ledger.migrate import VERSION_TABLE, locked
from agentledger.migrations._refusal import MigrationRefused

config = context.config

# Objects the migrations create that the models do not describe: full-text search, and
# PostgreSQL's indexes of ids in the order of their bytes (revision 0017).
_UNMODELLED = (
    "conversation_messages_fts",
    "tool_executions_fts",
    "conversations_id_prefixes",
    "agent_runs_id_prefixes",
)


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    return not (name or "").startswith(_UNMODELLED)


def _url() -> str:
    url = (
        config.attributes.get("url")
        or os.environ.get("AGENTLEDGER_DB")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise SystemExit(
            "No database: set AGENTLEDGER_DB to a SQLite path or URL, or a postgresql:// URL."
        )
    return normalize_url(url)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=tables.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
        compare_type=True,
    )
    _run_migrations()


def _run_migrations() -> None:
    """Run the migrations, a revision's refusal raised as the error callers catch (a revision
    imports nothing of the live package, so cannot raise it itself)."""
    try:
        with context.begin_transaction():
            context.run_migrations()
    except MigrationRefused as refused:
        raise MigrationError(str(refused)) from refused


def run_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=tables.metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        render_as_batch=_url().startswith("sqlite"),
        include_object=include_object,
    )
    _run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    with locked(_url()) as conn:
        _configure(conn)


if context.is_offline_mode():
    run_offline()
else:
    run_online()

"""The schema revision a database is at, read without Alembic: opening a ledger that is at the
newest revision (what nearly every open finds) reads one row of ``agentledger_version`` and
loads Alembic only when there is something to migrate (:mod:`.migrate`).

:data:`REVISIONS` names the migrations this agentledger ships, oldest first;
``tests/test_migrations.py`` keeps it in step with the migration scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SchemaVersionError

VERSION_TABLE = "agentledger_version"
"""Alembic's version table, named so it cannot clash with an application's own migrations."""

REVISIONS: tuple[str, ...] = (
    *("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010"),
    *("0011", "0012", "0013", "0014", "0015", "0016", "0017"),
)
"""The revisions this agentledger ships, oldest first."""

HEAD = REVISIONS[-1]
"""The newest revision this agentledger ships."""

Query = Callable[[str], Sequence[Sequence[Any]]]
"""Runs a statement of no parameters on the database; its rows."""

_TABLES = {
    "sqlite": (
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' "
        "ORDER BY name"
    ),
    "postgresql": (
        "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = current_schema() "
        "ORDER BY tablename"
    ),
}
"""The tables of the database (of the connection's schema on PostgreSQL), by name."""


def schema_revision(dialect: str, query: Query) -> str | None:
    """The revision the database is at (``None`` for one no migration has run on)."""
    if VERSION_TABLE not in tables(dialect, query):
        return None
    found = [str(row[0]) for row in query(f"SELECT version_num FROM {VERSION_TABLE}")]
    if len(found) > 1:
        raise SchemaVersionError(
            f"the database's {VERSION_TABLE} table holds {len(found)} revisions "
            f"({', '.join(found)}), where a ledger holds one: it was changed by hand. "
            "Restore it from a backup."
        )
    return found[0] if found else None


def tables(dialect: str, query: Query) -> list[str]:
    """The names of the database's tables."""
    return [str(row[0]) for row in query(_TABLES[dialect])]


def check_not_newer(revision: str | None) -> None:
    """Raise :class:`SchemaVersionError` when ``revision`` is not one this agentledger ships
    (the database was migrated by a newer one)."""
    if revision is not None and revision not in REVISIONS:
        raise SchemaVersionError(
            f"the database is at schema revision {revision!r}, which this agentledger does not "
            f"know (its newest is {HEAD!r}): it was migrated by a newer agentledger. "
            "Upgrade agentledger, or open a database made by this version."
        )


def not_at_head(where: str, found: Sequence[str] = ()) -> SchemaVersionError:
    """The error for a database that is not at the newest revision: run ``agentledger db
    upgrade``. Unless its tables, when ``found`` says them, are some and none the ledger's: a
    reader (which never migrates) then says so, as the file is likely another application's,
    which an upgrade would fill with the ledger's tables."""
    if found and VERSION_TABLE not in found:
        return SchemaVersionError(
            f"the database at {where} is not an agentledger ledger (its tables: "
            f"{', '.join(found)}): give the path of a ledger"
        )
    return SchemaVersionError(
        f"the database at {where} is not at the newest schema ({HEAD}); run `agentledger db "
        "upgrade`"
    )

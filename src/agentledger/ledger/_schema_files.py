"""The files of ``schema/`` the package reads at run time: the DDL of the newest revision
(``sqlite.sql``, ``postgresql.sql``), which creates an empty ledger in one transaction, and the
schema's documentation (``README.md``), which Datasette's metadata quotes.

The wheel ships them beside this module (``pyproject.toml``'s ``force-include``); a checkout
(an editable install) reads them from ``schema/`` in the source tree. Nothing here imports
SQLAlchemy or Alembic.
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources
from pathlib import Path

from ..errors import ConfigurationError

SHIPPED = {
    "README.md": "schema.md",
    "sqlite.sql": "schema-sqlite.sql",
    "postgresql.sql": "schema-postgresql.sql",
}
"""Each file of ``schema/`` the package reads, by the name the wheel gives it beside this
module."""

_REVISION = re.compile(r"^-- agentledger schema for \w+, at revision (\w+)\.$", re.MULTILINE)


def schema_file(name: str) -> str:
    """The text of ``schema/<name>``: shipped in the wheel beside this module, or read from
    the source tree when agentledger runs from a checkout."""
    found = find_schema_file(name)
    if found is None:
        raise ConfigurationError(
            f"the schema file {name} is missing: neither {SHIPPED[name]} beside "
            f"{Path(__file__).name} nor schema/{name} in a source tree; reinstall agentledger"
        )
    return found


def find_schema_file(name: str) -> str | None:
    """The text of ``schema/<name>``, or ``None`` where neither the wheel nor a source tree
    holds it (a copy of the package alone)."""
    shipped = resources.files(__package__).joinpath(SHIPPED[name])
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[3] / "schema" / name
    if checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    return None


def ddl_revision(script: str) -> str | None:
    """The revision a DDL file of ``schema/`` creates (its first line says), if it says."""
    found = _REVISION.search(script)
    return found.group(1) if found else None


def ddl_statements(script: str, dialect: str) -> list[str]:
    """The statements of a DDL file of ``schema/``, in order, each without its ``;``.

    The file puts one statement to a paragraph, but a trigger's or a function's body holds
    paragraphs of its own: a paragraph joins the next until the statement is complete (SQLite
    says when; on PostgreSQL, when its ``$$`` quotes are closed)."""
    lines = [line for line in script.splitlines() if not line.startswith("-- ")]
    statements: list[str] = []
    pending = ""
    for paragraph in "\n".join(lines).split(";\n\n"):
        pending = f"{pending};\n\n{paragraph}" if pending else paragraph.strip()
        if _complete(pending.rstrip(";\n"), dialect):
            statements.append(pending.rstrip().removesuffix(";"))
            pending = ""
    if pending.strip():
        raise ConfigurationError(
            f"the {dialect} schema file ends inside a statement: {pending[:200]!r}; "
            "reinstall agentledger"
        )
    return statements


def _complete(statement: str, dialect: str) -> bool:
    if dialect == "sqlite":
        return sqlite3.complete_statement(statement + ";")
    return statement.count("$$") % 2 == 0

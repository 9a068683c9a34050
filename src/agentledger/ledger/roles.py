"""PostgreSQL roles: the SQL that creates the application role of a ledger
(``agentledger db app-role``).

A ledger on PostgreSQL is best used by two roles. The migration role owns the tables: it runs
``agentledger db upgrade``, analytics and operators' tools, and is not subject to row-level
security. The application role is the one an app connects as: it reads and writes the
ledger's rows and nothing else (no DDL, no ``TRUNCATE``), and the row-level security policies
of revision 0010 keep each of its transactions to the tenant it set (a scoped handle,
``ledger.scoped(tenant_id=...)``, sets ``agentledger.tenant_id``). :func:`application_role_sql`
writes its SQL without connecting anywhere; the migration role (or a superuser) runs it.
"""

from __future__ import annotations

from ..errors import UsageError
from .migrate import VERSION_TABLE
from .tables import (
    ADK_SESSION_TABLES,
    GRAPH_TABLES,
    LEDGER_TABLES,
    STORE_TABLES,
    adk_states,
    forget_log,
)

__all__ = ["MAX_IDENTIFIER_BYTES", "RUN_TABLES", "application_role_sql", "quote_identifier"]

RUN_TABLES = (
    *(table.name for table in (*LEDGER_TABLES, *GRAPH_TABLES, *STORE_TABLES)),
    *(table.name for table in (*ADK_SESSION_TABLES, adk_states)),
    forget_log.name,
)
"""The tables the application role reads and writes: every table holding a tenant's rows, each
under row-level security."""

ROW_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"

MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL cuts longer identifiers short (``NAMEDATALEN - 1``): a longer name is refused
rather than silently become another."""


def application_role_sql(name: str, *, schema: str = "public", password: str | None = None) -> str:
    """The SQL that creates the application role ``name`` of the ledger in ``schema``, with
    exactly the grants it needs: ``USAGE`` on the schema, row privileges on the ledger's tables
    and ``SELECT`` on the version table (read at open). No sequence: the ledger's ids are made
    by the library, and the deletion log's trigger runs as the tables' owner. Without
    ``password`` the role gets none: a comment says how to give it one."""
    role, where = quote_identifier(name, "role name"), quote_identifier(schema, "schema")
    tables = ", ".join(f"{where}.{quote_identifier(table, 'table')}" for table in RUN_TABLES)
    version = f"{where}.{quote_identifier(VERSION_TABLE, 'table')}"
    login = "" if password is None else f" PASSWORD {_quote_literal(password)}"
    lines = [
        f"-- The application role of the agentledger ledger in schema {where}: it reads and",
        "-- writes the ledger's rows, only within the tenant each transaction sets",
        "-- (row-level security), and cannot change the schema. Run this as a superuser, or",
        "-- as the role that owns the ledger's tables (the one that runs `agentledger db",
        "-- upgrade`) if it may create roles (CREATEROLE).",
        "BEGIN;",
        f"CREATE ROLE {role} LOGIN{login} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
        "NOBYPASSRLS;",
        *_password_hint(role, password),
        f"GRANT USAGE ON SCHEMA {where} TO {role};",
        f"GRANT {ROW_PRIVILEGES} ON TABLE {tables} TO {role};",
        f"GRANT SELECT ON TABLE {version} TO {role};",
        "COMMIT;",
        *_public_schema_hint(schema),
    ]
    return "\n".join(lines) + "\n"


def _public_schema_hint(schema: str) -> list[str]:
    """PostgreSQL 14 and older let every role create tables in ``public``: say how to close it
    (it concerns every role of the database, so it is the operator's to run, not ours)."""
    if schema != "public":
        return []
    return [
        "-- On PostgreSQL 14 and older every role may create tables in schema public (this one",
        "-- too): REVOKE CREATE ON SCHEMA public FROM PUBLIC; closes that for all of them.",
    ]


def _password_hint(role: str, password: str | None) -> list[str]:
    if password is not None:
        return []
    return [
        f"-- It has no password yet: ALTER ROLE {role} PASSWORD '...'; (or print this with",
        "-- --password-env VAR, which reads it from the environment variable VAR).",
    ]


def quote_identifier(value: str, what: str = "identifier") -> str:
    """``value`` as a PostgreSQL quoted identifier (``"x; DROP TABLE t"`` stays one name);
    :class:`UsageError` for an empty one, one with a control character (a line break, NUL), or
    one longer than PostgreSQL keeps."""
    if not value:
        raise UsageError(f"the {what} is empty: give a name")
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        # PostgreSQL takes them in a quoted name (NUL aside), but a line break would end the
        # SQL comments that name the role: refused, as a scope's tenant is.
        raise UsageError(f"the {what} {value!r} holds a control character: choose another")
    if len(value.encode()) > MAX_IDENTIFIER_BYTES:
        raise UsageError(
            f"the {what} {value!r} is longer than the {MAX_IDENTIFIER_BYTES} bytes PostgreSQL "
            "keeps of a name (it would cut it short): choose a shorter one"
        )
    return '"' + value.replace('"', '""') + '"'


def _quote_literal(value: str) -> str:
    """``value`` as a PostgreSQL string literal, read the same whatever
    ``standard_conforming_strings`` says (backslashes escaped in an ``E''`` literal)."""
    if "\x00" in value:
        raise UsageError("the password holds a NUL character, which PostgreSQL refuses")
    quoted = value.replace("'", "''")
    if "\\" in quoted:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return f"'{quoted}'"

"""The ``query`` tool on PostgreSQL: one statement in a ``READ ONLY`` transaction with a
``statement_timeout``, rolled back, through a server-side cursor of which at most the row limit
is fetched.

In a tenant's scope the transaction holds the tenant in ``agentledger.tenant_id``, which the
row-level security policies of revision 0010 compare every row with. Those policies bind only
a role that neither owns the tables nor bypasses row-level security (a superuser, or a role
with ``BYPASSRLS``): for such a role a scoped query is refused, saying why. An owner's scope is
kept by the library alone (no policy compares owners), so the ``query`` tool refuses it on
PostgreSQL. A statement that names what could change ``agentledger.tenant_id`` is refused, and
one whose transaction ends with another tenant than it began with returns nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from ...errors import UsageError
from ._query import QueryLimits, QueryResult, RowCollector, over_time

TENANT_SETTING = "agentledger.tenant_id"

_BYPASS = """
SELECT r.rolsuper, r.rolbypassrls, pg_has_role(current_user, c.relowner, 'MEMBER'), current_user
FROM pg_roles r, pg_class c
WHERE r.rolname = current_user AND c.oid = to_regclass('conversations')
"""
_CURSOR = "agentledger_query"
TENANT_CHANGERS = ("set_config", "query_to_xml", "u&")
"""What a scoped query may not name: the function that changes a setting, the one that runs a
query given as text (which could call it), and the escapes that could spell either."""


def postgres_query(
    engine: Engine,
    sql: str,
    *,
    limits: QueryLimits,
    tenant_id: str | None = None,
    owner_id: str | None = None,
) -> QueryResult:
    """Run the one statement ``sql`` on the PostgreSQL ledger of ``engine``, read-only and
    bounded by ``limits``, in ``tenant_id``'s rows when given (row-level security)."""
    if owner_id is not None:
        raise UsageError(
            "the query tool cannot keep to an owner on PostgreSQL: row-level security compares "
            "tenants only. Serve the ledger with --tenant alone for SQL, or use the other tools, "
            "which keep to the owner."
        )
    import psycopg  # the postgresql extra, which a PostgreSQL ledger has

    if tenant_id is not None:
        _check_keeps_tenant(sql)
    with engine.connect() as connection:
        raw: Any = connection.connection.dbapi_connection
        try:
            return _in_transaction(raw, sql, limits, tenant_id)
        except psycopg.errors.QueryCanceled:
            raise over_time(limits) from None
        except psycopg.Error as exc:
            raise _refusal(exc) from None
        finally:
            raw.rollback()


def _in_transaction(raw: Any, sql: str, limits: QueryLimits, tenant_id: str | None) -> QueryResult:
    with raw.cursor() as cursor:
        _begin(cursor, limits, tenant_id)
    explain = sql[:7].lower() == "explain"
    with raw.cursor() if explain else raw.cursor(name=_CURSOR) as cursor:
        # A server-side cursor (DECLARE) takes one query and no data-modifying WITH, and sends
        # only the rows fetched; EXPLAIN, which it does not take, is prepared, so that several
        # statements are refused too (a COMMIT would end the read-only transaction). Without
        # parameters the text is sent as it is, '%' included.
        if explain:
            cursor.execute(sql, prepare=True)
        else:
            cursor.execute(sql)
        columns = [d.name for d in cursor.description or ()]
        rows = RowCollector(limits)
        for row in cursor.fetchmany(limits.max_rows + 1) if columns else ():
            if not rows.take(tuple(row)):
                break
    if tenant_id is not None:
        with raw.cursor() as cursor:
            _check_tenant_kept(cursor, tenant_id)
    return QueryResult(columns, rows.rows, rows.truncated)


def _refusal(exc: Exception) -> UsageError:
    text = str(exc).strip()
    if "multiple commands" in text:
        return UsageError("give one statement only; nothing was run")
    if "data-modifying" in text or "read-only transaction" in text:
        return UsageError(
            f"the query was refused: {text}. The query tool only reads; nothing was changed."
        )
    return UsageError(f"the query failed: {text}; nothing was changed")


def _begin(cursor: Any, limits: QueryLimits, tenant_id: str | None) -> None:
    cursor.execute("SET TRANSACTION READ ONLY")
    timeout = f"{max(1, round(limits.seconds * 1000))}ms"
    cursor.execute("SELECT set_config('statement_timeout', %s, true)", (timeout,))
    if tenant_id is not None:
        _check_policies_bind(cursor)
        cursor.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant_id))


def _check_policies_bind(cursor: Any) -> None:
    """Refuse a scoped query where the connected role would see every tenant's rows."""
    cursor.execute(_BYPASS)
    found = cursor.fetchone()
    if found is None:
        raise UsageError("no ledger tables here: run `agentledger db upgrade` first")
    superuser, bypass, owns, role = found
    why = (
        "is a superuser" if superuser
        else "has BYPASSRLS" if bypass
        else "owns the ledger's tables" if owns
        else None
    )  # fmt: skip
    if why is not None:
        raise UsageError(
            f"the query tool cannot keep to a tenant as role {role!r}: it {why}, so row-level "
            "security does not apply to it and every tenant's rows would be read. Serve the "
            "ledger with a URL of the application role (`agentledger db app-role` prints it)."
        )


def _check_keeps_tenant(sql: str) -> None:
    """Refuse a scoped query that names what could change ``agentledger.tenant_id`` (which
    :func:`_check_tenant_kept` checks again once its rows are read)."""
    named = [word for word in TENANT_CHANGERS if word in sql.lower()]
    if named:
        raise UsageError(
            f"the query names {named[0]!r}, which could change the tenant its rows are kept to: "
            "refused in a tenant's scope; nothing was run"
        )


def _check_tenant_kept(cursor: Any, tenant_id: str) -> None:
    cursor.execute("SELECT current_setting(%s, true)", (TENANT_SETTING,))
    found = cursor.fetchone()
    if found is None or found[0] != tenant_id:
        raise UsageError(
            f"the query changed {TENANT_SETTING}, the tenant its rows are kept to: refused, "
            "and nothing it read is returned"
        )

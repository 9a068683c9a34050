"""The ``query`` tool on PostgreSQL: one statement in a ``READ ONLY`` transaction with a
``statement_timeout``, rolled back, its rows fetched a batch at a time up to the limit.

In a tenant's scope the transaction holds the tenant in ``agentledger.tenant_id``, which the
row-level security policies of revision 0010 compare every row with. Those policies bind only
a role that neither owns the tables nor bypasses row-level security (a superuser, or a role
with ``BYPASSRLS``): for such a role a scoped query is refused, saying why. An owner's scope is
kept by the library alone (no policy compares owners), so the ``query`` tool refuses it on
PostgreSQL. A statement that changes ``agentledger.tenant_id`` itself is refused too.
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
_BATCH = 100


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
    with engine.connect() as connection:
        raw: Any = connection.connection.dbapi_connection
        try:
            with raw.cursor() as cursor:
                _begin(cursor, limits, tenant_id)
                return _run(cursor, sql, limits, tenant_id)
        finally:
            raw.rollback()


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


def _run(cursor: Any, sql: str, limits: QueryLimits, tenant_id: str | None) -> QueryResult:
    import psycopg

    rows = RowCollector(limits)
    try:
        # Prepared, so that PostgreSQL refuses several statements (a COMMIT would end the
        # read-only transaction); without parameters the text is sent as it is, '%' included.
        cursor.execute(sql, prepare=True)
        columns = [d.name for d in cursor.description or ()]
        while cursor.description is not None and _fetch(cursor, rows):
            pass
        if tenant_id is not None:
            _check_tenant_kept(cursor, tenant_id)
    except psycopg.errors.QueryCanceled:
        raise over_time(limits) from None
    except psycopg.errors.SyntaxError as exc:
        if "multiple commands" in str(exc):
            raise UsageError("give one statement only; nothing was run") from None
        raise UsageError(f"the query failed: {str(exc).strip()}; nothing was changed") from None
    except psycopg.Error as exc:
        raise UsageError(f"the query failed: {str(exc).strip()}; nothing was changed") from None
    return QueryResult(columns, rows.rows, rows.truncated)


def _fetch(cursor: Any, rows: RowCollector) -> bool:
    batch = cursor.fetchmany(_BATCH)
    return bool(batch) and all(rows.take(tuple(row)) for row in batch)


def _check_tenant_kept(cursor: Any, tenant_id: str) -> None:
    cursor.execute("SELECT current_setting(%s, true)", (TENANT_SETTING,))
    found = cursor.fetchone()
    if found is None or found[0] != tenant_id:
        raise UsageError(
            f"the query changed {TENANT_SETTING}, the tenant its rows are kept to: refused, "
            "and nothing it read is returned"
        )

"""The ``query`` tool on SQLite: a connection of its own that can only read.

The file is opened ``mode=ro`` (:func:`agentledger.ledger.read_only_uri`), with
``PRAGMA query_only`` on and no database may be attached; an authorizer allows reading and
nothing else (no write, no schema change, no PRAGMA but the schema's own, no
``load_extension``); a progress handler stops the statement at the time limit, and SQLite
refuses to build a value longer than the limit (``randomblob(1e9)``).

In a scope (a tenant, an owner), the connection's ``temp`` schema holds a view named like each
ledger table, keeping to the scope's rows (a table without ``owner_id`` through its
conversation or its run); unqualified names find those views first. The authorizer lets the
ledger's tables be read only by those views: naming ``main.conversations``, reading the
full-text index or the change log, or defining a CTE over a table is refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import UsageError
from ...ledger import read_only_uri
from ._query import QueryLimits, QueryResult, RowCollector, over_time

SCHEMA_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
     "foreign_key_list", "data_version"}
)  # fmt: skip
"""The PRAGMAs a query may use (as ``pragma_table_info('runs')`` and the like): they read the
schema, which is the same for every tenant, or (``data_version``, which the full-text index
asks for) a counter of the file's changes."""

SCHEMA_TABLES = frozenset(
    {"sqlite_master", "sqlite_schema", *(f"pragma_{name}" for name in SCHEMA_PRAGMAS)}
)
"""What a scoped query may read besides its views: the schema, and the PRAGMAs' tables."""

DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})

_OWNER_BY_CONVERSATION = "conversation_id IN (SELECT id FROM main.conversations WHERE {owner})"
_OWNER_BY_RUN = "run_id IN (SELECT id FROM main.agent_runs WHERE {owner})"
SCOPED_TABLES: dict[str, str | None] = {
    "conversations": "owner_id",
    "agent_runs": "owner_id",
    "conversation_messages": _OWNER_BY_CONVERSATION,
    "context_compactions": _OWNER_BY_CONVERSATION,
    "execution_buffer_rows": _OWNER_BY_RUN,
    "step_executions": _OWNER_BY_RUN,
    "tool_executions": _OWNER_BY_RUN,
    "forget_log": "owner_id",
    "agentledger_version": None,
}
"""The tables a scoped query sees (as views of its rows), and how each keeps to an owner:
its own ``owner_id``, or a condition through its conversation or run; ``None``: the table
holds no tenant's rows. The others (the full-text index, the change log) are not seen."""

_PROGRESS_STEPS = 1000
"""SQLite virtual machine instructions between two looks at the clock."""


def sqlite_query(
    path: Path,
    sql: str,
    *,
    limits: QueryLimits,
    tenant_id: str | None = None,
    owner_id: str | None = None,
) -> QueryResult:
    """Run the one statement ``sql`` over the SQLite ledger at ``path``, read-only and bounded
    by ``limits``, seeing only the rows of ``tenant_id`` and ``owner_id`` when given."""
    scoped = tenant_id is not None or owner_id is not None
    with _reader(path) as connection:
        if scoped:
            _create_scope_views(connection, tenant_id, owner_id)
            guard = _authorizer(_Reads(frozenset(SCOPED_TABLES), _tables(connection)))
        else:
            guard = _authorizer(None)
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(guard)
        deadline = time.monotonic() + limits.seconds
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
        connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        return _run(connection, sql, limits)


@contextlib.contextmanager
def _reader(path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        yield connection
    finally:
        connection.close()


def _run(connection: sqlite3.Connection, sql: str, limits: QueryLimits) -> QueryResult:
    rows = RowCollector(limits)
    try:
        cursor = connection.execute(sql)
        columns = [d[0] for d in cursor.description or ()]
        while (row := cursor.fetchone()) is not None and rows.take(row):
            pass
    except sqlite3.ProgrammingError as exc:
        raise UsageError(f"{exc}: give one statement only; nothing was run") from None
    except sqlite3.DatabaseError as exc:
        raise _refusal(exc, limits) from None
    return QueryResult(columns, rows.rows, rows.truncated)


def _refusal(exc: sqlite3.DatabaseError, limits: QueryLimits) -> UsageError:
    text = str(exc)
    if "interrupted" in text:
        return over_time(limits)
    if "too big" in text:
        return UsageError(
            f"the query built a value larger than {limits.max_value_bytes} bytes and was "
            "stopped; nothing was changed. Select less (substr(), length())."
        )
    if any(
        word in text
        for word in ("not authorized", "authorization denied", "prohibited", "vtable constructor")
    ):
        return UsageError(
            f"the query was refused: {text}. The query tool only reads the ledger's tables "
            "(those of its scope when the server has one); nothing was changed."
        )
    return UsageError(f"the query failed: {text}; nothing was changed")


def _create_scope_views(
    connection: sqlite3.Connection, tenant_id: str | None, owner_id: str | None
) -> None:
    for table, by_owner in SCOPED_TABLES.items():
        conditions = []
        if by_owner is not None and tenant_id is not None:
            conditions.append(f"tenant_id = {_literal(tenant_id)}")
        if by_owner is not None and owner_id is not None:
            owner = f"owner_id = {_literal(owner_id)}"
            conditions.append(owner if by_owner == "owner_id" else by_owner.format(owner=owner))
        where = " AND ".join(conditions) or "1"
        connection.execute(
            f'CREATE TEMP VIEW "{table}" AS SELECT * FROM main."{table}" WHERE {where}'
        )


def _tables(connection: sqlite3.Connection) -> frozenset[str]:
    query = "SELECT name FROM main.sqlite_master WHERE type IN ('table', 'view')"
    return frozenset(name for (name,) in connection.execute(query))


@dataclass(frozen=True)
class _Reads:
    """What a scoped query may read of the ledger's own tables (``tables``): only what its
    ``views`` read."""

    views: frozenset[str]
    tables: frozenset[str]


def _literal(value: str) -> str:
    """``value`` as an SQL string literal (a scope's id holds no control character)."""
    return "'" + value.replace("'", "''") + "'"


def _authorizer(scoped: _Reads | None) -> Callable[..., int]:
    """What a query may do: read (in a scope, the ledger's tables only through its views),
    call functions other than :data:`DENIED_FUNCTIONS`, recurse, read the schema's PRAGMAs."""

    def authorize(
        action: int, arg1: str | None, arg2: str | None, database: str | None, source: str | None
    ) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            return _may_read(scoped, arg1, database, source)
        if action == sqlite3.SQLITE_FUNCTION:
            allowed = (arg2 or "").lower() not in DENIED_FUNCTIONS
            return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in SCHEMA_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and database == "main":
            # Asked by a PRAGMA's table (pragma_table_info), which changes nothing: the schema
            # cannot be written (no writable_schema, query_only, a read-only file).
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    return authorize


def _may_read(
    scoped: _Reads | None, table: str | None, database: str | None, source: str | None
) -> int:
    # No other database can be attached. SQLite names no database for a count(*) of a whole
    # table or of a CTE: a name that is no table of the ledger's is a CTE's or a subquery's.
    if database not in ("main", "temp", None):
        return sqlite3.SQLITE_DENY
    if scoped is None or database == "temp" or table in SCHEMA_TABLES:
        return sqlite3.SQLITE_OK
    if database is None and table not in scoped.tables:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_OK if source in scoped.views else sqlite3.SQLITE_DENY

"""The analytics cache: a DuckDB file holding a copy of the ledger's tables, in DuckDB's
columnar storage, brought up to date incrementally.

The ledger stamps every row it inserts or updates with ``change_seq`` and logs every row it
deletes (revision 0008, ``schema/README.md`` "Change tracking"). A sync reads the ledger's
*mark* first, the lowest stamp a later change can have (SQLite: its counter plus one;
PostgreSQL: its snapshot's ``xmin``), then the rows stamped at or above the previous sync's
mark, and keeps the new one. Rows read twice are replaced, not doubled, so what changes during
a sync is read again next time: after a sync the copy holds every change made before its mark.
``execution_buffer_rows`` (rows that live only until their run commits), ``forget_log`` (ids
and counts, a row per forgetting) and the version table are small and read whole. Everything
happens in one DuckDB transaction: a sync that fails or dies midway leaves the previous copy as
it was, and the next one starts from its mark.

The copy's tables keep the ledger's names in the cache file's ``main`` schema; the cache is
attached as ``ledger``, so the views read ``ledger.<table>`` there as they do over the ledger
itself. In the same transaction a sync brings ``run_rollup``'s rows, kept in the cache
(``_rollup``), up to date with what it changed.

A cache made in a scope (``Analytics.open(url, cache=..., tenant_id=...)``) copies only the
scope's rows: every query a sync sends the ledger keeps to it (``_scope.condition``), so no
other row is ever written to the cache file, and the cache records its scope. Opened in
another scope (or in none), it is rebuilt in a new file, never served.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LedgerBusyError, LedgerOpenError, SchemaVersionError
from ..ledger import Scope
from ..ledger.migrate import VERSION_TABLE, head
from ..ledger.tables import CHANGE_MARK_SQL, STAMPED_TABLES
from . import _rollup
from ._duckdb import identifier, quoted
from ._scope import WHOLE_LEDGER, condition, describe

if TYPE_CHECKING:
    import duckdb

SOURCE = "source"
"""The name the ledger is attached under beside its cache."""
CACHE = "ledger"
"""The name the cache is attached under: the views read ``ledger.<table>``."""
META = "agentledger_cache"
"""The cache's own table: which ledger it copies, at which revision, up to which mark, in
which scope."""
FORMAT = 3
"""The layout of the cache file; a newer one is refused, an older one rebuilt (2: the run
rollup kept as a table, ``_rollup``; 3: the scope recorded)."""

STAMPED = STAMPED_TABLES
"""The tables read incrementally, by ``change_seq``."""
WHOLE = ("execution_buffer_rows", "forget_log", VERSION_TABLE)
"""The tables read whole at every sync (few rows: buffers of unfinished runs, one row per
forgetting, one version)."""
TABLES = STAMPED + WHOLE
ROW_GROUP_SIZE = 16_384
"""Rows per row group in the cache file (DuckDB's default is 122,880); see ``attach_cache``."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SyncResult:
    """What a sync did: ``full`` when it copied every table (``reason`` says why), the rows
    it read (``rows``) and deleted (``deleted``) per table, and how long it took."""

    full: bool
    reason: str | None
    rows: dict[str, int]
    deleted: dict[str, int]
    seconds: float


@dataclass(frozen=True)
class _Recorded:
    """What the cache says of itself (its ``agentledger_cache`` row)."""

    format: int
    ledger_id: str
    revision: str
    mark: int
    scope: Scope = WHOLE_LEDGER


def attach_cache(connection: duckdb.DuckDBPyConnection, path: str) -> None:
    """Attach the cache file at ``path`` (made when missing) as ``ledger``, writable; a file
    that is not DuckDB's, or one another process holds, is a clear error.

    The copy's rows have no order of their own (a sync replaces rows wherever they were, and
    the first one copies them as the scanner's threads read them), so the connection does not
    keep one: ``preserve_insertion_order`` off lets every thread scan, compute and hand rows
    over to Python or Arrow at once (the cache's ``run_rollup`` in about a third of the time),
    and ``ORDER BY`` still orders. Row groups of :data:`ROW_GROUP_SIZE` rows let both threads of
    a small machine share a table of 100,000 runs, which DuckDB's default size keeps in one."""
    import duckdb

    try:
        connection.execute(f"ATTACH {quoted(path)} AS {CACHE} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    except duckdb.Error as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise LedgerBusyError(
                f"the analytics cache {path} is in use by another process ({text}). Close "
                "the other analytics session, or pass another cache file."
            ) from None
        raise LedgerOpenError(
            f"the analytics cache {path} cannot be opened as a DuckDB database ({text}). "
            "Pass a path for a new cache file, or delete this one if it is an old cache: "
            "it is rebuilt from the ledger."
        ) from None
    connection.execute("SET preserve_insertion_order = false")


def sync(
    connection: duckdb.DuckDBPyConnection,
    *,
    postgres: bool,
    progress: Progress | None = None,
    scope: Scope = WHOLE_LEDGER,
) -> SyncResult:
    """Bring the cache attached as ``ledger`` up to date with the ledger attached as
    ``source``, in one transaction, copying only the rows of ``scope``."""
    say = progress or (lambda _text: None)
    started = time.perf_counter()
    recorded = _recorded(connection)
    ledger_id, mark = _source_mark(connection, postgres=postgres)
    reason = _why_rebuild(recorded, ledger_id, mark, scope)
    if reason is not None:
        say(f"copying the ledger into the cache: {reason}")
    if recorded is not None and recorded.scope != scope:
        _start_afresh(connection)
    connection.execute("BEGIN TRANSACTION")
    try:
        _rollup.start(connection, CACHE)
        if recorded is not None and reason is None:
            rows, deleted = _update(connection, recorded.mark, scope, postgres=postgres)
        else:
            rows, deleted = _copy_all(connection, say, scope), {}
            say("  the run rollup ...")
        _rollup.refresh(connection, CACHE, full=reason is not None)
        _record(connection, _Recorded(FORMAT, ledger_id, head(), mark, scope))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return SyncResult(reason is not None, reason, rows, deleted, time.perf_counter() - started)


# -- what the cache and the ledger say ------------------------------------------------------------


def _recorded(connection: duckdb.DuckDBPyConnection) -> _Recorded | None:
    """The cache's record of itself, ``None`` for a new file; a cache written by a newer
    agentledger is refused."""
    exists = connection.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
        [CACHE, META],
    ).fetchone()
    if exists is None or not exists[0]:
        return None
    # the scope's columns where they exist: a cache of format 2 has none (it is rebuilt)
    columns = [
        c
        for (c,) in connection.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND table_name = ? "
            "AND column_name IN ('tenant_id', 'owner_id')",
            [CACHE, META],
        ).fetchall()
    ]
    wanted = ["format", "ledger_id", "revision", "mark", *columns]
    row = connection.execute(f"SELECT {', '.join(wanted)} FROM {CACHE}.{META}").fetchone()
    if row is None:
        return None
    found = dict(zip(wanted, row, strict=True))
    scope = Scope(found.get("tenant_id"), found.get("owner_id"))
    recorded = _Recorded(
        int(found["format"]),
        str(found["ledger_id"]),
        str(found["revision"]),
        int(found["mark"]),
        scope,
    )
    if recorded.format > FORMAT or _revision_number(recorded.revision) > _revision_number(head()):
        raise SchemaVersionError(
            f"the analytics cache holds a copy at schema revision {recorded.revision!r} "
            f"(cache format {recorded.format}), written by a newer agentledger than this one "
            f"(revision {head()!r}, format {FORMAT}). Upgrade agentledger, or pass another "
            "cache file (or delete this one: it is rebuilt from the ledger)."
        )
    return recorded


def _revision_number(revision: str) -> int:
    return int(revision) if revision.isdigit() else -1


def _source_mark(connection: duckdb.DuckDBPyConnection, *, postgres: bool) -> tuple[str, int]:
    """The ledger's id and its mark, read before any row: every change stamped below the
    mark has been committed, so the rows read next hold it."""
    row = connection.execute(
        f"SELECT ledger_id, change_seq FROM {SOURCE}.agentledger_changes"
    ).fetchone()
    if row is None:
        raise LedgerOpenError(
            "the ledger has no row in agentledger_changes (made by revision 0008): it was "
            "damaged. Restore it from a backup."
        )
    if not postgres:
        return str(row[0]), int(row[1]) + 1
    mark_sql = CHANGE_MARK_SQL["postgresql"]
    snapshot = connection.execute(
        f"SELECT * FROM postgres_query({quoted(SOURCE)}, {quoted(mark_sql)})"
    ).fetchone()
    assert snapshot is not None
    return str(row[0]), int(snapshot[0])


def _why_rebuild(recorded: _Recorded | None, ledger_id: str, mark: int, scope: Scope) -> str | None:
    """Why the cache must be copied in full, or ``None`` when an update will do."""
    if recorded is None:
        return "a new cache"
    if recorded.ledger_id != ledger_id:
        return "the cache held a copy of another ledger; rebuilding it"
    if recorded.format != FORMAT:
        return (
            f"the cache was written in an older layout (format {recorded.format}, now "
            f"{FORMAT}); rebuilding it"
        )
    if recorded.revision != head():
        return (
            f"the cache was made at schema revision {recorded.revision!r}, older than "
            f"{head()!r}; rebuilding it"
        )
    if recorded.scope != scope:
        return (
            f"the cache held the rows of {describe(recorded.scope)}, not of {describe(scope)}; "
            "rebuilding it"
        )
    if mark < recorded.mark:
        return "the ledger is older than the cache (restored from a backup?); rebuilding it"
    return None


def _start_afresh(connection: duckdb.DuckDBPyConnection) -> None:
    """A new, empty file in place of the cache attached, for a copy in another scope: DuckDB
    reuses the blocks of replaced tables without clearing them, and the rows of the other
    scope must not linger in the file."""
    found = connection.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = ?", [CACHE]
    ).fetchone()
    assert found is not None and found[0], "the cache is a file"
    path = Path(str(found[0]))
    connection.execute(f"DETACH {CACHE}")
    for stale in (path, path.with_name(f"{path.name}.wal")):
        stale.unlink(missing_ok=True)
    attach_cache(connection, str(path))


def _record(connection: duckdb.DuckDBPyConnection, recorded: _Recorded) -> None:
    connection.execute(
        f"CREATE OR REPLACE TABLE {CACHE}.{META} (format INTEGER, ledger_id VARCHAR, "
        "revision VARCHAR, mark BIGINT, synced_at TIMESTAMP WITH TIME ZONE, "
        "tenant_id VARCHAR, owner_id VARCHAR)"
    )
    connection.execute(
        f"INSERT INTO {CACHE}.{META} VALUES (?, ?, ?, ?, now(), ?, ?)",
        [
            recorded.format,
            recorded.ledger_id,
            recorded.revision,
            recorded.mark,
            recorded.scope.tenant_id,
            recorded.scope.owner_id,
        ],
    )


# -- copying --------------------------------------------------------------------------------------


def _copy_all(connection: duckdb.DuckDBPyConnection, say: Progress, scope: Scope) -> dict[str, int]:
    """Every table copied whole (the scope's rows of it), through the scanner (fast, and typed
    as the direct attach types it), in whatever order the scanner's threads read the rows
    (``attach_cache`` lets them: a table's rows have no order of their own, and keeping the
    ledger's costs time)."""
    rows: dict[str, int] = {}
    for number, table in enumerate(TABLES, start=1):
        say(f"  [{number}/{len(TABLES)}] {table} ...")
        connection.execute(
            f"CREATE OR REPLACE TABLE {CACHE}.{table} AS "
            f"SELECT * FROM {_source(connection, table)}{_scoped(connection, scope, table)}"
        )
        counted = connection.execute(f"SELECT count(*) FROM {CACHE}.{table}").fetchone()
        rows[table] = int(counted[0]) if counted else 0
        say(f"  [{number}/{len(TABLES)}] {table}: {rows[table]:,} rows")
    return rows


def _update(
    connection: duckdb.DuckDBPyConnection, since: int, scope: Scope, *, postgres: bool
) -> tuple[dict[str, int], dict[str, int]]:
    """The rows stamped at or above ``since`` replaced or added, the rows deleted since
    removed, and the whole tables read again (the rows of ``scope`` only)."""
    rows: dict[str, int] = {}
    for table in STAMPED:
        changed = f"change_seq >= {int(since)}"
        if not scope.everything:
            changed += f" AND {condition(scope, table, identifier)}"
        rows[table] = _replace_changed(connection, table, changed, postgres=postgres)
    deleted = _apply_deletions(connection, since, postgres=postgres)
    for table in WHOLE:
        connection.execute(f"DELETE FROM {CACHE}.{table}")
        connection.execute(
            f"INSERT INTO {CACHE}.{table} "
            f"SELECT * FROM {_source(connection, table)}{_scoped(connection, scope, table)}"
        )
        counted = connection.execute(f"SELECT count(*) FROM {CACHE}.{table}").fetchone()
        rows[table] = int(counted[0]) if counted else 0
    return rows, deleted


def _replace_changed(
    connection: duckdb.DuckDBPyConnection, table: str, changed: str, *, postgres: bool
) -> int:
    """Stage the changed rows of ``table`` (those ``changed`` picks, a condition the ledger's
    database runs) in the cache (read once), then replace them."""
    staged = f"{CACHE}._staged_{table}"
    query = _changed_rows(connection, table, changed, postgres=postgres)
    connection.execute(f"CREATE OR REPLACE TABLE {staged} AS {query}")
    replaced = f"id IN (SELECT id FROM {staged})"
    _rollup.note(connection, CACHE, table, replaced)  # as they were, and below as they are
    connection.execute(f"DELETE FROM {CACHE}.{table} WHERE {replaced}")
    connection.execute(f"INSERT INTO {CACHE}.{table} SELECT * FROM {staged}")
    _rollup.note(connection, CACHE, table, replaced)
    counted = connection.execute(f"SELECT count(*) FROM {staged}").fetchone()
    connection.execute(f"DROP TABLE {staged}")
    return int(counted[0]) if counted else 0


def _apply_deletions(
    connection: duckdb.DuckDBPyConnection, since: int, *, postgres: bool
) -> dict[str, int]:
    query = f"SELECT table_name, row_id FROM agentledger_deletions WHERE change_seq >= {int(since)}"
    found = connection.execute(
        f"SELECT table_name, list(row_id) FROM {_passthrough(query, postgres=postgres)} "
        "GROUP BY table_name"
    ).fetchall()
    deleted: dict[str, int] = {}
    for table, ids in found:
        if table in STAMPED:
            _rollup.note(connection, CACHE, table, "list_contains(?, id)", [ids])
            connection.execute(f"DELETE FROM {CACHE}.{table} WHERE list_contains(?, id)", [ids])
            deleted[table] = len(ids)
    return deleted


def _changed_rows(
    connection: duckdb.DuckDBPyConnection, table: str, where: str, *, postgres: bool
) -> str:
    """A query for ``table``'s rows matching ``where``, run by the ledger's own database (so
    its index on ``change_seq`` answers it), with the columns and types of the copy.

    SQLite hands every value of such a query over as text: floats are written with 17
    significant digits, which read back to the same double."""
    columns = connection.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = ? AND schema_name = 'main' AND table_name = ? "
        "ORDER BY column_index",
        [CACHE, table],
    ).fetchall()
    if postgres:
        inner = ", ".join(identifier(name) for name, _ in columns)
    else:
        inner = ", ".join(_sqlite_text(name, kind) for name, kind in columns)
    source = _passthrough(
        f"SELECT {inner} FROM {identifier(table)} WHERE {where}", postgres=postgres
    )
    outer = ", ".join(
        f"CAST({identifier(name)} AS {kind}) AS {identifier(name)}" for name, kind in columns
    )
    return f"SELECT {outer} FROM {source}"


def _sqlite_text(name: str, kind: str) -> str:
    column = identifier(name)
    if kind in ("DOUBLE", "FLOAT", "REAL"):
        return (
            f"CASE WHEN {column} IS NULL THEN NULL ELSE printf('%!.17g', {column}) END AS {column}"
        )
    return column


def _passthrough(query: str, *, postgres: bool) -> str:
    """``query`` run by the ledger's database itself, as a DuckDB table function."""
    function = "postgres_query" if postgres else "sqlite_query"
    return f"{function}({quoted(SOURCE)}, {quoted(query)})"


def _scoped(connection: duckdb.DuckDBPyConnection, scope: Scope, table: str) -> str:
    """`` WHERE ...`` keeping the rows of the ledger's ``table`` read through the scanner to
    ``scope`` (nothing for the whole ledger)."""
    if scope.everything:
        return ""
    return f" WHERE {condition(scope, table, lambda name: _source(connection, name))}"


def _source(connection: duckdb.DuckDBPyConnection, table: str) -> str:
    """The ledger's ``table`` through the scanner, in whichever schema it lives."""
    row = connection.execute(
        "SELECT schema_name FROM duckdb_tables() WHERE database_name = ? AND table_name = ?",
        [SOURCE, table],
    ).fetchone()
    schema = "main" if row is None else str(row[0])
    return f"{SOURCE}.{identifier(schema)}.{identifier(table)}"

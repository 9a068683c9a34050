"""Parquet files of the ledger's tables, for other engines: one folder per table, partitioned
by day, that one pattern reads back (:func:`read_back`), whatever the table's layout."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import _cache, _rollup
from ._duckdb import identifier, quoted

if TYPE_CHECKING:  # imported when first used: DuckDB comes with the analytics extra
    import duckdb

_TIMESTAMP_COLUMNS = ("started_at", "created_at", "forgotten_at")
EMPTY_FOLDER = "empty"
"""Where a table with no rows is exported: one file of no rows beside no day folder."""
_SKIPPED_TABLES = (
    "conversation_messages_fts",
    "tool_executions_fts",
    "agentledger_changes",
    _cache.META,
    _rollup.TABLE,
    "graph_",
    "stored_",
    "adk_",
)
"""Not exported: full-text search, the ledger's change counter and the cache's bookkeeping,
the rollup the cache keeps (the views give it), and the frameworks' own state: the graph
frameworks' checkpoints, the conversation stores' records and entries and ADK's sessions, read
back through their saver, store or session service (the messages and steps they hold are in the
ledger's tables). ``forget_log`` is (ids and counts, no content), and so is the log of deleted
rows."""
DELETIONS = "agentledger_deletions"
_DELETIONS_COLUMNS = (
    ("id", "BIGINT"),
    ("table_name", "VARCHAR"),
    ("row_id", "VARCHAR"),
    ("change_seq", "BIGINT"),
)
"""The log of deleted rows (revision 0008), as its export holds it where there is no log to
read: in a scope (its rows name no tenant, so it cannot be told whose they are) and from a
cache (which applies the deletions rather than keeping them)."""
LEFT_OUT = (
    "the full-text index, the change counter (agentledger_changes) and the frameworks' own "
    "state (graph_*, stored_*, adk_*); in a scope or from a cache, the deletion log "
    "(agentledger_deletions) holds no rows"
)
"""What :meth:`Analytics.export_parquet` leaves out, in words."""


def read_back(directory: str | os.PathLike[str], table: str) -> str:
    """The ``read_parquet`` call that reads ``table`` of an export under ``directory`` back in
    DuckDB, whatever its layout: day partitions (their ``day`` column from the folders' names),
    one file of no rows, or one file for a table with no time column. The one pattern for
    every table: ``directory/<table>/**/*.parquet``."""
    return f"read_parquet({quoted(f'{Path(directory).as_posix()}/{table}/**/*.parquet')})"


def write_parquet(
    connection: duckdb.DuckDBPyConnection, database: str, directory: str | os.PathLike[str]
) -> list[Path]:
    """Every table of the attached ``database`` as Parquet under ``directory/<table>/`` (what
    :meth:`Analytics.export_parquet` says); the files written."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tables = list(_tables(connection, database))
    for table in tables:
        _fresh_folder(target / table.name)
        _copy(connection, table, target / table.name)
        written.extend(sorted((target / table.name).rglob("*.parquet")))
    if DELETIONS not in {table.name for table in tables}:
        written.append(_no_deletions(connection, target / DELETIONS))
    return sorted(written, key=lambda path: path.relative_to(target).parts[0])


def _fresh_folder(folder: Path) -> None:
    """A previous export's days would mix with this one's."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def _no_deletions(connection: duckdb.DuckDBPyConnection, folder: Path) -> Path:
    """The deletion log with its columns and no rows, so that every export holds every table
    the one pattern reads."""
    _fresh_folder(folder)
    file = folder / "data.parquet"
    columns = ", ".join(f"CAST(NULL AS {kind}) AS {name}" for name, kind in _DELETIONS_COLUMNS)
    connection.execute(f"COPY (SELECT {columns} LIMIT 0) TO {quoted(str(file))} (FORMAT parquet)")
    return file


def _tables(connection: duckdb.DuckDBPyConnection, database: str) -> Iterator[_Table]:
    """The ledger's own tables (not the catalog's)."""
    rows = connection.execute(
        "SELECT schema_name, table_name, list(column_name ORDER BY column_index), "
        "list(data_type ORDER BY column_index) FROM duckdb_columns() "
        "WHERE database_name = ? AND schema_name IN ('main', 'public') "
        "GROUP BY schema_name, table_name ORDER BY table_name",
        [database],
    ).fetchall()
    for schema, table, columns, types in rows:
        if not table.startswith(_SKIPPED_TABLES):
            yield _Table(database, schema, table, tuple(zip(columns, types, strict=True)))


def _copy(connection: duckdb.DuckDBPyConnection, table: _Table, target: Path) -> None:
    columns, source, time = table.select_list(), table.source(), table.time_column()
    if time is None:
        target.mkdir(exist_ok=True)
        file = quoted(str(target / "data.parquet"))
        copy = f"COPY (SELECT {columns} FROM {source}) TO {file} (FORMAT parquet)"
    else:
        day = f"CAST(CAST({identifier(time)} AS TIMESTAMP) AS DATE) AS day"
        copy = (
            f"COPY (SELECT {columns}, {day} FROM {source}) TO {quoted(str(target))} "
            "(FORMAT parquet, PARTITION_BY (day), OVERWRITE_OR_IGNORE)"
        )
    connection.execute(copy)
    if time is not None and not any(target.rglob("*.parquet")):
        _copy_empty(connection, table, target, day)


def _copy_empty(
    connection: duckdb.DuckDBPyConnection, table: _Table, target: Path, day: str
) -> None:
    """A table with no rows as one file of no rows under ``target/empty/``: a partitioned
    COPY of no rows writes no file, and reading ``<table>/**/*.parquet`` would fail with "No
    files found". The file holds the ``day`` column itself (a ``DATE``, as the day
    folders give it) and its folder is no partition, so DuckDB, Polars and pyarrow read
    it with the same columns as a table that has rows."""
    folder = target / EMPTY_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    file = quoted(str(folder / "data_0.parquet"))
    connection.execute(
        f"COPY (SELECT {table.select_list()}, {day} FROM {table.source()} LIMIT 0) "
        f"TO {file} (FORMAT parquet)"
    )


@dataclass(frozen=True)
class _Table:
    """A ledger table to export: the database it is attached as, its schema, name, and
    columns with their DuckDB types."""

    database: str
    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]

    def source(self) -> str:
        return f"{identifier(self.database)}.{identifier(self.schema)}.{identifier(self.name)}"

    def select_list(self) -> str:
        """Every column; timestamps in UTC without a zone, so both backends export alike."""
        return ", ".join(
            f"CAST({identifier(c)} AS TIMESTAMP) AS {identifier(c)}"
            if t == "TIMESTAMP WITH TIME ZONE"
            else identifier(c)
            for c, t in self.columns
        )

    def time_column(self) -> str | None:
        names = [c for c, _ in self.columns]
        return next((c for c in _TIMESTAMP_COLUMNS if c in names), None)

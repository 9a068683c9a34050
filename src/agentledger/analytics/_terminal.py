"""The report and the export summary drawn for the terminal (rich), every text from the ledger
as plain text, never markup, its control characters written as escapes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from .._values import terminal_text
from .._width import FittedColumn, FittedTable
from ._duckdb import require_duckdb
from ._format import count, time_text
from ._parquet import LEFT_OUT, read_back
from ._report import Column, Report, ReportTable

if TYPE_CHECKING:
    import duckdb


def render_terminal(report: Report) -> Group:
    """The report as rich renderables: a header, the completeness line, then the tables.

    Every text from the ledger goes in as plain ``Text``, never as markup."""
    style = "green" if report.completeness.complete else "bold yellow"
    parts: list[RenderableType] = [
        # The time before the source, whose length is anyone's: a date never wraps.
        Text(f"agentledger report · {time_text(report.generated_at)} UTC · {report.source}"),
        Text(terminal_text(report.completeness.summary()), style=style),
    ]
    for table in report.tables:
        parts += [Text(""), *rich_table(table)]
    return Group(*parts)


def rich_table(table: ReportTable) -> list[RenderableType]:
    """The table, showing the columns that fit the terminal (:class:`FittedTable`), and its
    note under it when it has one; with no rows, a line that says so."""
    columns = [
        FittedColumn(
            column.name,
            priority=0 if column.identifier else column.priority,
            min_width=None if column.identifier else column.min_width,
            justify="right" if column.numeric else "left",
        )
        for column in table.columns
    ]
    rows = [[Text(terminal_text(cell)) for cell in row] for row in table.rows]
    empty = f"{table.title}: nothing recorded yet"
    drawn = FittedTable(columns, rows, title=Text(table.title), empty=empty)
    return [drawn, Text(table.note, style="dim")] if table.note else [drawn]


# -- export summary ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedTable:
    """What :func:`export_parquet` wrote for one table: day partitions, files and rows."""

    table: str
    days: int
    files: int
    rows: int


def summarize_export(
    directory: str | os.PathLike[str], files: Iterable[Path]
) -> tuple[ExportedTable, ...]:
    """Per table, the Parquet ``files`` under ``directory``: partitions, files, rows (read back
    from the files)."""
    require_duckdb()
    import duckdb

    root = Path(directory)
    by_table: dict[str, list[Path]] = {}
    for file in files:
        by_table.setdefault(file.relative_to(root).parts[0], []).append(file)
    with duckdb.connect() as connection:
        return tuple(
            ExportedTable(table, _days(paths), len(paths), _row_count(connection, paths))
            for table, paths in sorted(by_table.items())
        )


def _days(paths: Sequence[Path]) -> int:
    return len({p.parent.name for p in paths if p.parent.name.startswith("day=")})


def _row_count(connection: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> int:
    row = connection.execute(
        "SELECT count(*) FROM read_parquet(?)", [[str(p) for p in paths]]
    ).fetchone()
    return int(row[0]) if row else 0


def render_export(directory: str | os.PathLike[str], tables: Sequence[ExportedTable]) -> Group:
    """The export summary for the terminal, and how to read the files back."""
    columns = (
        Column("table"),
        Column("days", True),
        Column("files", True),
        Column("rows", True),
    )
    cells = tuple((t.table, count(t.days), count(t.files), count(t.rows)) for t in tables)
    files, rows = sum(t.files for t in tables), sum(t.rows for t in tables)
    where = Path(directory).as_posix()
    table = ReportTable("Parquet files by table", columns, cells)
    return Group(
        *rich_table(table),
        Text(f"wrote {files:,} files ({rows:,} rows of {len(tables)} tables) under {where}"),
        Text(f"Left out: {LEFT_OUT}, which serve the ledger itself."),
        Text("Read any table back with DuckDB (Polars: the same path, hive_partitioning=True):"),
        Text(f"  SELECT * FROM {read_back(directory, TABLE_PLACEHOLDER)}"),
    )


TABLE_PLACEHOLDER = "<table>"
"""Where the table's name goes in the read-back pattern the export summary prints."""

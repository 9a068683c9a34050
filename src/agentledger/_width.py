"""Output that fits the terminal it is in: how wide every console of the command line, the
demo and the analytics report is (:func:`fitted_console`), and tables that show, at that
width, the columns that fit, the most important first, rather than cutting every column
(:class:`FittedTable`).

It loads rich only: it is on the path of every command that prints, which must start fast.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

if TYPE_CHECKING:
    from rich.table import Table

WIDE = 240
"""Width of the output when it is neither a terminal nor given by ``COLUMNS`` (a pipe, a
file): a listing saved or piped to grep keeps every column and each row on one line, which
no width would choose for it. Give ``COLUMNS`` to fit a narrower reader; scripts read
``--json``."""


def output_width(*, terminal: bool) -> int:
    """How wide the output is: ``COLUMNS`` when it holds a whole number above 0, else the
    terminal's width when the output is a ``terminal``, else :data:`WIDE`."""
    if terminal or _columns_given():
        return shutil.get_terminal_size().columns  # COLUMNS first, then the terminal's
    return WIDE


def _columns_given() -> bool:
    try:
        return int(os.environ.get("COLUMNS", "")) > 0
    except ValueError:
        return False


def fitted_console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (standard output by default) as wide as :func:`output_width`
    says: every console that prints for a person is made here."""
    console = Console(file=file)
    console.width = output_width(terminal=console.is_terminal)
    return console


# -- tables --------------------------------------------------------------------------------------

Justify = Literal["left", "right"]


@dataclass(frozen=True)
class FittedColumn:
    """A column of a :class:`FittedTable`."""

    header: str
    priority: int = 0
    """Which columns stay when not all fit: those of priority 0 always; then 1, 2, ... while
    they fit (among equals, the leftmost first); once one does not, neither do the rest."""
    min_width: int | None = None
    """``None``: the column is as wide as its widest cell, which is never wrapped nor cut (ids,
    dates, numbers, names); a width: text that wraps to fit, never narrower than this."""
    justify: Justify = "left"


_EDGE = 1
"""Characters a table takes beside its columns: its left edge."""
_AROUND = 3
"""Characters a table takes around each column: a space either side and the border after it."""


class FittedTable:
    """A table that shows the columns that fit the width it is printed at: the columns of
    priority 0 always, then the others by priority while they fit, each whole column as wide as
    its widest cell. Text columns wrap; nothing is cut to an ellipsis. With no rows, ``empty``
    (when given) is printed as one line instead of an empty table."""

    def __init__(
        self,
        columns: Sequence[FittedColumn],
        rows: Iterable[Sequence[str | Text]],
        *,
        title: str | Text | None = None,
        empty: str | None = None,
    ) -> None:
        self.columns = tuple(columns)
        self.rows = [tuple(_text(cell) for cell in row) for row in rows]
        self.title = title
        self.empty = empty

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.rows and self.empty is not None:
            yield Text(self.empty)
        else:
            yield self.table(options.max_width)

    def table(self, width: int) -> Table:
        """The table as drawn ``width`` characters wide."""
        from rich.table import Table  # when a table is drawn: `agentledger --help` draws none

        widths = fit_columns(self.columns, self.rows, width)
        table = Table(title=self.title, title_justify="left")
        for at, column_width in widths.items():
            column = self.columns[at]
            table.add_column(
                column.header, justify=column.justify, width=column_width, overflow="fold"
            )
        for row in self.rows:
            table.add_row(*(_cell(row[at], self.columns[at]) for at in widths))
        return table


def _text(cell: str | Text) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def _cell(cell: Text, column: FittedColumn) -> Text:
    """A whole column's cell never wraps (its column is as wide as it); a text cell folds a
    word too long for its column rather than cutting it."""
    drawn = cell.copy()
    drawn.no_wrap = column.min_width is None
    return drawn


def fit_columns(
    columns: Sequence[FittedColumn], rows: Sequence[Sequence[Text]], width: int
) -> dict[int, int]:
    """The columns shown at ``width`` (by their positions, in order) and the width of each.

    Each column needs its least width (a whole column its widest cell, a text column its
    ``min_width``; either at least its header's longest word, the header wrapping) and would
    take its natural one (the widest cell, the header on one line). Columns are taken by
    priority while they fit, and a column never squeezes one of a higher priority below its
    natural width; the room left widens them toward their natural widths, by priority again."""
    least = [_least(column, at, rows) for at, column in enumerate(columns)]
    natural = [max(least[at], _widest(at, rows), len(c.header)) for at, c in enumerate(columns)]
    shown: list[int] = []
    for at in sorted(range(len(columns)), key=lambda at: (columns[at].priority, at)):
        priority = columns[at].priority
        needed = [natural[i] if columns[i].priority < priority else least[i] for i in shown]
        if priority > 0 and _taken([*needed, least[at]]) > width:
            break  # and the columns after it wait for a wider terminal too
        shown.append(at)
    room = width - _taken([least[at] for at in shown])
    widths = dict.fromkeys(sorted(shown), 0)
    for at in shown:
        grow = max(0, min(room, natural[at] - least[at]))
        widths[at], room = least[at] + grow, room - grow
    return widths


def _least(column: FittedColumn, at: int, rows: Sequence[Sequence[Text]]) -> int:
    word = max((len(w) for w in column.header.split()), default=1)
    if column.min_width is None:
        return max(word, _widest(at, rows))
    return max(word, min(column.min_width, _widest(at, rows)))


def _widest(at: int, rows: Sequence[Sequence[Text]]) -> int:
    return max((line.cell_len for row in rows for line in row[at].split("\n")), default=0)


def _taken(widths: Iterable[int]) -> int:
    """How wide a table is whose columns are ``widths`` wide."""
    return _EDGE + sum(width + _AROUND for width in widths)

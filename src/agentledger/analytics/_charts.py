"""Charts for the report: SVG drawn in Python, with no JavaScript and nothing fetched.

Two kinds: :func:`stacked_bars` (vertical bars over time buckets, stacked by series, one or
more panels side by side) and :func:`horizontal_bars` (a labelled row per item, with grouped or
overlaid bars). Every text is escaped, and every bar carries a ``<title>``, which browsers show
as a tooltip. Colours are given by the caller (:func:`colours` gives each name one, so that the
same agent is the same colour in every chart), and labels are given the room they need.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
"""Colours of named things (agents, models), in order: Tableau 10 without its grey, which
:data:`OTHER` keeps (distinguishable, and kind to most colour blindness)."""
OTHER = "#bab0ac"
"""The colour of the series that sums the smallest ones ("3 others")."""

WIDTH = 960
MARGIN = 16
CHAR_WIDTH = 6.6
"""About how wide a character of the 12px sans-serif text is: for truncating labels."""

SMALL_CHAR_WIDTH = 6.1
"""The same for the 11px text of notes, legends and axes."""

_TITLE_HEIGHT = 28
_PLOT_HEIGHT = 220
_AXIS_HEIGHT = 40
_LEGEND_ROW = 18
_LABEL_WIDTH = (120, 400)
"""The narrowest and widest room for the labels before the bars: as wide as the longest label
needs, within these bounds."""
_NOTE_WIDTH = (60, 330)
"""Likewise for the notes after the bars."""
_INDENT = 14
_MAX_SERIES = 8

Format = Callable[[float], str]


@dataclass(frozen=True)
class Series:
    """One colour of a stacked bar chart: its name, a value per category and its colour."""

    name: str
    values: tuple[float, ...]
    colour: str


@dataclass(frozen=True)
class Panel:
    """One stacked bar chart over the chart's categories: a title and its series."""

    title: str
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Bar:
    """A horizontal bar: its value, its colour and the tooltip it shows."""

    value: float
    colour: str
    tooltip: str


@dataclass(frozen=True)
class Row:
    """A row of a horizontal bar chart: a label indented by ``depth``, bars, a note after them;
    ``link``, an anchor of the page the label leads to (``""``: none)."""

    label: str
    bars: tuple[Bar, ...]
    note: str = ""
    depth: int = 0
    link: str = ""


def colours(names: Iterable[str]) -> dict[str, str]:
    """A colour for each of ``names``, in the order given (the palette again after nine): one
    mapping for every chart, so that a name is the same colour wherever it is drawn."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(names))}


def tint(colour: str, amount: float = 0.55) -> str:
    """``colour`` (``#rrggbb``) mixed with white by ``amount``: its lighter shade."""
    channels = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in channels)


# -- stacked bars ------------------------------------------------------------------------------


def stacked_bars(
    title: str,
    categories: Sequence[str],
    panels: Sequence[Panel],
    *,
    x_label: str,
    y_label: str,
    fmt: Format,
) -> str:
    """Panels side by side, each a bar per category stacked by series, with its legend."""
    count = max(len(panels), 1)
    width = (WIDTH - 2 * MARGIN - 24 * (count - 1)) / count
    shown = [Panel(p.title, top_series(p.series)) for p in panels]
    legend = max((_legend_height(_entries(p), width) for p in shown), default=0)
    height = _TITLE_HEIGHT + 24 + _PLOT_HEIGHT + _AXIS_HEIGHT + legend + MARGIN
    parts = [_chart_title(title)]
    for index, panel in enumerate(shown):
        left = MARGIN + index * (width + 24)
        parts.append(_stacked_panel(panel, categories, left, width, x_label, y_label, fmt))
    return _svg(title, height, parts)


def top_series(series: Sequence[Series], limit: int = _MAX_SERIES) -> tuple[Series, ...]:
    """The ``limit - 1`` largest series by total, the rest summed into one "other" series."""
    ranked = sorted(series, key=lambda s: -sum(s.values))
    if len(ranked) <= limit:
        return tuple(ranked)
    kept, rest = ranked[: limit - 1], ranked[limit - 1 :]
    summed = tuple(sum(values) for values in zip(*(s.values for s in rest), strict=True))
    return (*kept, Series(f"{len(rest)} others", summed, OTHER))


def _stacked_panel(
    panel: Panel,
    categories: Sequence[str],
    left: float,
    width: float,
    x_label: str,
    y_label: str,
    fmt: Format,
) -> str:
    plot_left, plot_top = left + 64, _TITLE_HEIGHT + 24
    plot_width = width - 64
    totals = [sum(s.values[i] for s in panel.series) for i in range(len(categories))]
    ticks = nice_ticks(max(totals, default=0.0))
    scale = _PLOT_HEIGHT / ticks[-1]
    parts = [_text(left, _TITLE_HEIGHT + 12, panel.title, weight="bold")]
    parts += _y_axis(plot_left, plot_top, plot_width, ticks, scale, fmt)
    parts.append(_rotated_label(left + 12, plot_top + _PLOT_HEIGHT / 2, y_label))
    parts += _stacks(panel.series, categories, plot_left, plot_top, plot_width, scale, fmt)
    parts += _x_labels(categories, plot_left, plot_top + _PLOT_HEIGHT, plot_width)
    axis_y = plot_top + _PLOT_HEIGHT + 34
    parts.append(_text(plot_left + plot_width / 2, axis_y, x_label, anchor="middle"))
    parts += _legend(_entries(panel), left, axis_y + 16, width)
    return "".join(parts)


def _entries(panel: Panel) -> list[tuple[str, str]]:
    return [(s.name, s.colour) for s in panel.series]


def _stacks(
    series: Sequence[Series],
    categories: Sequence[str],
    plot_left: float,
    plot_top: float,
    plot_width: float,
    scale: float,
    fmt: Format,
) -> list[str]:
    slot = plot_width / max(len(categories), 1)
    bar_width = min(max(slot * 0.7, 1.0), 80.0)
    parts: list[str] = []
    for index, category in enumerate(categories):
        x = plot_left + index * slot + (slot - bar_width) / 2
        base = plot_top + _PLOT_HEIGHT
        for one in series:
            value = one.values[index]
            if value <= 0:
                continue
            height = value * scale
            base -= height
            tip = f"{category} · {one.name}: {fmt(value)}"
            parts.append(_rect(x, base, bar_width, height, one.colour, tip))
    return parts


def _y_axis(
    left: float, top: float, width: float, ticks: Sequence[float], scale: float, fmt: Format
) -> list[str]:
    parts = []
    for tick in ticks:
        y = top + _PLOT_HEIGHT - tick * scale
        parts.append(_line(left, y, left + width, y, "#e3e3e3"))
        parts.append(_text(left - 6, y + 4, fmt(tick), anchor="end", size=11))
    parts.append(_line(left, top, left, top + _PLOT_HEIGHT, "#888"))
    return parts


def _x_labels(categories: Sequence[str], left: float, bottom: float, width: float) -> list[str]:
    if not categories:
        return []
    slot = width / len(categories)
    longest = max(len(c) for c in categories) * CHAR_WIDTH + 12
    stride = max(1, math.ceil(longest / slot))
    parts = [_line(left, bottom, left + width, bottom, "#888")]
    for index in range(0, len(categories), stride):
        x = left + (index + 0.5) * slot
        parts.append(_text(x, bottom + 15, categories[index], anchor="middle", size=11))
    return parts


# -- horizontal bars ---------------------------------------------------------------------------


def horizontal_bars(
    title: str,
    rows: Sequence[Row],
    *,
    legend: Sequence[tuple[str, str]],
    x_label: str,
    fmt: Format,
    overlay: bool = False,
    maximum: float | None = None,
) -> str:
    """A row per item: its label, its bars (one under the other, or ``overlay``: drawn over
    each other, widest first) and a note. ``legend`` names the colours. With ``maximum``
    the scale is fixed and every row gets a light track to it (for rates). The labels and
    the notes get the room their longest needs (within bounds), the bars the rest."""
    bars_per_row = 1 if overlay else max((len(r.bars) for r in rows), default=1)
    row_height = 6 + 8 * bars_per_row if bars_per_row > 1 else 22
    top = _TITLE_HEIGHT + _legend_height(legend, WIDTH - 2 * MARGIN) + 10
    height = top + row_height * len(rows) + _AXIS_HEIGHT + MARGIN
    label_width = _room((_INDENT * r.depth + len(r.label) * CHAR_WIDTH for r in rows), _LABEL_WIDTH)
    note_width = _room((len(r.note) * SMALL_CHAR_WIDTH for r in rows), _NOTE_WIDTH)
    plot_left = MARGIN + label_width
    plot_width = WIDTH - plot_left - note_width - MARGIN
    largest = max((b.value for r in rows for b in r.bars), default=0.0)
    ticks = nice_ticks(maximum if maximum is not None else largest)
    scale = plot_width / ticks[-1]
    parts = [_chart_title(title)]
    parts += _legend(legend, MARGIN, _TITLE_HEIGHT + 4, WIDTH - 2 * MARGIN)
    for index, row in enumerate(rows):
        y = top + index * row_height
        place = (y, row_height, plot_left, plot_width, label_width, note_width)
        parts += _bar_row(row, place, scale, maximum, overlay)
    bottom = top + row_height * len(rows)
    parts += _x_axis(plot_left, bottom, plot_width, ticks, scale, fmt)
    parts.append(_text(plot_left + plot_width / 2, bottom + 34, x_label, anchor="middle"))
    return _svg(title, height, parts)


def _room(widths: Iterable[float], bounds: tuple[int, int]) -> float:
    """The room the widest of ``widths`` needs, with a gap after it, within ``bounds``."""
    narrowest, widest = bounds
    return min(max(max(widths, default=0.0) + 12, narrowest), widest)


_Place = tuple[float, float, float, float, float, float]
"""Where a row goes: its top, height, the bars' left and width, the labels' and notes' room."""


def _bar_row(
    row: Row, place: _Place, scale: float, maximum: float | None, overlay: bool
) -> list[str]:
    y, height, plot_left, plot_width, label_width, note_width = place
    indent = _INDENT * row.depth
    middle = y + height / 2 + 4
    label = _label(MARGIN + indent, middle, row.label, label_width - indent - 8)
    parts = [_linked(label, row.link)]
    if maximum is not None:
        tip = row.bars[0].tooltip if row.bars else row.label
        parts.append(_rect(plot_left, y + 3, plot_width, height - 6, "#eeeeee", tip))
    thickness = (height - 6) if overlay else (height - 6) / max(len(row.bars), 1)
    for index, bar in enumerate(row.bars):
        bar_y = y + 3 + (0 if overlay else index * thickness)
        width = min(bar.value * scale, plot_width)
        if width > 0:
            parts.append(_rect(plot_left, bar_y, width, thickness, bar.colour, bar.tooltip))
    note = _label(plot_left + plot_width + 8, middle, row.note, note_width - 8, size=11)
    parts.append(note)
    return parts


def _linked(element: str, link: str) -> str:
    """``element`` inside a link to the page's anchor ``link`` (none when it is empty)."""
    return f'<a href="#{escape(link)}">{element}</a>' if link else element


def _x_axis(
    left: float, bottom: float, width: float, ticks: Sequence[float], scale: float, fmt: Format
) -> list[str]:
    parts = [_line(left, bottom, left + width, bottom, "#888")]
    for tick in ticks:
        x = left + tick * scale
        parts.append(_line(x, bottom, x, bottom + 4, "#888"))
        parts.append(_text(x, bottom + 16, fmt(tick), anchor="middle", size=11))
    return parts


# -- scale -------------------------------------------------------------------------------------


def nice_ticks(maximum: float, count: int = 4) -> list[float]:
    """Round axis ticks from 0 to at least ``maximum``: steps of 1, 2, 2.5 or 5 times a power
    of ten (0 to 1 when there is nothing to show)."""
    if maximum <= 0 or not math.isfinite(maximum):
        return [0.0, 1.0]
    raw = maximum / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    steps = math.ceil(maximum / step - 1e-9)
    return [i * step for i in range(steps + 1)]


# -- SVG pieces --------------------------------------------------------------------------------


_SVG_STYLE = "background: #fff; font-family: system-ui, -apple-system, sans-serif"
"""On the element itself: a chart shown alone (a notebook shows each as an image) keeps the
white ground and the font the page gives it."""


def _svg(title: str, height: float, parts: Iterable[str]) -> str:
    body = "".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} '
        f'{height:.0f}" width="100%" role="img" aria-label="{escape(title)}" style="{_SVG_STYLE}">'
        f"<title>{escape(title)}</title>{body}</svg>"
    )


def _chart_title(title: str) -> str:
    return _text(MARGIN, 18, title, weight="bold", size=14)


def _legend(entries: Sequence[tuple[str, str]], left: float, top: float, width: float) -> list[str]:
    parts = []
    for (name, colour), (x, y) in zip(entries, _legend_places(entries, width), strict=True):
        parts.append(_rect(left + x, top + y, 10, 10, colour, name))
        parts.append(_label(left + x + 14, top + y + 9, name, width - x - 14, size=11))
    return parts


def _legend_places(entries: Sequence[tuple[str, str]], width: float) -> list[tuple[float, int]]:
    """Where each legend entry goes, left to right in rows as wide as ``width``."""
    places: list[tuple[float, int]] = []
    x, y = 0.0, 0
    for name, _ in entries:
        size = 14 + min(len(name) * SMALL_CHAR_WIDTH, width - 14) + 18
        if x > 0 and x + size > width:
            x, y = 0.0, y + _LEGEND_ROW
        places.append((x, y))
        x += size
    return places


def _legend_height(entries: Sequence[tuple[str, str]], width: float) -> int:
    places = _legend_places(entries, width)
    return places[-1][1] + _LEGEND_ROW if places else 0


def _rect(x: float, y: float, width: float, height: float, fill: str, tooltip: str) -> str:
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" '
        f'fill="{fill}"><title>{escape(tooltip)}</title></rect>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str) -> str:
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
        'stroke-width="1"/>'
    )


def _text(
    x: float,
    y: float,
    text: str,
    *,
    anchor: str = "start",
    size: int = 12,
    weight: str = "normal",
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-weight="{weight}" '
        f'text-anchor="{anchor}">{escape(text)}</text>'
    )


def _label(x: float, y: float, text: str, width: float, *, size: int = 12) -> str:
    """A label cut to ``width`` (an ellipsis says so; the charts give their labels the room
    they need, so only a label longer than any room is), its whole text in a tooltip."""
    limit = max(int(width / (CHAR_WIDTH if size >= 12 else SMALL_CHAR_WIDTH)), 4)
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}"><title>{escape(text)}</title>'
        f"{escape(shown)}</text>"
    )


def _rotated_label(x: float, y: float, text: str) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 {x:.1f} {y:.1f})">{escape(text)}</text>'
    )

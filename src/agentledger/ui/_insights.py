"""The analytics page (``/analytics``): the charts of the analytics report, drawn from the
same report (``agentledger.analytics``), each agent and model in the colour the viewer shows
it in everywhere (:func:`._text.colour`), and the costliest runs the cost tree leads to,
each linked to its page.

The analytics come with their own extra (DuckDB): without it, the page says which one to
install, and every other page works as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from markupsafe import Markup

from ..errors import ConfigurationError
from ..ledger import Ledger
from . import _text

_STYLE_ATTRIBUTE = re.compile(r'\sstyle="[^"]*"')


@dataclass(frozen=True)
class Chart:
    """One chart as the page shows it: its title, its SVG (``None``: nothing to draw yet) and
    the note under it."""

    title: str
    svg: Markup | None
    note: str


@dataclass(frozen=True)
class Costly:
    """A run of the cost tree: its id, its agent, and the depth it is drawn at."""

    run_id: str
    agent_name: str
    depth: int


def analytics_page(ledger: Ledger, hues: _text.Hues) -> dict[str, Any]:
    """The report's charts over the viewer's ledger (in its scope), or what to install."""
    from ..analytics import Analytics, build_report, figures

    scope = ledger.scope
    try:
        with Analytics.open(ledger.url, tenant_id=scope.tenant_id, owner_id=scope.owner_id) as a:
            report = build_report(a)
    except ConfigurationError as exc:
        return {"missing": str(exc)}
    drawn = figures(report, hue=hues.of)
    costly = [
        Costly(run.run_id, run.agent_name, depth)
        for root in report.runs
        for run, depth in _walk(root, 0)
    ]
    return {"charts": [_chart(f.title, f.svg, f.note) for f in drawn.values()], "costly": costly}


def _chart(title: str, svg: str, note: str) -> Chart:
    """A chart of the report in the page. The analytics draw every text escaped; the style
    attribute their root element carries (for a chart shown alone) is left out, since the
    page's Content-Security-Policy refuses inline styles: the viewer's stylesheet gives the
    same. It is the only one, and the first tag holds no ``>`` (its label is escaped)."""
    if not svg:
        return Chart(title, None, note)
    head, rest = svg.split(">", 1)
    return Chart(title, Markup(_STYLE_ATTRIBUTE.sub("", head) + ">" + rest), note)


class _Run(Protocol):
    """A run of the report's cost tree, as this page reads it."""

    @property
    def run_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def children(self) -> Sequence[_Run]: ...


def _walk(run: _Run, depth: int) -> Iterator[tuple[_Run, int]]:
    yield run, depth
    for child in run.children:
        yield from _walk(child, depth + 1)

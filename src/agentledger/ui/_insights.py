"""The analytics page (``/analytics``): the charts of the analytics report, drawn from the
same report (``agentledger.analytics``), each agent and model in the colour the viewer shows
it in everywhere (:func:`._text.colour`), and the costliest runs the cost tree leads to,
each linked to its page.

The analytics come with their own extra (DuckDB): without it, the page says which one to
install, and every other page works as before.

The page is computed again only when the ledger changed (:class:`KeptAnalytics`): a row
written in the viewer's scope, or a conversation forgotten. Viewed again meanwhile, it is the
page computed before, which says when.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
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


class KeptAnalytics:
    """The analytics page of one viewer, kept until its ledger changes: its mark is read before
    the page is computed, so what is committed meanwhile is found at the next view. Views at
    once wait for one computation."""

    def __init__(self, compute: Callable[[Ledger], dict[str, Any]]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._kept: tuple[int, dict[str, Any]] | None = None

    def page(self, ledger: Ledger) -> dict[str, Any]:
        with self._lock:
            kept = self._kept
            changed = ledger.changes_since(None if kept is None else kept[0])
            if kept is not None and not changed:
                return kept[1]
            page = self._compute(ledger)
            if "missing" not in page:  # the extra may be installed before the next view
                page["computed_at"] = datetime.now(UTC)
                self._kept = (changed.stamp, page)  # the mark, read before the page
            return page


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

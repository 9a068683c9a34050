"""Lines the tests add to the terminal summary, carried in their test reports.

A test appends ``(RELIABILITY, line)`` to its ``user_properties`` (the ``reliability_report``
fixture does); :func:`summary_lines` gathers them from the reports the terminal reporter kept.
Test reports are what pytest-xdist sends from its workers to the controlling process, so the
summary is the same with or without ``-n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

RELIABILITY = "reliability"
"""The ``user_properties`` name of a reliability line, and the summary section's first word."""
SECTION = "reliability: what was done and checked"

INSTALL = "install"
"""The ``user_properties`` name of a line on what an install brought
(``tests/test_install_extras.py``)."""
CONFORMANCE = "conformance"
"""The ``user_properties`` name of a line of a framework's conformance suite's report
(``tests/test_langgraph_conformance.py``)."""
SECTIONS = {
    RELIABILITY: SECTION,
    INSTALL: "install: what the base install and each extra bring",
    CONFORMANCE: "conformance: the frameworks' own suites run against our stores",
}
"""Each kind of line, and the title of the summary section that prints them."""


def summary_lines(stats: dict[str, list[Any]], name: str = RELIABILITY) -> Iterator[str]:
    """``test_name[params]: line`` for each ``name`` property of a test's call report."""
    for report in _call_reports(stats):
        for key, line in report.user_properties:
            if key == name:
                yield f"{report.nodeid.split('::', 1)[-1]}: {line}"


def _call_reports(stats: dict[str, list[Any]]) -> Iterable[Any]:
    """The reports of the tests' call phases (the phase a test reports in), in the order the
    tests ran; setup and teardown reports carry the same properties and would repeat them."""
    reports = (report for kept in stats.values() for report in kept)
    calls = [r for r in reports if getattr(r, "when", None) == "call"]
    return sorted(calls, key=lambda r: r.start)

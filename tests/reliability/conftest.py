"""The reliability suite: a small size in ``make test``, a large one in ``make soak``
(``AGENTLEDGER_SOAK=1``). Every test says what it did and what it checked through the
``reliability_report`` fixture; the lines are printed at the end of the session."""

from __future__ import annotations

from collections.abc import Callable

import pytest

_LINES: list[str] = []


@pytest.fixture
def reliability_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``report("30 kills, 30 recoveries; invariants held")``: one line for the summary."""

    def report(line: str) -> None:
        _LINES.append(f"{request.node.nodeid.split('::', 1)[-1]}: {line}")

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LINES:
        terminalreporter.section("reliability: what was done and checked")
        for line in _LINES:
            terminalreporter.write_line(line)

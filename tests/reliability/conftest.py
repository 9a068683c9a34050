"""The reliability suite: a small size in ``make test``, a large one in ``make soak``
(``AGENTLEDGER_SOAK=1``, see ``support.sizes``). Every test says what it did and what it checked
through the ``reliability_report`` fixture; the lines are printed at the end of the session
(``pytest_terminal_summary`` in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from support.reports import RELIABILITY


@pytest.fixture
def reliability_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``report("30 kills, 30 recoveries; invariants held")``: one line for the summary.

    The line goes into the test's report (its ``user_properties``), not into a list of this
    process: under pytest-xdist the test runs in a worker, and only its report reaches the
    process that prints the summary.
    """

    def report(line: str) -> None:
        request.node.user_properties.append((RELIABILITY, line))

    return report

"""LangGraph's own conformance suite for checkpoint savers (``langgraph-checkpoint-conformance``,
pinned in the test extra) run against ``LedgerSaver`` on SQLite and PostgreSQL: every base
capability (put, put_writes, get_tuple, list, delete_thread) and every extended one
(delete_for_runs, copy_thread, prune). The suite's report is printed (``pytest -s`` shows
it; a failure shows it with the names of the failing tests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.metadata import version

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from agentledger.integrations.langgraph import LedgerSaver
from agentledger.ledger import Ledger
from support.reports import CONFORMANCE

SUITE_VERSION = "0.0.2"


def test_the_pinned_conformance_suite_is_the_one_installed():
    assert version("langgraph-checkpoint-conformance") == SUITE_VERSION


def test_ledger_saver_passes_every_capability_of_langgraphs_conformance_suite(
    ledger: Ledger, request: pytest.FixtureRequest
):
    @checkpointer_test(name=f"LedgerSaver on {ledger.dialect}")
    async def saver() -> AsyncIterator[LedgerSaver]:
        yield LedgerSaver(ledger)

    report = asyncio.run(validate(saver))
    report.print_report()
    counts = ", ".join(
        f"{name} {r.tests_passed}/{r.tests_passed + r.tests_failed}"
        for name, r in sorted(report.results.items())
    )
    line = (
        f"langgraph-checkpoint-conformance {SUITE_VERSION}, {report.checkpointer_name}: "
        f"{report.conformance_level()} ({counts})"
    )
    request.node.user_properties.append((CONFORMANCE, line))
    failures = [f for result in report.results.values() for f in result.failures]
    assert report.conformance_level() == "FULL", failures
    assert {name for name, r in report.results.items() if r.detected and r.passed} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert sum(r.tests_passed for r in report.results.values()) >= 58 + 21

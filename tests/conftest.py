"""Fixtures shared by the suite: a deterministic clock, a couple of ready-made tools, and
databases to store a ledger in (SQLite, and PostgreSQL from a server the suite starts itself)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger import tool
from agentledger._core import FunctionTool
from agentledger.ledger import Ledger
from support import reports
from support.clocks import FakeClock
from support.databases import BACKENDS, fresh_database, postgres_database, session_server
from support.fake_provider import FakeProvider
from support.ledger import Database
from support.postgres import PostgresServer


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def weather_tool() -> FunctionTool:
    return get_weather


@pytest.fixture
def add_tool() -> FunctionTool:
    return add


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A model provider on loopback that answers from a script (see ``support.fake_provider``)."""
    provider = FakeProvider()
    yield provider
    provider.close()


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Provider keys and URLs of the machine never reach a test (nor the network)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_clock() -> type[FakeClock]:
    """For tests that need more than one fresh clock."""
    return FakeClock


# -- markers ---------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    # The width of the terminal the suite runs in never reaches a test: output is as wide as a
    # pipe's unless a test gives COLUMNS. (Importing readline puts COLUMNS in the process's
    # environment, and pytest-xdist's workers inherit it from the process that starts them.)
    os.environ.pop("COLUMNS", None)
    config.addinivalue_line(
        "markers", "postgresql: needs a PostgreSQL server (started by the suite)"
    )
    config.addinivalue_line(
        "markers",
        "serial: sensitive to timing or to the machine's load (leases, heartbeats, many"
        " processes, random kills); `make test` runs these after the others, with no other"
        " test beside them",
    )
    config.addinivalue_line(
        "markers",
        "bench: the benchmarks run end to end at a tiny size, to check them, not the library;"
        " `make test-bench` runs these (CI runs it after `make test`)",
    )


# -- the reliability summary -----------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the reliability tests did and checked (``reliability_report``), and what each
    install brought (``tests/test_install_extras.py``). Here, not in
    ``tests/reliability/conftest.py``: under pytest-xdist the controlling process loads only
    this conftest, and it is the one that prints."""
    for name, title in reports.SECTIONS.items():
        lines = list(reports.summary_lines(terminalreporter.stats, name))
        if lines:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)


# -- databases (made and thrown away by support.databases) -----------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests asking for the server directly get the marker too, so `-m "not postgresql"` works.
    for item in items:
        if {"pg_server", "pg_url"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgresql)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole session (for each xdist worker), started
    on first use.

    Skipped when PostgreSQL is not installed, unless ``AGENTLEDGER_REQUIRE_PG=1`` (as in CI):
    then the tests that need it fail.
    """
    with session_server() as server:
        yield server


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL, once per backend: ``sqlite:///…/ledger.db`` in the test's
    ``tmp_path`` (not created yet) and a new database on the session's PostgreSQL server
    (dropped afterwards)."""
    with fresh_database(request.param, request, tmp_path) as url:
        yield url


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database URL, for tests that only concern PostgreSQL."""
    with postgres_database(pg_server) as url:
        yield url


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    """A :class:`Ledger` opened on ``db_url`` (each backend), closed afterwards."""
    with Ledger.open(db_url) as opened:
        yield opened


@pytest.fixture
def db(db_url: str, ledger: Ledger) -> Iterator[Database]:
    """SQL on the ``ledger`` fixture's own database, to check what it wrote."""
    database = Database(db_url)
    yield database
    database.close()

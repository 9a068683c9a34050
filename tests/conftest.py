"""Fixtures shared by the suite: a deterministic clock, a couple of ready-made tools, and
databases to store a ledger in (SQLite, and PostgreSQL from a server the suite starts itself)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger import FunctionTool, tool
from support.clocks import FakeClock
from support.fake_provider import FakeProvider
from support.postgres import PostgresServer, find_bindir, not_found_reason


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


# -- databases -----------------------------------------------------------------------------------

REQUIRE_PG_VARIABLE = "AGENTLEDGER_REQUIRE_PG"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgresql: needs a PostgreSQL server (started by the suite)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests asking for the server directly get the marker too, so `-m "not postgresql"` works.
    for item in items:
        if {"pg_server", "pg_url"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgresql)


def _postgres_unavailable() -> str | None:
    if find_bindir() is None:
        return not_found_reason()
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole session, started on first use.

    Skipped when PostgreSQL is not installed, unless ``AGENTLEDGER_REQUIRE_PG=1`` (as in CI):
    then the tests that need it fail.
    """
    reason = _postgres_unavailable()
    if reason is not None:
        if os.environ.get(REQUIRE_PG_VARIABLE, "").strip().lower() in {"1", "true", "yes"}:
            pytest.fail(
                f"{REQUIRE_PG_VARIABLE}=1 but PostgreSQL is unavailable: {reason}", pytrace=False
            )
        pytest.skip(f"PostgreSQL unavailable: {reason}")
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _fresh_postgres_database(server: PostgresServer) -> Iterator[str]:
    url = server.create_database()
    try:
        yield url
    finally:
        # Tolerated: the whole server is thrown away at the end of the session anyway.
        with contextlib.suppress(Exception):
            server.drop_database(url)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    ]
)
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database URL, once per backend: ``sqlite:///…/ledger.db`` (not created
    yet) and a new database on the session's PostgreSQL server (dropped afterwards)."""
    if request.param == "sqlite":
        tmp_path: Path = request.getfixturevalue("tmp_path")
        yield f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}"
    else:
        yield from _fresh_postgres_database(request.getfixturevalue("pg_server"))


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database URL, for tests that only concern PostgreSQL."""
    yield from _fresh_postgres_database(pg_server)

"""The databases tests store ledgers in: a SQLite file in a temporary directory, or a fresh
database on the throwaway PostgreSQL server of the session (``support.postgres``).

Every fixture that hands out a database goes through here: ``pg_server``, ``db_url`` and
``pg_url`` in ``conftest.py``, and the module-scoped ledgers that several tests share. So there
is one place that decides when PostgreSQL is skipped or fails, and one way a database is made
and thrown away.

Under pytest-xdist each worker process is a session of its own: it starts its own server, on a
port of its own, in a temporary directory of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import PostgresServer, find_bindir, not_found_reason

REQUIRE_PG_VARIABLE = "AGENTLEDGER_REQUIRE_PG"
"""Set to 1 (as CI does) and a missing PostgreSQL fails the tests that need it instead of
skipping them."""

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
]
"""``params`` of a fixture that gives one database per backend (see :func:`fresh_database`)."""

SQLITE_UNLESS_SOAK = pytest.mark.parametrize(
    "db_url", BACKENDS if os.environ.get("AGENTLEDGER_SOAK") == "1" else BACKENDS[:1], indirect=True
)
"""For a long test whose PostgreSQL run adds little to what shorter tests check there: SQLite in
``make test``, both backends in ``make soak``."""


def postgres_unavailable() -> str | None:
    """Why this machine cannot run the throwaway server, or ``None`` if it can."""
    if find_bindir() is None:
        return not_found_reason()
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[dev]')"
    return None


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_PG_VARIABLE, "").strip().lower() in {"1", "true", "yes"}


@contextlib.contextmanager
def session_server() -> Iterator[PostgresServer]:
    """The session's server, started here and stopped on exit; skips the test asking for it
    when PostgreSQL is unavailable, or fails it when ``AGENTLEDGER_REQUIRE_PG=1``."""
    reason = postgres_unavailable()
    if reason is not None:
        if postgres_required():
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


@contextlib.contextmanager
def postgres_database(server: PostgresServer) -> Iterator[str]:
    """A new, empty database on ``server``; its URL. Dropped afterwards."""
    url = server.create_database()
    try:
        yield url
    finally:
        # Tolerated: the whole server is thrown away at the end of the session anyway.
        with contextlib.suppress(Exception):
            server.drop_database(url)


def sqlite_url(directory: Path) -> str:
    """``sqlite:///…/ledger.db`` in ``directory`` (the file is not created)."""
    return f"sqlite:///{(directory / 'ledger.db').as_posix()}"


@contextlib.contextmanager
def fresh_database(
    backend: str, request: pytest.FixtureRequest, directory: Path | None = None
) -> Iterator[str]:
    """A fresh, empty database on ``backend`` ("sqlite" or "postgresql"), for a fixture of any
    scope: a SQLite file in ``directory`` (by default a new temporary directory), or a new
    database on the session's server (``pg_server``, so skipped or failed as it says)."""
    if backend == "sqlite":
        yield sqlite_url(directory or request.getfixturevalue("tmp_path_factory").mktemp("ledger"))
        return
    with postgres_database(request.getfixturevalue("pg_server")) as url:
        yield url

"""The database fixtures themselves: the throwaway PostgreSQL server and ``db_url``."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import create_engine, text

from support.postgres import PostgresHarnessError, PostgresServer, find_bindir

USER_TABLES = (
    "SELECT count(*) FROM pg_catalog.pg_tables"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
)


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _database_exists(server: PostgresServer, name: str) -> bool:
    with server.connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [name]).fetchone()
    return row is not None and row[0] == 1


def test_a_fresh_database_accepts_connections(pg_url: str) -> None:
    with psycopg.connect(pg_url, connect_timeout=10) as conn:
        version, database = conn.execute("SELECT version(), current_database()").fetchone() or ()
    assert "PostgreSQL" in version
    assert database == _dbname(pg_url)
    assert pg_url.startswith("postgresql://postgres@127.0.0.1:")


def test_fresh_databases_are_distinct_and_empty(pg_server: PostgresServer) -> None:
    first, second = pg_server.create_database(), pg_server.create_database()
    try:
        assert _dbname(first) != _dbname(second)
        for url in (first, second):
            with psycopg.connect(url, autocommit=True) as conn:
                assert conn.execute(USER_TABLES).fetchone() == (0,)
        with psycopg.connect(first, autocommit=True) as conn:
            conn.execute("CREATE TABLE only_in_first (x int)")
        with psycopg.connect(second, autocommit=True) as conn:
            assert conn.execute(USER_TABLES).fetchone() == (0,)
    finally:
        pg_server.drop_database(first)
        pg_server.drop_database(second)
    assert not _database_exists(pg_server, _dbname(first))
    assert not _database_exists(pg_server, _dbname(second))


def test_drop_database_disconnects_leftover_sessions(pg_server: PostgresServer) -> None:
    url = pg_server.create_database()
    leftover = psycopg.connect(url)  # e.g. a pool a test forgot to dispose of
    try:
        leftover.execute("SELECT 1")
        pg_server.drop_database(url)
        assert not _database_exists(pg_server, _dbname(url))
    finally:
        leftover.close()


def test_data_survives_a_restart(pg_server: PostgresServer, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (note text)")
        conn.execute("INSERT INTO kept VALUES ('before the restart')")
    port = pg_server.port
    pg_server.restart()
    assert pg_server.port == port
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT note FROM kept").fetchall() == [("before the restart",)]


def test_db_url_is_a_fresh_usable_database(db_url: str) -> None:
    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        assert path.is_absolute()
        assert path.parent.is_dir()
        assert not path.exists()
        engine_url = db_url
    else:
        assert db_url.startswith("postgresql://")
        with psycopg.connect(db_url) as conn:
            assert conn.execute(USER_TABLES).fetchone() == (0,)
        engine_url = db_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(engine_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()


@pytest.mark.postgresql
def test_a_server_of_its_own_starts_and_cleans_up(pg_server: PostgresServer) -> None:
    # pg_server only to skip (or fail) like the other PostgreSQL tests when there is no server.
    with PostgresServer() as server:
        base, port = server.base_dir, server.port
        assert base is not None and base.is_dir() and port is not None
        assert port != pg_server.port
        with server.connect() as conn:
            assert conn.execute("SELECT current_setting('fsync')").fetchone() == ("off",)
            assert conn.execute("SELECT current_setting('listen_addresses')").fetchone() == (
                "127.0.0.1",
            )
    assert not base.exists()
    assert server.base_dir is None
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    server.stop()  # a second stop is harmless


@pytest.mark.postgresql
def test_a_failed_start_says_what_ran_and_what_the_server_logged(
    pg_server: PostgresServer,
) -> None:
    server = PostgresServer(settings={"max_connections": "not a number"})
    with pytest.raises(PostgresHarnessError) as failure:
        server.start()
    message = str(failure.value)
    assert "pg_ctl start" in message
    assert "server log" in message
    assert "max_connections" in message  # postgres names the bad setting in its log
    assert server.base_dir is None


def test_pg_bindir_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PG_BINDIR", str(tmp_path))
    assert find_bindir() is None
    with pytest.raises(PostgresHarnessError, match="PG_BINDIR"):
        PostgresServer()

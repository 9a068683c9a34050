"""Analytics in a scope: ``Analytics.open(url, tenant_id=..., owner_id=...)`` and the command
line's ``--tenant`` / ``--owner`` see one tenant's (and owner's) rows, and only those.

One ledger per backend holds the team and the compaction scenarios of ``test_analytics`` and a
run still going (with buffer rows), shared out between two tenants and three owners: acme/ann
has the team's lead and its subagents, acme/carol the talker whose conversation was compacted,
globex/bob the rest. Every view of a scoped ``Analytics`` is checked against the same SQL files
run over the ledger's rows picked by id (what the test knows each scope holds, not the
``tenant_id`` columns the library reads); the cache, the Parquet export, the duckdb script, the
reports and the OpenTelemetry export are checked to hold no row of another scope.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from sqlalchemy import Connection, select, text

from agentledger.analytics import Analytics
from agentledger.analytics._analytics import attach_statement, view_files
from agentledger.analytics._extensions import load
from agentledger.cli import cli
from agentledger.errors import UsageError
from agentledger.ledger import Ledger
from agentledger.ledger.checksums import CHECKSUM, checksum
from agentledger.ledger.tables import metadata
from support.databases import BACKENDS, postgres_database, sqlite_url
from support.interrupted import agent_on, begin, step, tool_step_then_answer
from support.postgres import PostgresServer
from support.subagents import Database
from test_analytics import record_compacted, record_team

VIEWS = sorted(
    {name for _, sql in view_files() for name in re.findall(r"CREATE OR REPLACE VIEW (\w+)", sql)}
)
QUERIES = [f"SELECT * FROM {view}" for view in VIEWS] + [
    f"SELECT * FROM usage_over_time('{unit}')" for unit in ("hour", "day")
]
TABLES = (
    "agentledger_version",
    "conversations",
    "conversation_messages",
    "agent_runs",
    "execution_buffer_rows",
    "step_executions",
    "tool_executions",
    "context_compactions",
    "forget_log",
)
"""What a scoped ``Analytics`` gives of the ledger (``ledger.<table>``)."""
BY_CONVERSATION = {"conversations": "id", "conversation_messages": "conversation_id"}
BY_CONVERSATION["context_compactions"] = "conversation_id"
BY_RUN = {"agent_runs": "id", "step_executions": "run_id", "tool_executions": "run_id"}
BY_RUN["execution_buffer_rows"] = "run_id"

GROUPS = (("acme", "ann"), ("acme", "carol"), ("globex", "bob"))
SCOPES = {
    "tenant": ("acme", None),
    "owner": (None, "ann"),
    "tenant-and-owner": ("acme", "carol"),
    "nobody": ("acme", "bob"),
}
CASES = [
    pytest.param(backend.values[0], scope, id=f"{backend.id}-{name}", marks=backend.marks)
    for backend in BACKENDS
    for name, scope in SCOPES.items()
    # PostgreSQL runs the same SQL through its scanner: two scopes show it keeps to them
    if backend.id == "sqlite" or name in ("tenant", "tenant-and-owner")
]
SECRET = "acme-only-" + "0123456789abcdef" * 4
"""Planted in a cache of acme's rows, to look for in the bytes of the file after."""
ODD_TENANT = "O'Brien & Co \\ west"
"""A tenant id with spaces, a quote and a backslash: what libpq's options must escape."""


@dataclass
class Shared:
    """The shared ledger: its URL and, per (tenant, owner), the ids of its conversations
    (users' and subagents') and runs."""

    url: str
    conversations: dict[tuple[str, str], set[str]]
    runs: dict[tuple[str, str], set[str]]

    def ids(self, tenant: str | None, owner: str | None) -> tuple[set[str], set[str]]:
        """The conversations and runs of the scope."""
        picked = [g for g in GROUPS if tenant in (None, g[0]) and owner in (None, g[1])]
        return (
            set().union(*(self.conversations[g] for g in picked)),
            set().union(*(self.runs[g] for g in picked)),
        )

    def outside(self, tenant: str | None, owner: str | None) -> set[str]:
        conversations, runs = self.ids(tenant, owner)
        every = set().union(*self.conversations.values(), *self.runs.values())
        return every - conversations - runs


def record_shared(url: str) -> Shared:
    team, compacted = record_team(url), record_compacted(url)
    with Ledger.open(url) as ledger:  # a run begun and stepped: it has buffer rows
        agent = agent_on(ledger, tool_step_then_answer())
        running = step(agent, ledger.recorder, begin(agent, ledger.recorder))
    assert running.conversation_id is not None
    mains = {
        ("acme", "ann"): {team.conversations["A"]},
        ("acme", "carol"): {compacted.conversations["A"]},
        ("globex", "bob"): {
            team.conversations["B"],
            compacted.conversations["B"],
            running.conversation_id,
        },
    }
    db = Database(url)
    shared = Shared(url, {}, {})
    for group, conversations in mains.items():
        shared.conversations[group], shared.runs[group] = _give(db, group, conversations)
    for table in TABLES[1:-1]:  # every row went to a tenant
        assert db.scalar(f"SELECT count(*) FROM {table} WHERE tenant_id IS NULL") == 0, table
        assert db.scalar(f"SELECT count(*) FROM {table}"), table
    db.engine.dispose()
    return shared


def _give(db: Database, group: tuple[str, str], mains: set[str]) -> tuple[set[str], set[str]]:
    """Give the users' conversations ``mains``, their runs, the subagent runs below them and
    everything of theirs to the tenant and owner ``group``, as revision 0010 copies them."""
    runs = {
        r["id"]
        for r in db.rows("SELECT id, root_run_id, conversation_id FROM agent_runs")
        if r["root_run_id"] in _roots(db, mains)
    }
    conversations = mains | {
        r["conversation_id"]
        for r in db.rows("SELECT id, conversation_id FROM agent_runs")
        if r["id"] in runs
    }
    tenant, owner = group
    with db.engine.begin() as conn:
        for table, column in {**BY_CONVERSATION, **BY_RUN}.items():
            ids = conversations if table in BY_CONVERSATION else runs
            owned = ", owner_id = :owner" if table in ("conversations", "agent_runs") else ""
            for id_ in ids:
                conn.execute(
                    text(f"UPDATE {table} SET tenant_id = :tenant{owned} WHERE {column} = :id"),
                    {"tenant": tenant, "owner": owner, "id": id_},
                )
        _reseal(conn)
    return conversations, runs


def _reseal(conn: Connection) -> None:
    """Every row's checksum computed again, as the ledger computes it, now that it has a
    tenant (the ledger still reads every row)."""
    for table in metadata.tables.values():
        if CHECKSUM not in table.c:
            continue
        for row in conn.execute(select(table)).mappings().all():
            update = table.update().where(table.c.id == row["id"])
            conn.execute(update.values({CHECKSUM: checksum(table, row)}))


def _roots(db: Database, mains: set[str]) -> set[str]:
    return {
        r["id"]
        for r in db.rows("SELECT id, conversation_id FROM agent_runs WHERE parent_run_id IS NULL")
        if r["conversation_id"] in mains
    }


class Ledgers:
    """The shared ledger recorded once per backend for the module, on first use."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.recorded: dict[str, Shared] = {}
        self.databases = contextlib.ExitStack()

    def get(self, backend: str, server: PostgresServer | None) -> Shared:
        if backend not in self.recorded:
            if backend == "sqlite":
                url = sqlite_url(self.tmp.mktemp("scoped"))
            else:
                assert server is not None
                url = self.databases.enter_context(postgres_database(server))
            self.recorded[backend] = record_shared(url)
        return self.recorded[backend]


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledgers]:
    recorded = Ledgers(tmp_path_factory)
    yield recorded
    recorded.databases.close()


@pytest.fixture(scope="module", params=BACKENDS)
def shared(request: pytest.FixtureRequest, ledgers: Ledgers) -> Shared:
    server = None if request.param == "sqlite" else request.getfixturevalue("pg_server")
    return ledgers.get(request.param, server)


# --- what each scope should give, worked out from the ids ------------------------------------


def _summed(value: Any) -> Any:
    """``value`` with its floats to 12 significant digits (sums differ in their last bits
    with the order DuckDB's threads add them in)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, list | tuple):
        return [_summed(v) for v in value]
    if isinstance(value, dict):
        return {k: _summed(v) for k, v in value.items()}
    return value


def rows(connection: Analytics | duckdb.DuckDBPyConnection, query: str) -> list[Any]:
    return sorted((_summed(r) for r in connection.sql(query).fetchall()), key=repr)


@pytest.fixture
def expected(shared: Shared) -> Iterator[Any]:
    """``expected(tenant, owner)``: a DuckDB connection whose ``ledger`` holds the ledger's
    rows of that scope's conversations and runs, picked by id, with the views over them."""
    opened: list[duckdb.DuckDBPyConnection] = []

    def make(tenant: str | None, owner: str | None) -> duckdb.DuckDBPyConnection:
        conversations, runs = shared.ids(tenant, owner)
        extension, attach = attach_statement(shared.url, name="everything")
        connection = duckdb.connect()
        opened.append(connection)
        load(connection, extension)
        connection.execute(attach)
        connection.execute("SET TimeZone = 'UTC'")
        connection.execute("ATTACH ':memory:' AS ledger")
        for table in TABLES:
            kept, column = (
                (conversations, BY_CONVERSATION[table])
                if table in BY_CONVERSATION
                else (runs, BY_RUN.get(table))
            )
            where = "" if column is None else f" WHERE list_contains(?, {column})"
            if table == "forget_log":
                where = " WHERE false"  # nothing was forgotten
            connection.execute(
                f"CREATE TABLE ledger.{table} AS SELECT * FROM {_table(connection, table)}{where}",
                [sorted(kept)] if "?" in where else None,
            )
        for _, sql in view_files():
            connection.execute(sql)
        return connection

    yield make
    for connection in opened:
        connection.close()


def _table(connection: duckdb.DuckDBPyConnection, table: str) -> str:
    (schema,) = connection.execute(
        "SELECT schema_name FROM duckdb_tables() WHERE database_name = 'everything' "
        "AND table_name = ?",
        [table],
    ).fetchone() or ("main",)
    return f"everything.{schema}.{table}"


def values(found: list[Any]) -> set[str]:
    """Every text in ``found`` (rows), however nested."""
    texts: set[str] = set()
    for value in found:
        if isinstance(value, str):
            texts.add(value)
        elif isinstance(value, list | tuple):
            texts |= values(list(value))
        elif isinstance(value, dict):
            texts |= values(list(value.values()))
    return texts


# --- the views, the tables, raw SQL -------------------------------------------------------------


@pytest.mark.parametrize(("shared", "scope"), CASES, indirect=["shared"])
def test_every_view_in_a_scope_is_the_view_of_that_scopes_rows_alone(
    shared: Shared, expected: Any, scope: tuple[str | None, str | None]
) -> None:
    tenant, owner = scope
    want = expected(tenant, owner)
    outside = shared.outside(tenant, owner)
    with Analytics.open(shared.url, tenant_id=tenant, owner_id=owner) as scoped:
        assert (scoped.tenant_id, scoped.owner_id) == scope
        for query in QUERIES:
            found = rows(scoped, query)
            assert found == rows(want, query), query
            assert not values(found) & outside, query
        for table in TABLES:
            query = f"SELECT CAST(COLUMNS(*) AS VARCHAR) FROM ledger.{table}"
            assert rows(scoped, query) == rows(want, query), table


def test_a_scope_holds_rows_and_leaves_out_the_tables_that_mix_tenants(shared: Shared) -> None:
    conversations, runs = shared.ids("acme", None)
    with Analytics.open(shared.url, tenant_id="acme") as scoped:
        assert {r for (r,) in scoped.sql("SELECT run_id FROM run_rollup").fetchall()} == runs
        assert {
            c for (c,) in scoped.sql("SELECT id FROM ledger.conversations").fetchall()
        } == conversations
        assert scoped.short_ids(sorted(runs), of="run")  # reads the scope's runs
        for hidden in ("conversation_messages_fts", "agentledger_deletions"):
            with pytest.raises(duckdb.CatalogException):
                scoped.sql(f"SELECT * FROM ledger.{hidden}")
        assert "tenant_id='acme'" in repr(scoped)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tenant_id": ""}, "tenant_id must be a non-empty text"),
        ({"owner_id": " ann"}, "owner_id must be a non-empty text"),
        ({"tenant_id": "ac\nme"}, "holds a control character"),
    ],
)
def test_a_blank_or_unprintable_scope_is_a_usage_error(
    tmp_path: Path, given: dict[str, str], message: str
) -> None:
    url = sqlite_url(tmp_path)
    Ledger.open(url).close()
    with pytest.raises(UsageError, match=message):
        Analytics.open(url, **given)


# --- the cache ---------------------------------------------------------------------------------


def test_a_scoped_cache_holds_the_scopes_rows_and_is_rebuilt_for_another_scope(
    shared: Shared, tmp_path: Path
) -> None:
    cache = tmp_path / "ledger.duckdb"
    said: list[str] = []
    with (
        Analytics.open(shared.url, tenant_id="acme") as direct,
        Analytics.open(shared.url, cache=cache, tenant_id="acme", progress=said.append) as cached,
    ):
        assert cached.last_sync is not None and cached.last_sync.full
        for query in QUERIES:
            assert rows(cached, query) == rows(direct, query), query
        with pytest.raises(duckdb.CatalogException):  # the ledger is attached only to sync
            cached.sql("SELECT * FROM source.agent_runs")
        assert cached.sync().rows["agent_runs"] == 0  # attached again, and nothing changed
    assert _cached_ids(cache) == shared.ids("acme", None)
    assert _recorded_scope(cache) == ("acme", None)

    with duckdb.connect(str(cache)) as connection:  # bytes the next scope must not find
        connection.execute("PRAGMA force_compression = 'uncompressed'")
        connection.execute(f"CREATE TABLE planted AS SELECT '{SECRET}' AS secret")
        connection.execute("CHECKPOINT")
    assert SECRET.encode() in cache.read_bytes()
    said.clear()
    with Analytics.open(shared.url, cache=cache, tenant_id="globex", progress=said.append) as other:
        assert other.last_sync is not None and other.last_sync.full
        assert other.last_sync.reason == (
            "the cache held the rows of tenant 'acme', not of tenant 'globex'; rebuilding it"
        )
    assert said[0] == f"copying the ledger into the cache: {other.last_sync.reason}"
    assert _cached_ids(cache) == shared.ids("globex", None)
    assert SECRET.encode() not in cache.read_bytes()  # a new file, not the old one's blocks

    with Analytics.open(shared.url, cache=cache) as everything:
        assert everything.last_sync is not None
        assert everything.last_sync.reason == (
            "the cache held the rows of tenant 'globex', not of the whole ledger; rebuilding it"
        )
    assert _cached_ids(cache) == shared.ids(None, None)
    assert _recorded_scope(cache) == (None, None)


def test_a_scoped_caches_sync_reads_only_the_new_rows_of_its_scope(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    with Ledger.open(url) as ledger:
        ours = agent_on(ledger, tool_step_then_answer()).run("Weather?")
    db = Database(url)
    _give(db, (ODD_TENANT, "ann"), {ours.conversation_id})  # quoted in every query
    cache = tmp_path / "ledger.duckdb"
    with Analytics.open(url, cache=cache, tenant_id=ODD_TENANT, owner_id="ann") as cached:
        assert cached.sql("SELECT count(*) FROM runs").fetchall() == [(1,)]
        with Ledger.open(url) as ledger:
            theirs = agent_on(ledger, tool_step_then_answer()).run("Weather?")
            again = agent_on(ledger, tool_step_then_answer()).run("Again?", ours.conversation_id)
        _give(db, (ODD_TENANT, "bob"), {theirs.conversation_id})
        _give(db, (ODD_TENANT, "ann"), {ours.conversation_id})
        synced = cached.sync()
        # giving the runs out stamped every row again: bob's run is read by no query
        assert not synced.full and synced.rows["agent_runs"] == 2
        found = {r for (r,) in cached.sql("SELECT run_id FROM run_rollup").fetchall()}
        assert found == {ours.run_id, again.run_id}
        assert theirs.run_id not in values(cached.sql("SELECT * FROM steps").fetchall())
    db.engine.dispose()
    assert _cached_ids(cache)[1] == {ours.run_id, again.run_id}


def _cached_ids(cache: Path) -> tuple[set[str], set[str]]:
    """The conversations and runs of every table of the cache file."""
    with duckdb.connect(str(cache), read_only=True) as connection:
        conversations: set[str] = set()
        runs: set[str] = set()
        for table, column in BY_CONVERSATION.items():
            conversations |= {
                v for (v,) in connection.sql(f"SELECT {column} FROM {table}").fetchall()
            }
        for table, column in BY_RUN.items():
            runs |= {v for (v,) in connection.sql(f"SELECT {column} FROM {table}").fetchall()}
        kept = connection.sql("SELECT run_id FROM agentledger_cache_run_rollup").fetchall()
        assert {v for (v,) in kept} == runs
    return conversations, runs


def _recorded_scope(cache: Path) -> tuple[str | None, str | None]:
    with duckdb.connect(str(cache), read_only=True) as connection:
        found = connection.sql("SELECT tenant_id, owner_id FROM agentledger_cache").fetchone()
    assert found is not None
    return found[0], found[1]


# --- PostgreSQL: the tenant in the connection ---------------------------------------------------


def test_the_tenant_travels_in_libpqs_options_escaped() -> None:
    url = "postgresql+psycopg://app:s3cret@db.example:5433/ledger?sslmode=disable"
    _, attach = attach_statement(url, tenant_id=ODD_TENANT)
    assert attach == (
        "ATTACH 'postgresql://app:s3cret@db.example:5433/ledger?sslmode=disable&options="
        "-c%20agentledger.tenant_id%3DO%27Brien%5C%20%26%5C%20Co%5C%20%5C%5C%5C%20west' "
        "AS ledger (TYPE postgres, READ_ONLY)"
    )
    _, given = attach_statement(url + "&options=-c%20work_mem%3D8MB", tenant_id="acme")
    assert "options=-c%20work_mem%3D8MB%20-c%20agentledger.tenant_id%3Dacme'" in given
    assert "options" not in attach_statement(url)[1]


def test_the_postgres_scanners_session_holds_the_tenant(pg_url: str) -> None:
    Ledger.open(pg_url).close()
    with Analytics.open(pg_url, tenant_id=ODD_TENANT) as scoped:
        (setting,) = scoped.sql(
            "SELECT * FROM postgres_query('scoped_source', "
            "'SELECT current_setting(''agentledger.tenant_id'')')"
        ).fetchone() or (None,)
        assert scoped.sql("SELECT count(*) FROM run_rollup").fetchall() == [(0,)]
    assert setting == ODD_TENANT


# --- the command line ----------------------------------------------------------------------------


def cli_run(url: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_export_parquet_with_a_tenant_writes_only_its_rows_over_an_earlier_export(
    shared: Shared, tmp_path: Path
) -> None:
    target = tmp_path / "parquet"
    cli_run(shared.url, "export", "parquet", str(target))  # everything, every day of it
    days = {p.name for p in (target / "agent_runs").glob("day=*")}
    assert len(days) == 3  # two days of 2030; today, the run still going (globex's)
    cache = tmp_path / "ledger.duckdb"
    cli_run(shared.url, "export", "parquet", str(target), "--tenant", "acme", "--cache", str(cache))

    conversations, runs = shared.ids("acme", None)
    reader = duckdb.connect()
    folders = {p.name for p in target.iterdir()}
    assert folders == {*TABLES, "agentledger_deletions"}
    deletions = (target / "agentledger_deletions" / "**" / "*.parquet").as_posix()
    assert reader.sql(f"SELECT count(*) FROM read_parquet('{deletions}')").fetchall() == [(0,)]
    assert {p.name for p in (target / "agent_runs").glob("day=*")} == {
        "day=2030-01-01",
        "day=2030-01-02",
    }  # acme's days: today's folder went with the rest of the earlier export
    for table in folders:
        pattern = (target / table / "**" / "*.parquet").as_posix()
        found = reader.sql(f"SELECT * FROM read_parquet('{pattern}', union_by_name = true)")
        assert not values(found.fetchall()) & shared.outside("acme", None), table
        column = BY_CONVERSATION.get(table) or BY_RUN.get(table)
        if column is not None:
            kept = conversations if table in BY_CONVERSATION else runs
            ids = {v for (v,) in found.select(column).fetchall()}
            whole = table in ("conversations", "agent_runs")  # not every run has tool calls
            assert ids == kept if whole else ids <= kept, table
    reader.close()


def test_the_report_and_the_duckdb_script_keep_to_the_scope(shared: Shared) -> None:
    conversations, runs = shared.ids("acme", "carol")
    reported = cli_run(
        shared.url, "--tenant", "acme", "analytics", "report", "--json", "--owner", "carol"
    )
    records = [json.loads(line) for line in reported.output.splitlines()]
    listed = {r["conversation_id"] for r in records if r["table"] == "conversations"}
    assert listed and listed <= conversations
    assert not values(records) & shared.outside("acme", "carol")

    printed = cli_run(shared.url, "--owner", "carol", "--tenant", "acme", "analytics", "sql")
    assert "ATTACH ':memory:' AS ledger;" in printed.output
    with duckdb.connect() as shell:
        shell.execute(printed.output)
        found = {r for (r,) in shell.sql("SELECT run_id FROM run_tree").fetchall()}
    assert found == runs


def test_export_otlp_with_a_tenant_sends_only_its_run_trees(shared: Shared, tmp_path: Path) -> None:
    output = tmp_path / "spans.jsonl"
    cli_run(
        shared.url,
        "export",
        "otlp",
        "--since",
        "2000-01-01",
        "--output",
        str(output),
        "--tenant",
        "globex",
    )
    exported = output.read_text(encoding="utf-8")
    _, runs = shared.ids("globex", None)
    _, others = shared.ids("acme", None)
    spans = [
        span
        for line in exported.splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scoped in resource["scopeSpans"]
        for span in scoped["spans"]
    ]
    found = {
        a["value"]["stringValue"]
        for span in spans
        for a in span["attributes"]
        if a["key"] == "agentledger.run_id"
    }
    assert found and found <= runs and not found & others


def test_a_blank_tenant_on_the_command_line_is_a_clear_error(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    Ledger.open(url).close()
    target = str(tmp_path / "out")
    result = CliRunner().invoke(
        cli, ["--db", url, "--tenant", " acme", "export", "parquet", target]
    )
    assert result.exit_code == 1
    assert "tenant_id must be a non-empty text without leading or trailing spaces" in result.output
    assert not (tmp_path / "out").exists()

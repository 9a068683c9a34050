"""``agentledger mcp serve``: the ledger for MCP clients, driven by the official MCP SDK's client
against the command in a process of its own (stdio; one test over streamable HTTP), on a small
ledger recorded here: a run with a tool call, and a run that spawned a subagent.

One server for the module (``--max-rows 50 --query-timeout 1``), reached from the tests through a
blocking portal: every tool and the resources, unknown ids, writes refused with the database
file unchanged, hostile queries bounded. The scoped ``query`` on SQLite is tested through
:func:`read_only_query` on a copy whose rows belong to two tenants; PostgreSQL's read-only
transaction, statement timeout and row-level security on a server of the suite's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import psycopg
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from agentledger import (
    AgentBuilder,
    InferenceResponse,
    ScriptedLLM,
    SubagentPolicy,
    SubagentSpec,
    ToolCall,
    Usage,
    UsageError,
    tool,
)
from agentledger.integrations.mcp_server import QueryLimits, read_only_query
from agentledger.ledger import Ledger
from support.cli import ANSWER, CONSOLE_SCRIPT, QUESTION, TOOL_OUTPUT, invoke, record_a_run
from support.postgres import PostgresServer

MAX_ROWS = 50
TIMEOUT = 1.0
SERVE = ["mcp", "serve", "--max-rows", str(MAX_ROWS), "--query-timeout", str(TIMEOUT)]
TOOLS = {"search_conversations", "get_conversation", "get_trace", "list_runs", "run_tree", "query"}
INFINITE = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n)"


@tool
def search(query: str) -> str:
    """Search the web."""
    return "Lisbon: 24C and sunny"


def record_a_subagent_run(url: str) -> str:
    """A coordinator that hands a question to a researcher subagent (with a tool); its run id."""
    researcher = SubagentSpec(
        name="researcher",
        description="Finds facts.",
        system_prompt="You research.",
        tools=[search],
        llm=ScriptedLLM(
            [
                InferenceResponse(
                    tool_calls=[ToolCall(id="s1", name="search", arguments={"query": "Lisbon"})],
                    usage=Usage(input_tokens=50, output_tokens=10),
                ),
                InferenceResponse(content="24C and sunny.", usage=Usage(input_tokens=80)),
            ]
        ),
    )
    spawn = ToolCall(
        id="p1", name="spawn_subagent", arguments={"subagent": "researcher", "task": "Lisbon?"}
    )
    coordinator = ScriptedLLM(
        [
            InferenceResponse(tool_calls=[spawn], usage=Usage(input_tokens=100, output_tokens=20)),
            InferenceResponse(content="It is 24C in Lisbon.", usage=Usage(input_tokens=140)),
        ]
    )
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(coordinator)
            .with_ledger(ledger)
            .with_subagents([researcher], policy=SubagentPolicy(max_depth=2))
            .build()
        )
        return agent.run("How is the weather in Lisbon?").run_id


@dataclass(frozen=True)
class Recorded:
    path: Path
    conversation_id: str
    run_id: str
    tree_run_id: str


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    path = tmp_path_factory.mktemp("mcp") / "ledger.db"
    weather = record_a_run(str(path))
    tree_run_id = record_a_subagent_run(str(path))
    return Recorded(path, weather.conversation_id, weather.run_id, tree_run_id)


# --- the client ------------------------------------------------------------------------------


def stdio_server(*args: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    return StdioServerParameters(command=str(CONSOLE_SCRIPT), args=[*SERVE, *args], env=env)


@contextlib.asynccontextmanager
async def stdio_session(*args: str) -> AsyncIterator[ClientSession]:
    with open(os.devnull, "w") as quiet:  # the server's messages (stderr)
        async with (
            stdio_client(stdio_server(*args), errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


class Client:
    """An MCP client session, called from synchronous tests through a blocking portal."""

    def __init__(self, portal: BlockingPortal, session: ClientSession) -> None:
        self.portal = portal
        self.session = session

    def call(self, name: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.session.call_tool, name, arguments)

    def answer(self, name: str, **arguments: Any) -> Any:
        """A tool's structured answer, which must not be an error."""
        result = self.call(name, **arguments)
        assert not result.is_error, result.content
        assert result.content and result.content[0].type == "text"
        return result.structured_content

    def error(self, name: str, **arguments: Any) -> str:
        """A tool's error message, which it must be."""
        result = self.call(name, **arguments)
        assert result.is_error, result.structured_content
        return " ".join(getattr(block, "text", "") for block in result.content)


@contextlib.contextmanager
def client_of(*args: str) -> Iterator[Client]:
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_session(*args)) as session,
    ):
        yield Client(portal, session)


@pytest.fixture(scope="module")
def client(recorded: Recorded) -> Iterator[Client]:
    """The module's server, over stdio, on the recorded ledger."""
    with client_of("--db", str(recorded.path)) as connected:
        yield connected


def file_state(path: Path) -> tuple[str, list[str]]:
    """The ledger file's digest and the files beside it."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, sorted(p.name for p in path.parent.iterdir())


# --- the tools -------------------------------------------------------------------------------


def test_the_server_lists_its_six_tools_each_marked_read_only(client):
    tools = client.portal.call(client.session.list_tools).tools
    assert {t.name for t in tools} == TOOLS
    assert all(t.annotations is not None and t.annotations.read_only_hint for t in tools)


def test_search_conversations_finds_a_message_with_its_conversation(client, recorded):
    hits = client.answer("search_conversations", query="marmalade", limit=5)["hits"]
    assert [(h["conversation_id"], h["message"]["content"]) for h in hits] == [
        (recorded.conversation_id, ANSWER)
    ]
    assert client.answer("search_conversations", query="zeppelin")["hits"] == []


def test_get_conversation_is_what_the_user_saw_and_takes_a_prefix(client, recorded):
    with Ledger.open(recorded.path, read_only=True) as ledger:
        prefix = ledger.short_ids([recorded.conversation_id], of="conversation")
    found = client.answer("get_conversation", id=prefix[recorded.conversation_id])
    assert found["conversation"]["id"] == recorded.conversation_id
    assert [(m["role"], m["content"]) for m in found["messages"]] == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]
    assert all("tool_calls" not in m for m in found["messages"])
    assert found["conversation"]["created_at"].endswith("+00:00")


def test_get_trace_has_the_tool_call_and_its_result(client, recorded):
    trace = client.answer("get_trace", run_id=recorded.run_id)
    assert trace["run"]["id"] == recorded.run_id
    calls = [t for s in trace["steps"] for t in s["tool_executions"]]
    assert [(c["tool_name"], c["arguments"], c["result"]) for c in calls] == [
        ("get_weather", {"city": "Paris"}, TOOL_OUTPUT)
    ]
    assert [m["role"] for m in trace["messages"]] == ["assistant", "tool"]


def test_list_runs_filters_by_conversation_status_and_time(client, recorded):
    everything = client.answer("list_runs")["runs"]
    assert {r["agent_name"] for r in everything} == {"weather-bot", "agent", "researcher"}
    mine = client.answer("list_runs", conversation_id=recorded.conversation_id)["runs"]
    assert [r["id"] for r in mine] == [recorded.run_id]
    assert client.answer("list_runs", status="failed")["runs"] == []
    assert client.answer("list_runs", since="2999-01-01")["runs"] == []
    assert len(client.answer("list_runs", limit=1)["runs"]) == 1
    assert "no run status 'done'" in client.error("list_runs", status="done")
    assert "not an ISO 8601" in client.error("list_runs", since="yesterday")
    assert "at least 1" in client.error("list_runs", limit=0)


def test_run_tree_sums_the_subagents_usage_into_the_inclusive_figures(client, recorded):
    tree = client.answer("run_tree", run_id=recorded.tree_run_id)
    (child,) = tree["children"]
    assert (tree["run"]["agent_name"], child["run"]["agent_name"]) == ("agent", "researcher")
    assert tree["exclusive"]["total_tokens"] == 260
    assert child["inclusive"]["total_tokens"] == 140
    assert tree["inclusive"]["total_tokens"] == 400


@pytest.mark.parametrize(
    ("tool_name", "arguments", "message"),
    [
        ("get_conversation", {"id": "0000000000"}, "no conversation '0000000000'"),
        ("get_conversation", {"id": "abc"}, "a prefix needs at least 8 characters"),
        ("get_trace", {"run_id": "0000000000"}, "no run '0000000000'"),
        ("run_tree", {"run_id": "0000000000"}, "no run '0000000000'"),
        ("list_runs", {"conversation_id": "0000000000"}, "no conversation"),
    ],
)
def test_an_unknown_id_is_a_tool_error_with_the_librarys_message(
    client, tool_name, arguments, message
):
    assert message in client.error(tool_name, **arguments)
    assert client.answer("query", sql="SELECT 1 AS one")["rows"] == [[1]]  # still serving


def test_an_ambiguous_prefix_is_a_tool_error_listing_the_ids(client, recorded):
    ids = [row[0] for row in client.answer("query", sql="SELECT id FROM agent_runs")["rows"]]
    common = ids[0]
    while not all(i.startswith(common) for i in ids):
        common = common[:-1]
    if len(common) < 8:
        pytest.skip("the runs' ids share fewer than 8 characters")
    assert "begins the ids of 3 runs" in client.error("get_trace", run_id=common)


# --- the resources ---------------------------------------------------------------------------


def test_every_conversation_is_a_resource_read_by_its_uri(client, recorded):
    listed = client.portal.call(client.session.list_resources).resources
    uri = f"agentledger://conversations/{recorded.conversation_id}"
    assert uri in {r.uri for r in listed}
    assert len(listed) == 3  # two conversations and the subagent's
    (content,) = client.portal.call(client.session.read_resource, uri).contents
    record = json.loads(content.text)
    assert [m["content"] for m in record["messages"]] == [QUESTION, ANSWER]
    templates = client.portal.call(client.session.list_resource_templates).resource_templates
    assert [t.uri_template for t in templates] == ["agentledger://conversations/{conversation_id}"]


def test_an_unknown_conversation_uri_is_an_error_saying_so(client):
    with pytest.raises(MCPError, match="no conversation '0000000000'"):
        client.portal.call(client.session.read_resource, "agentledger://conversations/0000000000")


# --- query -----------------------------------------------------------------------------------


def test_query_answers_columns_and_rows(client, recorded):
    found = client.answer(
        "query", sql="-- runs by agent\nSELECT agent_name, depth FROM agent_runs ORDER BY depth"
    )
    assert found["columns"] == ["agent_name", "depth"]
    assert sorted(found["rows"]) == [["agent", 0], ["researcher", 1], ["weather-bot", 0]]
    assert (found["row_count"], found["truncated"]) == (3, False)
    assert client.answer("query", sql="VALUES (1, 'a%');")["rows"] == [[1, "a%"]]


def test_query_reads_the_full_text_index_and_json(client, recorded):
    matched = client.answer(
        "query",
        sql="SELECT m.conversation_id FROM conversation_messages_fts AS f"
        " JOIN conversation_messages AS m ON m.id = f.message_id"
        " WHERE conversation_messages_fts MATCH 'marmalade'",
    )
    assert matched["rows"] == [[recorded.conversation_id]]
    cities = client.answer("query", sql="SELECT arguments ->> '$.city' FROM tool_executions")
    assert ["Paris"] in cities["rows"]


WRITES = [
    "INSERT INTO conversations (id, kind, version, created_at, updated_at)"
    " VALUES ('x', 'main', 0, '2026-01-01', '2026-01-01')",
    "DELETE FROM conversation_messages",
    "UPDATE agent_runs SET status = 'failed'",
    "DROP TABLE agent_runs",
    "CREATE TABLE notes (x)",
    "ATTACH DATABASE '{dir}/attached.db' AS other",
    "PRAGMA writable_schema = ON",
    "VACUUM INTO '{dir}/copy.db'",
    "WITH doomed AS (SELECT id FROM agent_runs) DELETE FROM agent_runs",
    "SELECT 1; DELETE FROM conversations",
    "/* harmless */ DELETE FROM conversations",
    "SELECT * FROM pragma_writable_schema",
]


def test_query_refuses_every_write_and_the_ledger_file_is_unchanged(client, recorded):
    before = file_state(recorded.path)
    for statement in WRITES:
        message = client.error("query", sql=statement.format(dir=recorded.path.parent))
        assert "nothing" in message, statement
    assert file_state(recorded.path) == before
    with contextlib.closing(sqlite3.connect(recorded.path)) as db:
        assert db.execute("SELECT count(*) FROM agent_runs").fetchone() == (3,)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (f"{INFINITE} SELECT count(*) FROM n", "time limit of 1 s"),
        (f"{INFINITE} SELECT count(*) FROM n AS a, n AS b", "time limit of 1 s"),
        ("SELECT length(randomblob(1e9))", "larger than 10000000 bytes"),
        ("SELECT zeroblob(20000000)", "larger than 10000000 bytes"),
        ("SELECT load_extension('evil')", "not authorized to use function"),
    ],
)
def test_a_hostile_query_is_stopped_by_a_limit_with_a_clear_error(client, sql, message):
    started = time.monotonic()
    assert message in client.error("query", sql=sql)
    assert time.monotonic() - started < TIMEOUT + 5


def test_an_endless_query_returns_the_row_limit_and_says_it_was_truncated(client):
    found = client.answer("query", sql=f"{INFINITE} SELECT x FROM n")
    assert found["rows"] == [[x] for x in range(1, MAX_ROWS + 1)]
    assert found["truncated"] is True


# --- scopes ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tenants(recorded: Recorded) -> Iterator[Ledger]:
    """A copy of the ledger whose weather conversation belongs to tenant ``t1`` and owner
    ``alice``, and the subagent tree to tenant ``t2`` and owner ``bob`` (moved by raw SQL,
    unsealed: the checksum covers a tenant)."""
    path = recorded.path.parent / "tenants" / "ledger.db"
    path.parent.mkdir()
    shutil.copy(recorded.path, path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for table in ("conversations", "agent_runs"):
            db.execute(f"UPDATE {table} SET owner_id = 'bob', tenant_id = 't2', checksum = NULL")
        db.execute(
            "UPDATE conversations SET owner_id = 'alice', tenant_id = 't1' WHERE id = ?",
            [recorded.conversation_id],
        )
        db.execute(
            "UPDATE agent_runs SET owner_id = 'alice', tenant_id = 't1' WHERE id = ?",
            [recorded.run_id],
        )
        for table in ("conversation_messages", "step_executions", "tool_executions"):
            db.execute(f"UPDATE {table} SET tenant_id = 't2', checksum = NULL")
        db.execute(
            "UPDATE conversation_messages SET tenant_id = 't1' WHERE conversation_id = ?",
            [recorded.conversation_id],
        )
        for table in ("step_executions", "tool_executions"):
            db.execute(f"UPDATE {table} SET tenant_id = 't1' WHERE run_id = ?", [recorded.run_id])
    with Ledger.open(path, read_only=True) as ledger:
        yield ledger


def scoped_rows(ledger: Ledger, sql: str, **scope: str) -> list[list[Any]]:
    return read_only_query(ledger, sql, limits=QueryLimits(seconds=TIMEOUT), **scope).rows


@pytest.mark.parametrize(
    ("scope", "conversations", "runs", "messages", "tools"),
    [
        ({"tenant_id": "t1"}, 1, 1, 2, 1),
        ({"owner_id": "alice"}, 1, 1, 2, 1),
        ({"tenant_id": "t2"}, 2, 2, 4, 2),
        ({"tenant_id": "t2", "owner_id": "alice"}, 0, 0, 0, 0),
        ({"tenant_id": "nobody"}, 0, 0, 0, 0),
        ({}, 3, 3, 6, 3),
    ],
)
def test_a_scoped_query_reads_only_the_rows_of_its_scope(
    tenants, scope, conversations, runs, messages, tools
):
    counted = scoped_rows(
        tenants,
        "SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM agent_runs), "
        "(SELECT count(*) FROM conversation_messages), (SELECT count(*) FROM tool_executions)",
        **scope,
    )
    assert counted == [[conversations, runs, messages, tools]]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM main.conversations",
        "SELECT count(*) FROM main.agent_runs",
        "SELECT content FROM main.conversation_messages",
        "WITH everyone AS (SELECT * FROM main.conversations) SELECT id FROM everyone",
        "SELECT id FROM conversations UNION SELECT id FROM main.conversations",
        "SELECT (SELECT group_concat(id) FROM main.conversations)",
        "SELECT content FROM conversation_messages_fts WHERE conversation_messages_fts MATCH 'a'",
        "SELECT * FROM conversation_messages_fts_content",
        "SELECT * FROM agentledger_deletions",
        "SELECT * FROM sqlite_dbpage",
        "SELECT * FROM dbstat",
        "SELECT * FROM pragma_database_list",
        "SELECT 1 FROM pragma_writable_schema",
        "SELECT id FROM main.conversations AS c JOIN temp.conversations AS t USING (id)",
    ],
)
def test_a_scoped_query_cannot_reach_another_tenants_rows(tenants, sql):
    with pytest.raises(UsageError, match=r"refused|nothing was changed"):
        scoped_rows(tenants, sql, tenant_id="t1")


def test_a_scoped_query_reads_the_schema_but_no_rows_through_it(tenants, recorded):
    columns = scoped_rows(
        tenants, "SELECT name FROM pragma_table_info('conversations')", tenant_id="t1"
    )
    assert ["tenant_id"] in columns
    schema = scoped_rows(tenants, "SELECT name, sql FROM sqlite_master", tenant_id="t1")
    assert ["conversations"] in [[name] for name, _ in schema]
    assert recorded.tree_run_id not in json.dumps(schema)
    ids = scoped_rows(tenants, "SELECT id FROM temp.conversations", tenant_id="t1")
    assert ids == [[recorded.conversation_id]]


def test_a_scoped_server_keeps_every_tool_to_its_tenant(tenants, recorded):
    path = recorded.path.parent / "tenants" / "ledger.db"
    with client_of("--db", str(path), "--tenant", "t1") as c:
        assert c.answer("get_conversation", id=recorded.conversation_id)["messages"]
        assert "no run" in c.error("run_tree", run_id=recorded.tree_run_id)
        assert "no run" in c.error("get_trace", run_id=recorded.tree_run_id)
        assert [r["id"] for r in c.answer("list_runs")["runs"]] == [recorded.run_id]
        assert c.answer("search_conversations", query="Lisbon")["hits"] == []
        listed = c.portal.call(c.session.list_resources).resources
        assert [r.name for r in listed] == [recorded.conversation_id]
        assert c.answer("query", sql="SELECT count(*) FROM agent_runs")["rows"] == [[1]]


# --- the command -----------------------------------------------------------------------------


def test_serve_help_documents_every_option():
    result = invoke("mcp", "serve", "--help")
    assert result.exit_code == 0
    for option in ("--http", "--max-rows", "--query-timeout", "--read-only", "--tenant", "--db"):
        assert option in result.output
    assert "agentledger://conversations/{id}" in result.output


def test_serving_a_missing_ledger_says_what_to_do(tmp_path):
    result = invoke("mcp", "serve", "--db", str(tmp_path / "none.db"))
    assert result.exit_code == 1
    assert "no ledger at" in result.output
    assert not (tmp_path / "none.db").exists()


def test_without_the_mcp_sdk_the_command_says_which_extra_to_install(recorded):
    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "from agentledger.errors import ConfigurationError\n"
        "try:\n"
        "    import agentledger.integrations.mcp_server\n"
        "except ConfigurationError as exc:\n"
        "    print(exc, file=sys.stderr)\n"
        "from agentledger.cli import main\n"
        f"sys.argv = ['agentledger', 'mcp', 'serve', '--db', {str(recorded.path)!r}]\n"
        "main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    library, command = done.stderr.strip().splitlines()
    assert "The MCP SDK is not installed" in library
    assert "pip install 'agentledger[mcp]'" in library
    assert "pip install 'agentledger[mcp]'" in command
    assert done.stdout == ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout}s")


def test_serving_over_streamable_http_on_loopback_read_only(recorded):
    """--read-only: the ledger file is unchanged and no file is made beside it."""
    path = recorded.path.parent / "served" / "ledger.db"
    path.parent.mkdir()
    shutil.copy(recorded.path, path)
    before = file_state(path)
    port = free_port()
    args = [str(CONSOLE_SCRIPT), *SERVE, "--db", str(path), "--read-only"]
    process = subprocess.Popen(
        [*args, "--http", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def talk() -> tuple[Any, list[str]]:
        url = f"http://127.0.0.1:{port}/mcp"
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("get_conversation", {"id": recorded.conversation_id})
            listed = await session.list_resources()
            return found.structured_content, [r.name for r in listed.resources]

    try:
        wait_for_port(port, process)
        conversation, listed = anyio.run(talk)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert [m["content"] for m in conversation["messages"]] == [QUESTION, ANSWER]
    assert recorded.conversation_id in listed
    assert f"serving {path} over http://127.0.0.1:{port}/mcp" in err
    assert out == ""
    assert file_state(path) == before


# --- PostgreSQL ------------------------------------------------------------------------------


def app_role_url(owner_url: str, role: str) -> str:
    """Make the application role ``role`` as ``agentledger db app-role`` prints it; its URL."""
    result = invoke("db", "app-role", role)
    assert result.exit_code == 0, result.output
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(result.output.encode())
    parts = urlsplit(owner_url)
    return urlunsplit(parts._replace(netloc=f"{quote(role)}@{parts.hostname}:{parts.port}"))


def test_on_postgresql_query_is_read_only_timed_and_kept_to_a_tenant(
    pg_server: PostgresServer, pg_url
):
    recorded = record_a_run(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE probe")
    with client_of("--db", pg_url) as c:
        assert c.answer("query", sql="SELECT count(*) FROM agent_runs")["rows"] == [[1]]
        assert "read-only transaction" in c.error("query", sql="SELECT nextval('probe')")
        assert "data-modifying" in c.error(
            "query", sql="WITH gone AS (DELETE FROM agent_runs RETURNING id) SELECT * FROM gone"
        )
        assert "Seq Scan" in c.answer("query", sql="EXPLAIN SELECT * FROM agent_runs")["rows"][0][0]
        assert "one statement only" in c.error(
            "query", sql="EXPLAIN SELECT 1; DELETE FROM agent_runs"
        )
        endless = c.answer("query", sql=f"{INFINITE} SELECT x FROM n")
        assert (len(endless["rows"]), endless["truncated"]) == (MAX_ROWS, True)
        assert "time limit of 1 s" in c.error("query", sql="SELECT pg_sleep(10)")
        for several in (
            "SELECT 1; DELETE FROM agent_runs",
            "SELECT 1; COMMIT; DELETE FROM agent_runs",
        ):
            assert "one statement only" in c.error("query", sql=several)
        assert c.answer("query", sql="SELECT 'a%' LIKE 'a%%';")["rows"] == [[True]]
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM agent_runs").fetchone() == (1,)
        assert conn.execute("SELECT is_called FROM probe").fetchone() == (False,)
        conn.execute("UPDATE conversations SET tenant_id = 't1', checksum = NULL")
        conn.execute("UPDATE agent_runs SET tenant_id = 't1', checksum = NULL")
    with Ledger.open(pg_url, read_only=True) as ledger:
        with pytest.raises(UsageError, match="superuser"):
            read_only_query(ledger, "SELECT id FROM conversations", tenant_id="t1")
        with pytest.raises(UsageError, match="compares tenants only"):
            read_only_query(ledger, "SELECT id FROM conversations", owner_id="alice")
    role = f"mcp_app_{os.getpid()}"
    app_url = app_role_url(pg_url, role)
    try:
        with Ledger.open(app_url, migrate=False, read_only=True) as ledger:
            mine = read_only_query(ledger, "SELECT id FROM conversations", tenant_id="t1")
            theirs = read_only_query(ledger, "SELECT id FROM conversations", tenant_id="t2")
            for changing in (
                "SELECT set_config('agentledger.tenant_id', 't2', true)",
                "SELECT query_to_xml('SELECT 1', true, true, '')",
                "SELECT U&\"\\0073et_config\"('agentledger.tenant_id', 't2', true)",
            ):
                with pytest.raises(UsageError, match="could change the tenant"):
                    read_only_query(ledger, changing, tenant_id="t1")
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')
    assert mine.rows == [[recorded.conversation_id]]
    assert theirs.rows == []


def test_an_agent_remembers_through_another_ledger_served_over_mcp(recorded, tmp_path):
    """An agent of ours whose tool source is `agentledger mcp serve` over another ledger: it
    searches that ledger's conversations, reads the one it found, and answers from it; its own
    ledger records the calls as tools of the `memory` server, and the served ledger is unchanged."""
    from agentledger.integrations.mcp import MCPServer

    served = recorded.path.read_bytes()
    memory = MCPServer.stdio(
        sys.executable,
        ["-m", "agentledger", "mcp", "serve", "--db", str(recorded.path), "--read-only"],
        name="memory",
    )
    search_call = ToolCall(id="m1", name="search_conversations", arguments={"query": "weather"})
    llm = ScriptedLLM(
        [
            InferenceResponse(tool_calls=[search_call]),
            InferenceResponse(
                tool_calls=[
                    ToolCall(
                        id="m2", name="get_conversation", arguments={"id": recorded.conversation_id}
                    )
                ]
            ),
            InferenceResponse(content="Last time you asked about the weather."),
        ]
    )
    with Ledger.open(tmp_path / "own.db") as own:
        agent = AgentBuilder().with_llm(llm).with_ledger(own).with_mcp_servers([memory]).build()
        with agent:
            result = agent.run("What did I ask you before?")
        found, read = own.tool_executions(result.run_id)
    offered = {t.name for t in llm.requests[0].tools}
    assert offered >= TOOLS
    assert not found.is_error and recorded.conversation_id in found.result
    assert not read.is_error and QUESTION in read.result and ANSWER in read.result
    assert {(e.metadata["mcp_server"], e.metadata["mcp_tool"]) for e in (found, read)} == {
        ("memory", "search_conversations"),
        ("memory", "get_conversation"),
    }
    assert result.answer == "Last time you asked about the weather."
    assert recorded.path.read_bytes() == served

"""MCP servers as tool sources: real servers from PyPI (``mcp-server-time``, ``mcp-server-git``,
over stdio) and a small one of our own (``support/mcp_server.py``, over streamable HTTP on
loopback and over stdio) called by agents the script drives, checked in the ledger's rows."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from agentledger import AgentBuilder, ScriptedLLM, SubagentSpec, tool
from agentledger.errors import ConfigurationError, ToolServerError
from agentledger.integrations.mcp import MCPServer
from agentledger.ledger import Ledger
from support.cli import flat, ok
from support.subagents import answer, call, spawn

OUR_SERVER = Path(__file__).parent / "support" / "mcp_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def ours_url() -> Iterator[str]:
    """Our server over streamable HTTP, started once for the module."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(OUR_SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("our MCP server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def ours_stdio(**options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, [str(OUR_SERVER), "stdio"], **options)


def time_server() -> MCPServer:
    return MCPServer.stdio(
        sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"], name="time"
    )


@pytest.fixture
def ledger_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ledger.db"
    Ledger.open(path).close()
    yield path


def builder(ledger_path: Path, *responses: Any) -> AgentBuilder:
    return AgentBuilder().with_llm(ScriptedLLM(responses)).with_ledger(Ledger.open(ledger_path))


def tool_rows(ledger_path: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """The tool executions as SQL sees them, metadata decoded."""
    with sqlite3.connect(ledger_path) as conn:
        conn.row_factory = sqlite3.Row
        where, params = ("WHERE run_id = ?", (run_id,)) if run_id else ("", ())
        rows = conn.execute(
            f"SELECT * FROM tool_executions {where} ORDER BY started_at, position", params
        ).fetchall()
    return [{**dict(row), "metadata": json.loads(row["metadata"] or "{}")} for row in rows]


def test_the_time_servers_tool_is_shown_called_and_recorded_with_its_server(ledger_path):
    llm = ScriptedLLM(
        [call("get_current_time", timezone="Europe/Paris"), answer("It is evening in Paris.")]
    )
    agent = AgentBuilder().with_llm(llm).with_ledger(Ledger.open(ledger_path))
    with agent.with_mcp_servers([time_server()]).build() as built:
        result = built.run("What time is it in Paris?")
    assert result.answer == "It is evening in Paris."
    schemas = {s.name: s for s in llm.requests[0].tools}  # as the server gave them
    assert set(schemas) == {"get_current_time", "convert_time"}
    assert schemas["get_current_time"].parameters["required"] == ["timezone"]
    assert schemas["get_current_time"].parameters["properties"]["timezone"]["type"] == "string"
    (row,) = tool_rows(ledger_path, result.run_id)
    assert row["tool_name"] == "get_current_time" and not row["is_error"]
    assert json.loads(row["result"])["timezone"] == "Europe/Paris"
    assert row["metadata"]["mcp_server"] == "time"
    assert row["metadata"]["mcp_tool"] == "get_current_time"
    assert row["metadata"]["structured_content"]["timezone"] == "Europe/Paris"
    trace = flat(ok("--db", str(ledger_path), "trace", result.run_id))
    assert "✓ get_current_time (MCP time) · " in trace


def test_the_git_server_reads_a_repository_the_test_made(ledger_path, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "First notes"], check=True)
    (repo / "todo.txt").write_text("later\n")
    server = MCPServer.stdio(sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)])
    agent = (
        builder(
            ledger_path,
            call("git_status", repo_path=str(repo)),
            call("git_log", "call_1", repo_path=str(repo), max_count=5),
            answer("One commit, one new file."),
        )
        .with_mcp_servers([server])
        .build()
    )
    with agent:
        result = agent.run("What is in the repository?")
    status, log = tool_rows(ledger_path, result.run_id)
    assert "todo.txt" in status["result"] and "main" in status["result"]
    assert "First notes" in log["result"]
    assert {status["metadata"]["mcp_server"], log["metadata"]["mcp_tool"]} == {
        "mcp_server_git",
        "git_log",
    }


def test_server_errors_are_tool_errors_the_model_answers_from(ledger_path, ours_url):
    agent = (
        builder(
            ledger_path,
            call("divide", a=1, b=0),
            call("refuse", "call_4"),
            call("quota", "call_1"),
            call("add", "call_2", a="one", b=2),
            call("add", "call_3", a=1, b=2),
            answer("1 + 2 = 3; I could not divide by zero."),
        )
        .with_mcp_servers([MCPServer.http(ours_url, name="ours")])
        .build()
    )
    with agent:
        result = agent.run("Do some arithmetic.")
    assert result.answer == "1 + 2 = 3; I could not divide by zero."
    divide, refuse, quota, bad, add = tool_rows(ledger_path, result.run_id)
    assert divide["is_error"] and "cannot divide by zero" in divide["result"]
    assert refuse["is_error"] and refuse["result"] == (
        "Error: MCP server 'ours' answered tool 'refuse' with an error: refused: this tool "
        "takes no calls today (code -32602)"
    )
    assert quota["is_error"] and quota["result"] == "Error: quota exceeded"
    assert bad["is_error"] and "invalid arguments for tool 'add'" in bad["result"]
    assert "a: 'one' is not of type 'integer'" in bad["result"]
    assert not add["is_error"] and add["result"] == "3"
    assert add["metadata"]["structured_content"] == {"result": 3}
    for row in (divide, refuse, quota, bad, add):
        assert row["metadata"]["mcp_server"] == "ours"


def test_a_tool_that_hangs_past_its_timeout_is_a_tool_error(ledger_path, ours_url):
    server = MCPServer.http(ours_url, name="ours", timeout=0.5)
    agent = (
        builder(
            ledger_path,
            call("slow", seconds=5),
            call("add", "call_1", a=2, b=2),
            answer("It timed out; 2 + 2 = 4."),
        )
        .with_mcp_servers([server])
        .build()
    )
    with agent:
        result = agent.run("Be slow.")
    slow, add = tool_rows(ledger_path, result.run_id)
    assert slow["is_error"]
    assert "did not answer tool 'slow' within 0.5 s" in slow["result"]
    assert slow["duration_ms"] < 5000
    assert add["result"] == "4"  # the session outlived the timeout
    assert result.status.value == "completed"


def test_a_server_that_dies_mid_run_is_a_tool_error_and_the_next_run_reconnects(ledger_path):
    agent = (
        builder(
            ledger_path,
            call("die"),
            call("add", "call_1", a=1, b=1),
            answer("The server died."),
            call("add", a=2, b=3),
            answer("5"),
        )
        .with_mcp_servers([ours_stdio(name="local")])
        .build()
    )
    with agent:
        first = agent.run("Die.")
        second = agent.run("Add.", first.conversation_id)
    died, after = tool_rows(ledger_path, first.run_id)
    assert died["is_error"] and "closed the connection during the call" in died["result"]
    assert "the server was told to die" in died["result"]
    assert "its result is unknown" in died["result"]
    assert after["is_error"] and "the call was not made" in after["result"]
    assert first.status.value == "completed"
    (added,) = tool_rows(ledger_path, second.run_id)
    assert added["result"] == "5" and not added["is_error"]


EXITS_WITHOUT_CLOSING = """
import sys
from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM, ToolCall
from agentledger.integrations.mcp import MCPServer

env = {"MCP_TEST_PID_FILE": sys.argv[2]}
server = MCPServer.stdio(sys.executable, [sys.argv[1], "stdio"], env=env)
calls = [ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})]
llm = ScriptedLLM([InferenceResponse(tool_calls=calls), InferenceResponse(content="3")])
agent = AgentBuilder().with_llm(llm).with_mcp_servers([server]).build()
print(agent.run("1 + 2?").answer)
"""


def test_servers_an_agent_left_open_are_stopped_when_the_interpreter_exits(tmp_path):
    pid_file = tmp_path / "server.pid"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", EXITS_WITHOUT_CLOSING, str(OUR_SERVER), pid_file],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")
    with pytest.raises(ProcessLookupError):  # stopped before the interpreter was gone
        os.kill(int(pid_file.read_text()), 0)


def test_a_changed_tool_list_is_listed_again_at_the_next_run(ledger_path, ours_url):
    agent = (
        builder(ledger_path, call("grow"), answer("grown"), call("extra"), answer("extra said hi"))
        .with_mcp_servers([MCPServer.http(ours_url, name="ours")])
        .build()
    )
    with agent:
        first = agent.run("Grow.")
        assert "extra" not in agent.tools.names()  # listed at the start of the run
        second = agent.run("Use the new tool.", first.conversation_id)
        assert "extra" in agent.tools.names()
    (extra,) = tool_rows(ledger_path, second.run_id)
    assert extra["result"] == "extra says hi"


def test_tools_of_the_same_name_are_prefixed_by_their_servers_name(ledger_path, ours_url):
    @tool
    def add(a: int, b: int) -> int:
        """The agent's own add."""
        return a + b + 100

    agent = builder(
        ledger_path,
        call("add", a=1, b=1),
        call("remote_add", "call_1", a=1, b=1),
        call("local_add", "call_2", a=2, b=2),
        answer("added thrice"),
    )
    agent = (
        agent.with_tools([add])
        .with_mcp_servers(
            [MCPServer.http(ours_url, name="remote"), MCPServer.http(ours_url, name="local")]
        )
        .build()
    )
    with agent:
        result = agent.run("Add.")
        assert {"add", "remote_add", "local_add", "remote_quota"} <= set(agent.tools.names())
    trace = flat(ok("--db", str(ledger_path), "trace", result.run_id))
    assert "✓ add · " in trace and "✓ local_add (MCP local: add) · " in trace
    own, remote, local = tool_rows(ledger_path, result.run_id)
    assert (own["result"], own["metadata"].get("mcp_server")) == ("102", None)
    assert (remote["result"], remote["metadata"]["mcp_server"]) == ("2", "remote")
    assert (local["result"], local["metadata"]) == (
        "4",
        {"mcp_server": "local", "mcp_tool": "add", "structured_content": {"result": 4}},
    )


def test_a_name_model_apis_refuse_is_offered_in_their_alphabet(ledger_path, ours_url):
    agent = builder(ledger_path, call("text_upper", text="hi"), answer("HI"))
    with agent.with_mcp_servers([MCPServer.http(ours_url, name="ours")]).build() as built:
        result = built.run("Shout.")
    (row,) = tool_rows(ledger_path, result.run_id)
    assert (row["tool_name"], row["result"]) == ("text_upper", "HI")
    assert row["metadata"]["mcp_tool"] == "text.upper"


def test_a_prefixed_name_the_agent_already_has_leaves_the_servers_tools_out(
    ledger_path, ours_url, caplog
):
    @tool
    def add(a: int, b: int) -> int:
        """The agent's own add."""
        return a + b

    @tool
    def ours_add(a: int, b: int) -> int:
        """Another of its own, named as the server's add would be."""
        return a + b

    agent = builder(ledger_path, answer("fine")).with_tools([add, ours_add])
    with (
        caplog.at_level(logging.WARNING, "agentledger._loop._agent"),
        agent.with_mcp_servers([MCPServer.http(ours_url, name="ours")]).build() as built,
    ):
        assert built.run("Hello.").answer == "fine"
        assert built.tools.names() == ("add", "ours_add")
    assert "two tools are named 'ours_add'" in caplog.text


def test_the_async_loop_calls_the_servers_tools_with_the_headers_given(ledger_path, ours_url):
    server = MCPServer.http(ours_url, name="ours", headers={"Authorization": "Bearer t0ken"})
    script = [call("add", a=20, b=22), call("authorization", "call_1"), answer("42")]
    with builder(ledger_path, *script).with_mcp_servers([server]).build() as agent:
        result = asyncio.run(agent.arun("Add."))
    add, authorization = tool_rows(ledger_path, result.run_id)
    assert (add["result"], add["metadata"]["mcp_tool"]) == ("42", "add")
    assert authorization["result"] == "Bearer t0ken"


def test_a_subagent_calls_the_tools_of_its_own_mcp_server(ledger_path, ours_url):
    spec = SubagentSpec(
        name="calculator",
        description="Adds numbers.",
        mcp_servers=[MCPServer.http(ours_url, name="ours")],
    )
    agent = builder(
        ledger_path,
        spawn(("calculator", "add 3 and 4")),
        call("add", a=3, b=4),
        answer("7"),
        answer("The calculator says 7."),
    )
    with agent.with_subagents([spec]).build() as parent:
        assert "add" not in parent.tools.names()
        result = parent.run("What is 3 + 4?")
    assert result.answer == "The calculator says 7."
    child = next(r for r in tool_rows(ledger_path) if r["run_id"] != result.run_id)
    assert (child["result"], child["metadata"]["mcp_server"]) == ("7", "ours")


def test_a_resumed_run_reconnects_to_its_servers(ledger_path, ours_url):
    def broken(_request: Any) -> Any:
        raise ConnectionError("the provider went away")

    servers = [MCPServer.http(ours_url, name="ours")]
    first = builder(ledger_path, call("add", a=1, b=2), broken).with_mcp_servers(servers).build()
    with first:
        failed = first.run("Add.")
    assert failed.status.value == "failed"
    resumed = builder(ledger_path, answer("3")).with_mcp_servers(servers).build()
    with resumed:
        result = resumed.resume(failed.run_id)
        assert "add" in resumed.tools.names()
    assert result.answer == "3"
    again = builder(ledger_path, call("add", a=5, b=5), answer("10"))
    with again.with_mcp_servers(servers).build() as agent:
        (row,) = tool_rows(ledger_path, agent.run("Add.").run_id)
    assert row["result"] == "10"


def test_tool_stats_by_server_counts_each_servers_calls(db_url, ours_url, tmp_path):
    """On the ledger attached and on the analytics cache's copy of it, each backend."""
    pytest.importorskip("duckdb")
    from agentledger.analytics import Analytics

    @tool
    def echo(text: str) -> str:
        """Say it back."""
        return text

    script = [call("add", a=1, b=2), call("quota", "call_1"), call("echo", "call_2", text="hi")]
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([*script, answer("done")]))
        .with_ledger(Ledger.open(db_url))
        .with_tools([echo])
        .with_mcp_servers([MCPServer.http(ours_url, name="ours")])
    )
    with agent.build() as built:
        built.run("Go.")
    for cache in (None, tmp_path / "cache.duckdb"):
        with Analytics.open(db_url, cache=cache) as analytics:
            relation = analytics.tool_stats(by="server")
            rows = relation.fetchall()
        stats = {row[0]: dict(zip(relation.columns, row, strict=True)) for row in rows}
        assert (stats["ours"]["tools"], stats["ours"]["calls"], stats["ours"]["errors"]) == (
            2,
            2,
            1,
        )
        assert (stats[None]["tools"], stats[None]["calls"], stats[None]["errors"]) == (1, 1, 0)
        assert stats["ours"]["p50_ms"] is not None
    with (
        Analytics.open(db_url) as analytics,
        pytest.raises(ConfigurationError, match="give agent, model or server"),
    ):
        analytics.tool_stats(by="tool")  # type: ignore[arg-type]


NEVER_STARTS = {
    "a module not installed": (["-m", "mcp_server_nonexistent"], "No module named"),
    "a command that exits at once": (
        ["-c", "import sys; sys.stderr.write('boom: no config'); sys.exit(3)"],
        "boom: no config",
    ),
}


async def streamed_async(agent: Any, text: str, conversation_id: str) -> None:
    async for _ in agent.astream(text, conversation_id):
        pass


RUN_SHELLS = {
    "run": lambda agent, text, cid: agent.run(text, cid),
    "arun": lambda agent, text, cid: asyncio.run(agent.arun(text, cid)),
    "stream": lambda agent, text, cid: list(agent.stream(text, cid)),
    "astream": lambda agent, text, cid: asyncio.run(streamed_async(agent, text, cid)),
}


@pytest.mark.parametrize(
    ("shell", "never"),
    [
        ("run", "a module not installed"),
        ("arun", "a command that exits at once"),
        ("stream", "a module not installed"),
        ("astream", "a command that exits at once"),
    ],
)
def test_a_server_that_never_starts_is_an_error_at_the_runs_start_and_nothing_is_written(
    ledger_path, shell, never
):
    args, said = NEVER_STARTS[never]
    with Ledger.open(ledger_path) as ledger:
        conversation_id = ledger.create_conversation(title="Time").id
    llm = ScriptedLLM([answer("never asked")])
    server = MCPServer.stdio(sys.executable, args, name="clock")
    agent = AgentBuilder().with_llm(llm).with_ledger(Ledger.open(ledger_path))
    with agent.with_mcp_servers([server]).build() as built:
        with pytest.raises(ToolServerError) as raised:
            RUN_SHELLS[shell](built, "What time is it?", conversation_id)
        assert "MCP server 'clock' could not be started" in str(raised.value)
        assert said in str(raised.value)  # the end of its stderr
        assert "with_mcp_servers" in str(raised.value)  # what to do
        assert (raised.value.server, said in (raised.value.stderr or "")) == ("clock", True)
        assert llm.requests == []  # the model was never asked
    with sqlite3.connect(ledger_path) as conn:
        # The run never began: no run row, the user's message not written (the caller still
        # holds it, and a retry must not store it twice), the conversation free and unchanged.
        assert conn.execute("SELECT COUNT(*) FROM agent_runs").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM conversation_messages").fetchone() == (0,)
        assert conn.execute(
            "SELECT lease_holder, lease_run_id, version FROM conversations"
        ).fetchall() == [(None, None, 0)]


def test_a_server_listed_before_that_cannot_come_back_fails_its_calls_as_tool_errors(
    ledger_path, tmp_path
):
    once = tmp_path / "started"
    starts_once = (
        "import os, runpy, sys\n"
        "if os.path.exists(sys.argv[1]): sys.exit('started once already')\n"
        "open(sys.argv[1], 'w').close()\n"
        "sys.argv = [sys.argv[2], 'stdio']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    args = ["-c", starts_once, str(once), str(OUR_SERVER)]
    server = MCPServer.stdio(sys.executable, args, name="local")
    agent = (
        builder(
            ledger_path,
            call("die"),
            answer("It died."),
            call("add", a=2, b=3),
            answer("The server is gone."),
        )
        .with_mcp_servers([server])
        .build()
    )
    with agent:
        first = agent.run("Die.")
        second = agent.run("Add.", first.conversation_id)  # its server cannot start again
    assert (first.status.value, second.status.value) == ("completed", "completed")
    (added,) = tool_rows(ledger_path, second.run_id)
    assert added["is_error"] and "MCP server 'local' is not running" in added["result"]
    assert "started once already" in added["result"] and "the call was not made" in added["result"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MCPServer.stdio("python", ["-m", "x"], name="no spaces"), "cannot prefix"),
        (lambda: MCPServer.stdio("python", "-m x"), "list of strings"),
        (lambda: MCPServer.http("127.0.0.1:8000/mcp"), "http:// or https://"),
        (lambda: MCPServer.http("http://h/mcp", timeout=0), "positive number of seconds"),
        (lambda: AgentBuilder().with_mcp_servers(["python -m x"]), "MCPServer.stdio"),
        (
            lambda: AgentBuilder().with_mcp_servers([time_server(), time_server()]),
            "two MCP servers are named 'time'",
        ),
    ],
)
def test_bad_server_definitions_are_refused_with_what_to_do(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_default_names_come_from_the_module_or_the_command_or_the_host():
    assert time_server().name == "time"
    assert MCPServer.stdio("python", ["-m", "mcp_server_git"]).name == "mcp_server_git"
    assert MCPServer.stdio("/usr/bin/mcp-server-git").name == "mcp-server-git"
    assert MCPServer.http("http://127.0.0.1:9/mcp").name == "127_0_0_1"

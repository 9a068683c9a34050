"""The demo runs offline, end to end, and shows what it promises."""

import contextlib
import io
import sqlite3

from click.testing import CliRunner
from rich.console import Console

from agentledger import AgentStatus, Role, StepType
from agentledger.cli import cli
from agentledger.cli.demo import TEAM_TURN, TURNS, run_demo


def test_the_demo_keeps_the_conversation_clean_over_three_turns(tmp_path):
    output = io.StringIO()
    db = tmp_path / "demo.db"
    states = run_demo(Console(file=output, width=120), db_path=db, chunk_delay=0)
    final = states[-1]
    assert [m.role for m in final.messages()] == [Role.USER, Role.ASSISTANT] * 3
    assert [m.content for m in final.messages() if m.role is Role.USER] == [*TURNS, TEAM_TURN]
    assert all(s.status is AgentStatus.COMPLETED for s in states)
    assert final.execution_buffer().is_empty()
    assert "235.52 EUR" in final.messages()[1].content  # built from the tools' real results
    assert "353.28 EUR" in final.messages()[3].content
    assert "353.28 EUR" in final.messages()[5].content and "reviewer" in final.messages()[5].content
    steps = [e.step for s in states for e in s.step_executions]
    assert [s.step_type for s in steps].count(StepType.TOOL_USE) == 7
    assert sum(len(s.tool_errors) for s in steps) == 1
    printed = output.getvalue()
    # Each turn streamed as it came, its question first, and its answer the one stored.
    answers = [m.content for m in final.messages() if m.role is Role.ASSISTANT]
    for question, answer in zip([*TURNS, TEAM_TURN], answers, strict=True):
        assert f"user: {question}\n" in printed
        assert f"\n{answer}\n\n" in printed
    assert '\n  → convert_currency(amount="three nights\' worth"' in printed
    # The subagents' runs, indented under the calls that spawned them.
    assert '\n  → spawn_subagent(subagent="reviewer"' in printed
    assert "\n  ↳ reviewer\n  The total matches three nights at the quoted rate" in printed
    assert '\n  ↳ researcher\n    → get_weather(city="Lisbon")\n' in printed
    output = " ".join(printed.split())  # its line wrapping undone
    for expected in (
        "Turn 1",
        "Turn 2",
        "Turn 3",
        "Summary",
        "get_weather",
        "invalid arguments",
        "run tree",
        "researcher",
        "reviewer",
        "with subagents",
    ):
        assert expected in output
    assert "identical" in output and "DIFFERENT" not in output  # traces rebuilt from the rows
    assert str(db) in output


def test_the_demo_leaves_a_ledger_that_sql_can_read(tmp_path):
    db = tmp_path / "demo.db"
    run_demo(Console(file=io.StringIO(), width=120), db_path=db, chunk_delay=0)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (main,) = conn.execute("SELECT id FROM conversations WHERE kind = 'main'").fetchone()
        roles = [
            r
            for (r,) in conn.execute(
                "SELECT role FROM conversation_messages WHERE conversation_id = ? ORDER BY seq",
                (main,),
            )
        ]
        assert roles == ["user", "assistant"] * 3
        assert conn.execute("SELECT COUNT(*) FROM execution_buffer_rows").fetchone() == (0,)
        statuses = {s for (s,) in conn.execute("SELECT status FROM agent_runs")}
        assert statuses == {"completed"}
        # 6 tool calls in turns 1-2, 2 spawns and the researcher's 3 calls in turn 3
        assert conn.execute("SELECT COUNT(*) FROM tool_executions").fetchone() == (11,)
        subagents = conn.execute(
            "SELECT r.agent_name, r.depth, c.kind FROM agent_runs r "
            "JOIN conversations c ON c.id = r.conversation_id "
            "WHERE r.parent_run_id IS NOT NULL ORDER BY r.started_at"
        ).fetchall()
        assert subagents == [("researcher", 1, "subagent"), ("reviewer", 1, "subagent")]


def test_the_cli_runs_the_demo_streaming_its_answers_and_reports_its_version(tmp_path):
    runner = CliRunner()
    db = tmp_path / "demo.db"
    result = runner.invoke(cli, ["demo", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "The three turns, as they stream" in result.output
    assert "Turn 2" in result.output
    with contextlib.closing(sqlite3.connect(db)) as conn:
        answers = conn.execute(
            "SELECT m.content FROM conversation_messages m "
            "JOIN conversations c ON c.id = m.conversation_id "
            "WHERE c.kind = 'main' AND m.role = 'assistant' ORDER BY m.seq"
        ).fetchall()
    assert len(answers) == 3
    for (answer,) in answers:  # printed as streamed, whole, on a line of its own
        assert f"\n{answer}\n" in result.output
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and "agentledger" in version.output

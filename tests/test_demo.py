"""The demo runs offline, end to end, and shows what it promises."""

import contextlib
import io
import sqlite3

from click.testing import CliRunner
from rich.console import Console

from agentledger import AgentStatus, Role, StepType
from agentledger.cli import cli
from agentledger.cli._demo_cache import PromptCache, reference_prompt
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
        (main,) = conn.execute(
            "SELECT DISTINCT conversation_id FROM agent_runs WHERE agent_name = 'travel-assistant'"
        ).fetchone()
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
    result = runner.invoke(cli, ["demo", "--db", str(db)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    # Piped, at the width COLUMNS gives: its rules span it, its tables and its tool lines fit
    # in it (the streamed answers are left for the terminal to wrap).
    drawn = [line for line in result.output.splitlines() if line[:1] in set("─┏┃┡│└")]
    assert {len(line) for line in drawn if line.startswith("─")} == {80}
    assert max(len(line) for line in drawn) <= 80
    tool_lines = [line for line in result.output.splitlines() if line.lstrip()[:1] in "→←"]
    assert tool_lines and max(len(line) for line in tool_lines) <= 80
    assert "The three turns, as they stream" in result.output
    assert "Turn 2" in result.output
    with contextlib.closing(sqlite3.connect(db)) as conn:
        answers = conn.execute(
            "SELECT m.content FROM conversation_messages m WHERE m.role = 'assistant' "
            "AND m.conversation_id IN (SELECT conversation_id FROM agent_runs "
            "WHERE agent_name = 'travel-assistant') ORDER BY m.seq"
        ).fetchall()
    assert len(answers) == 3
    for (answer,) in answers:  # printed as streamed, whole, on a line of its own
        assert f"\n{answer}\n" in result.output
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and "agentledger" in version.output


def test_the_demo_s_second_cached_turn_reads_the_first_from_the_cache_and_costs_less(tmp_path):
    output = io.StringIO()
    db = tmp_path / "demo.db"
    run_demo(Console(file=output, width=120), db_path=db, chunk_delay=0)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT r.agent_name, s.input_tokens, s.cache_read_tokens, s.cache_write_tokens, "
            "s.cost_usd FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
            "WHERE r.agent_name LIKE 'travel-assistant-%' ORDER BY r.started_at"
        ).fetchall()
    cached = [r[1:] for r in rows if r[0] == "travel-assistant-cached"]
    uncached = [r[1:] for r in rows if r[0] == "travel-assistant-uncached"]
    assert len(cached) == len(uncached) == 2
    (_, first_read, first_written, _), (second_in, read, written, cost) = cached
    # The first turn writes its prompt (past Sonnet's 1,024-token minimum) to the cache; the
    # second reads all of it back and writes only what the first answer and the new question
    # added.
    assert first_read == 0 and first_written > 1024
    assert read == first_written and 0 < written < 100
    assert second_in == read + written  # the breakpoint ends the prompt: the new question
    assert all(r[1] == r[2] == 0 for r in uncached)
    saved = 1 - cost / uncached[1][3]
    assert saved > 0.7
    printed = " ".join(output.getvalue().split())
    assert "Prompt caching: the second turn reads the first from the cache" in printed
    assert f"${cost:.6f} instead of ${uncached[1][3]:.6f}, {saved:.0%} less" in printed


def _body(system: str, *texts: str, mark: bool = True) -> dict:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": t}]}
        for i, t in enumerate(texts)
    ]
    if mark:
        turns[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-5", "system": system, "messages": turns}


def test_the_demo_s_server_counts_the_cache_from_the_breakpoints_it_is_sent():
    cache, prompt = PromptCache(), reference_prompt() * 2
    first = cache.usage(_body(prompt, "Hello?"))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1024
    second = cache.usage(_body(prompt, "Hello?", "Hi.", "And then?"))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    # Without a breakpoint nothing is read or written; a prompt that changed reads nothing.
    unmarked = PromptCache().usage(_body(prompt, "Hello?", mark=False))
    assert unmarked["cache_read_input_tokens"] == unmarked["cache_creation_input_tokens"] == 0
    changed = cache.usage(_body(prompt + " Be brief.", "Hello?", "Hi.", "And then?"))
    assert changed["cache_read_input_tokens"] == 0
    # A prefix under the model's minimum is not cached.
    short = PromptCache()
    short.usage(_body("Be brief.", "Hello?"))
    assert (
        short.usage(_body("Be brief.", "Hello?", "Hi.", "Go on."))["cache_read_input_tokens"] == 0
    )

"""The demo runs offline, end to end, and shows what it promises; its ledger is a file of
its own in the current directory, started afresh by the next demo and never written over when
it is anything else."""

import contextlib
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agentledger import AgentBuilder, Ledger, ScriptedLLM
from agentledger._values import money
from agentledger.cli import cli
from agentledger.cli._demo_cache import PromptCache, reference_prompt
from agentledger.cli.demo import TEAM_TURN, TURNS
from agentledger.llm import InferenceResponse

DEMO_FILE = "agentledger-demo.db"
WIDTH = 80
"""The width the demo is run at here, through ``COLUMNS`` (its output is piped)."""


@dataclass(frozen=True)
class Demo:
    """What one ``agentledger demo`` left: its folder, its ledger and what it printed."""

    folder: Path
    output: str

    @property
    def db(self) -> Path:
        return self.folder / DEMO_FILE

    def query(self, sql: str, *params: object) -> list[tuple]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            return conn.execute(sql, params).fetchall()


def run_demo_in(folder: Path, *args: str) -> Result:
    """``agentledger demo`` run from ``folder``, with the temporary directory pointed at an
    empty folder of its own (the demo must leave nothing there)."""
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    with contextlib.chdir(folder), pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(scratch))
        result = CliRunner().invoke(cli, ["demo", *args], env={"COLUMNS": str(WIDTH)})
    assert list(scratch.iterdir()) == [], "the demo left files in the temporary directory"
    scratch.rmdir()
    return result


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo, run once for the tests that read what it printed and recorded."""
    folder = tmp_path_factory.mktemp("demo")
    result = run_demo_in(folder)
    assert result.exit_code == 0, result.output
    return Demo(folder, result.output)


def test_the_demo_keeps_the_conversation_clean_over_three_turns(demo):
    ((main,),) = demo.query(
        "SELECT id FROM conversations WHERE title = 'A trip to Lisbon' AND kind = 'main'"
    )
    messages = demo.query(
        "SELECT role, content FROM conversation_messages WHERE conversation_id = ? ORDER BY seq",
        main,
    )
    assert [role for role, _ in messages] == ["user", "assistant"] * 3
    assert [content for role, content in messages if role == "user"] == [*TURNS, TEAM_TURN]
    answers = [content for role, content in messages if role == "assistant"]
    assert "235.52 EUR" in answers[0]  # built from the tools' real results
    assert "353.28 EUR" in answers[1]
    assert "353.28 EUR" in answers[2] and "reviewer" in answers[2]
    assert demo.query("SELECT DISTINCT status FROM agent_runs") == [("completed",)]
    assert demo.query("SELECT count(*) FROM execution_buffer_rows") == [(0,)]
    own_steps = (
        "FROM step_executions s JOIN agent_runs r ON r.id = s.run_id WHERE r.conversation_id = ?"
    )
    assert demo.query(f"SELECT count(*) {own_steps} AND s.step_type = 'tool_use'", main) == [(7,)]
    printed = demo.output
    # Each turn streamed as it came, its question first, and its answer the one stored.
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


def test_the_demo_says_what_happened_in_plain_words(demo):
    output = " ".join(demo.output.split())

    for jargon in ("judged by", "tool_calls:", "error: Error:", "Error: invalid"):
        assert jargon not in output
    # The tool error, once marked; each step, whether the run went on and why.
    assert "← error: invalid arguments for tool 'convert_currency'" in output
    assert "completed: the model answered · 3 steps" in output
    assert "went on: 1 tool call" in output and "stopped: the model answered" in output


def test_the_demo_writes_its_ledger_here_and_prints_short_commands_to_look_around(demo):
    assert sorted(p.name for p in demo.folder.iterdir()) == [DEMO_FILE]
    lines = demo.output.splitlines()
    start = lines.index(f"The ledger is the SQLite file {DEMO_FILE}. Look around:")
    commands = [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]
    assert commands[:2] == [
        f"agentledger --db {DEMO_FILE} conversations",
        f"agentledger --db {DEMO_FILE} runs",
    ]
    assert len(commands) >= 4 and all(len(f"  {c}") <= 80 for c in commands)
    assert str(demo.folder) not in demo.output  # the commands name the file, not where it is
    # It ends by saying how to open the viewer on its ledger.
    assert lines[-2].startswith("See it in your browser")
    assert lines[-1] == f"  agentledger ui --db {DEMO_FILE}"
    # Each command runs as printed, from the demo's folder.
    trace = next(c for c in commands if " trace " in c)
    with contextlib.chdir(demo.folder):
        shown = CliRunner().invoke(cli, trace.split()[1:])
    assert shown.exit_code == 0, shown.output
    assert "with subagents" in shown.output


def test_the_demo_leaves_a_ledger_that_sql_can_read(demo):
    ((main,),) = demo.query(
        "SELECT DISTINCT conversation_id FROM agent_runs WHERE agent_name = 'travel-assistant'"
    )
    assert demo.query("SELECT title FROM conversations WHERE id = ?", main) == [
        ("A trip to Lisbon",)
    ]
    # 6 tool calls in turns 1-2, 2 spawns and the researcher's 3 calls in turn 3
    tools = "SELECT count(*) FROM tool_executions t JOIN agent_runs r ON r.id = t.run_id"
    assert demo.query(
        f"{tools} WHERE r.root_run_id IN (SELECT id FROM agent_runs WHERE conversation_id = ?)",
        main,
    ) == [(11,)]
    subagents = demo.query(
        "SELECT r.agent_name, r.depth, c.kind FROM agent_runs r "
        "JOIN conversations c ON c.id = r.conversation_id "
        "WHERE r.parent_run_id IS NOT NULL ORDER BY r.started_at"
    )
    assert subagents == [("researcher", 1, "subagent"), ("reviewer", 1, "subagent")]


def test_a_second_demo_starts_the_earlier_demo_s_ledger_afresh(demo, tmp_path):
    (tmp_path / DEMO_FILE).write_bytes(demo.db.read_bytes())
    count = "SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM agent_runs)"
    once = demo.query(count)

    result = run_demo_in(tmp_path)

    assert result.exit_code == 0, result.output
    assert f"{DEMO_FILE} held an earlier demo's ledger: the demo starts it afresh." in result.output
    assert Demo(tmp_path, result.output).query(count) == once  # one demo's rows, not two


def test_the_demo_fits_the_width_columns_gives(demo):
    # Piped, at the width COLUMNS gives (80 here): its rules span it, its tables and its tool
    # lines fit in it (the streamed answers are left for the terminal to wrap).
    lines = demo.output.splitlines()
    drawn = [line for line in lines if line[:1] in set("─┏┃┡│└")]
    assert {len(line) for line in drawn if line.startswith("─")} == {WIDTH}
    assert max(len(line) for line in drawn) <= WIDTH
    tool_lines = [line for line in lines if line.lstrip()[:1] in "→←"]
    assert tool_lines and max(len(line) for line in tool_lines) <= WIDTH


def test_the_cli_reports_its_version():
    version = CliRunner().invoke(cli, ["--version"])
    assert version.exit_code == 0 and "agentledger" in version.output


def record_a_run_of_its_own(path: Path) -> None:
    with Ledger.open(path) as ledger:
        llm = ScriptedLLM([InferenceResponse(content="Hi.")])
        AgentBuilder().with_llm(llm).with_ledger(ledger).build().run("Hello")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("text", "is not a ledger the demo wrote"),
        ("ledger", "holds conversations or runs the demo did not write"),
        ("demo and more", "holds conversations or runs the demo did not write"),
    ],
)
def test_the_demo_leaves_any_other_file_as_it_is_and_says_so(demo, tmp_path, kind, reason):
    target = tmp_path / "mine.db"
    if kind == "text":
        target.write_text("my notes\n")
    elif kind == "ledger":
        record_a_run_of_its_own(target)
    else:
        target.write_bytes(demo.db.read_bytes())
        record_a_run_of_its_own(target)
    before = target.read_bytes()

    result = CliRunner().invoke(cli, ["demo", "--db", str(target)])

    assert result.exit_code == 1
    assert f"Error: {target} exists and {reason}, so the demo leaves it as it is." in " ".join(
        result.output.split()
    )
    assert "--db" in result.output
    assert target.read_bytes() == before


def test_the_demo_s_second_cached_turn_reads_the_first_from_the_cache_and_costs_less(demo):
    rows = demo.query(
        "SELECT r.agent_name, s.input_tokens, s.cache_read_tokens, s.cache_write_tokens, "
        "s.cost_usd FROM step_executions s JOIN agent_runs r ON r.id = s.run_id "
        "WHERE r.agent_name LIKE 'travel-assistant-%' ORDER BY r.started_at"
    )
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
    printed = " ".join(demo.output.split())
    assert "Prompt caching: the second turn reads the first from the cache" in printed
    assert f"{money(cost)} instead of {money(uncached[1][3])}, {saved:.0%} less" in printed


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

"""The demo runs offline, end to end, and shows what it promises."""

from click.testing import CliRunner
from rich.console import Console

from agentledger import AgentStatus, Role, StepType
from agentledger.cli import cli
from agentledger.demo import TURNS, run_demo


def test_the_demo_keeps_the_conversation_clean_over_two_turns():
    console = Console(record=True, width=120)
    states = run_demo(console)
    final = states[-1]
    assert [m.role for m in final.messages()] == [Role.USER, Role.ASSISTANT] * 2
    assert [m.content for m in final.messages() if m.role is Role.USER] == list(TURNS)
    assert all(s.status is AgentStatus.COMPLETED for s in states)
    assert final.execution_buffer().is_empty()
    assert "235.52 EUR" in final.messages()[1].content  # built from the tools' real results
    assert "353.28 EUR" in final.messages()[3].content
    steps = [e.step for s in states for e in s.step_executions]
    assert [s.step_type for s in steps].count(StepType.TOOL_USE) == 5
    assert sum(len(s.tool_errors) for s in steps) == 1
    output = console.export_text()
    for expected in ("Turn 1", "Turn 2", "Summary", "get_weather", "invalid arguments"):
        assert expected in output


def test_the_cli_runs_the_demo_and_reports_its_version():
    runner = CliRunner()
    result = runner.invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    assert "Turn 2" in result.output
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and "agentledger" in version.output

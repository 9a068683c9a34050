"""What the command-line tests share: a ledger holding a scripted agent's run (and a run whose
process "died"), and the command run through click's ``CliRunner``."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner, Result

import support.migration_harness as harness
from agentledger import AgentBuilder, ToolCall, tool
from agentledger.cli import cli
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM

QUESTION = "What is the weather in Paris?"
TOOL_OUTPUT = "TOOL-OUTPUT 22C and sunny in Paris"
ANSWER = "Paris is sunny, with marmalade skies."


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return TOOL_OUTPUT


@dataclass(frozen=True)
class Recorded:
    url: str
    conversation_id: str
    run_id: str
    stale_conversation_id: str | None = None
    stale_run_id: str | None = None


def record_a_run(url: str) -> Recorded:
    """One run of a scripted agent: a tool call, then the answer."""
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})],
                usage={"input_tokens": 123, "output_tokens": 45},
                finish_reason="tool_calls",
            ),
            InferenceResponse(
                content=ANSWER,
                usage={"input_tokens": 200, "output_tokens": 17},
                finish_reason="stop",
            ),
        ]
    )
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_name("weather-bot")
            .with_tools([get_weather])
            .with_ledger(ledger)
            .build()
        )
        result = agent.run(QUESTION)
    return Recorded(url, result.conversation_id, result.run_id)


def record_a_run_and_a_stale_one(url: str) -> Recorded:
    """:func:`record_a_run`, and a run begun and stepped once, never committed."""
    finished = record_a_run(url)
    with Ledger.open(url) as ledger:
        conversation_id, run_id = harness.begin_stale_run(ledger)
    return Recorded(url, finished.conversation_id, finished.run_id, conversation_id, run_id)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = invoke(*args, env=env)
    assert result.exit_code == 0, f"agentledger {' '.join(args)}: {result.output}"
    assert result.exception is None
    return result.output


def flat(output: str) -> str:
    """The output with its line wrapping undone."""
    return " ".join(output.split())


CONSOLE_SCRIPT = Path(sys.executable).parent / "agentledger"


def console(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agentledger ARGS`` as a user runs it: the installed console script, in a process of its
    own, its output captured (a pipe, not a terminal), with neither ``COLUMNS`` nor
    ``AGENTLEDGER_DB`` from the test's environment unless ``env`` gives them."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"COLUMNS", "AGENTLEDGER_DB"}},
        **(env or {}),
    }
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

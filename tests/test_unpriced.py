"""A cost nobody knows is "unpriced", never $0: the ledger stores NULL for a model with no
price, and every view says so in one wording (``agentledger._values.cost_text``): ``runs``,
``trace``, the analytics report in the terminal and in HTML. A total over priced and unpriced
steps is a floor, said as one: ``$0.0200 + unpriced``. (``run`` and ``chat`` say it too:
tests/test_cli_chat.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentledger import AgentBuilder, SubagentSpec, ToolCall, Usage
from agentledger._values import cost_text
from agentledger.cli import cli
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM


def answer(text: str, cost: float | None = None) -> InferenceResponse:
    return InferenceResponse(
        content=text, usage=Usage(input_tokens=10, output_tokens=5), cost_usd=cost
    )


def spawn() -> InferenceResponse:
    call = ToolCall(id="s1", name="spawn_subagent", arguments={"subagent": "local", "task": "t"})
    return InferenceResponse(
        tool_calls=[call], usage=Usage(input_tokens=10, output_tokens=5), cost_usd=0.015
    )


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs: ``unpriced`` on a model with no price; ``lead`` (priced, $0.02 of its own)
    with a subagent on that model; ``priced``, whose one step cost $0.01."""
    path = tmp_path_factory.mktemp("unpriced") / "ledger.db"
    local = SubagentSpec(
        name="local",
        description="Runs on a local model.",
        llm=ScriptedLLM([answer("from the local model")], model="local-model"),
    )
    agents = (
        ("unpriced", ScriptedLLM([answer("hi")], model="local-model"), ()),
        ("lead", ScriptedLLM([spawn(), answer("done", 0.005)], model="big-model"), (local,)),
        ("priced", ScriptedLLM([answer("ok", 0.01)], model="big-model"), ()),
    )
    with Ledger.open(path) as ledger:
        for name, llm, subagents in agents:
            builder = AgentBuilder().with_llm(llm).with_name(name).with_ledger(ledger)
            builder.with_subagents(list(subagents)).build().run("Hello")
    return path


def invoke(path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(path), *args])
    assert result.exit_code == 0, result.output
    return result.output


def run_ids(path: Path) -> dict[str, str]:
    with Ledger.open(path) as ledger:
        return {run.agent_name: run.id for run in ledger.runs(limit=10)}


@pytest.mark.parametrize(
    ("cost", "fully_priced", "shown"),
    [
        (None, False, "unpriced"),
        (None, True, "–"),  # no model was called: nothing to price
        (0.0, True, "$0.0000"),
        (0.042, True, "$0.0420"),
        (0.00001, True, "$0.000010"),
        (0.042, False, "$0.0420 + unpriced"),
    ],
)
def test_a_cost_nobody_knows_is_never_shown_as_zero(cost, fully_priced, shown):
    assert cost_text(cost, fully_priced=fully_priced) == shown


def test_runs_says_unpriced_for_each_run_whose_model_has_no_price(ledger_file):
    output = invoke(ledger_file, "runs")

    rows = {
        cells[2]: cells
        for line in output.splitlines()
        if line.startswith("│")
        for cells in [[cell.strip() for cell in line.strip("│").split("│")]]
    }
    assert rows["unpriced"][7] == "unpriced"
    assert rows["local"][7] == "unpriced"
    assert rows["lead"][7] == "$0.0200"  # its own steps, all priced
    assert rows["priced"][7] == "$0.0100"
    assert "$0.0000" not in output


def test_trace_says_which_costs_are_unknown_and_which_totals_are_partial(ledger_file):
    ids = run_ids(ledger_file)

    lead = " ".join(invoke(ledger_file, "trace", ids["lead"]).split())
    alone = " ".join(invoke(ledger_file, "trace", ids["unpriced"]).split())

    assert re.search(r"run \S+ · lead · completed · 2 steps · 20 in / 10 out · \$0\.0200 ·", lead)
    assert "with subagents: 3 steps, 30 in / 15 out · $0.0200 + unpriced" in lead
    assert re.search(r"run \S+ · local · completed · 1 step · 10 in / 5 out · unpriced ·", lead)
    assert " · unpriced · " in alone and "$0" not in alone


def test_the_report_says_a_tree_with_an_unpriced_subagent_costs_at_least_its_priced_part(
    ledger_file, tmp_path
):
    page = tmp_path / "report.html"

    output = invoke(ledger_file, "analytics", "report", "--html", str(page))

    rows = [line for line in output.splitlines() if line.startswith("│") and " lead " in line]
    assert any("$0.0200 + unpriced" in line for line in rows)
    html = page.read_text(encoding="utf-8")
    assert "$0.0200 + unpriced" in html and ">unpriced<" in html

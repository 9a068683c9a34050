"""The viewer's analytics page (``/analytics``): the analytics report's charts, inline and
inert under the viewer's Content-Security-Policy, each agent and model in the colour its
badge has on every other page; without DuckDB, the extra to install."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from agentledger import ToolCall, Usage
from agentledger.ledger import Ledger
from agentledger.ui import create_app

ADDRESS = "http://127.0.0.1:8765"
STYLESHEET = Path(__file__).parents[1] / "src/agentledger/ui/static/ui.css"


def record_turn(ledger: Ledger, agent: str, model: str) -> str:
    """A turn with a tool call and an answer, by ``agent`` on ``model``: its conversation."""
    with ledger.turn(user="Plan", agent_name=agent, model=model) as turn:
        step = turn.step(
            tool_calls=[ToolCall(id="c", name="search", arguments={})],
            usage=Usage(input_tokens=100, output_tokens=10),
        )
        step.tool_result("c", "found")
        turn.answer("Done.", usage=Usage(input_tokens=50, output_tokens=5))
    return turn.conversation_id


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with a turn of two agents, each on a model of its own."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.db"
    with Ledger.open(path) as ledger:
        for agent, model in [("planner", "gpt-4o"), ("booker", "claude-sonnet-4")]:
            record_turn(ledger, agent, model)
    return path


def viewer_of(path: Path) -> TestClient:
    """A viewer of the ledger at ``path``, started now."""
    return TestClient(
        create_app(Ledger.open(path, migrate=False, read_only=True)), base_url=ADDRESS
    )


@pytest.fixture(scope="module")
def client(recorded: Path) -> TestClient:
    return viewer_of(recorded)


def computed_at(page: str) -> datetime:
    found = re.search(r'Computed at <time datetime="([^"]+)">', page)
    assert found is not None, page
    return datetime.fromisoformat(found[1])


def hue_colours() -> dict[str, str]:
    """``hue-N`` → its colour, as the stylesheet gives it."""
    return dict(re.findall(r"\.(hue-\d+) \{ --hue: (#[0-9a-f]{6}); \}", STYLESHEET.read_text()))


def test_the_analytics_page_draws_the_reports_charts_inline_and_inert(client):
    page = client.get("/analytics")

    assert page.status_code == 200
    titles = re.findall(r"<h2>([^<]*)</h2>\s*<figure", page.text)
    assert titles == [
        "Tokens over time",
        "Cost over time",
        "Cost tree of the most expensive runs",
        "Tool latency",
        "Tool error rates",
    ]
    assert page.text.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 5
    # Nothing the page's policy would refuse: no inline style, no script but the viewer's.
    assert not re.search(r"\sstyle=|\son\w+=|javascript:", page.text)
    assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/static/ui.js" defer>']
    # Each run of the cost tree leads to an element of the page, which links to the run.
    for anchor in set(re.findall(r'href="#(run-[^"]+)"', page.text)):
        run_id = anchor.removeprefix("run-")
        assert f'<li id="{anchor}"' in page.text and f'href="/r/{run_id}"' in page.text


def test_each_agent_and_model_has_the_colour_of_its_badge_on_every_page(client):
    listing = client.get("/").text
    analytics = client.get("/analytics").text
    run_id = re.search(r'href="/r/([^"]+)"', listing)[1]
    run = client.get(f"/r/{run_id}").text
    colours = hue_colours()

    badges = dict(re.findall(r'<span class="badge (hue-\d+)">([^<]+)</span>', listing))
    agents = {name: hue for hue, name in badges.items()}
    assert set(agents) == {"planner", "booker"} and agents["planner"] != agents["booker"]
    for name, hue in agents.items():
        # The stacked bars of the agent in the charts are drawn in its badge's colour.
        fills = set(re.findall(rf'fill="(#[0-9a-f]{{6}})"><title>[^<]* · {name}: ', analytics))
        assert fills == {colours[hue]}, name
    on_run = re.findall(r'<span class="badge (hue-\d+)">(planner|booker)</span>', run)
    assert on_run and all(agents[name] == hue for hue, name in on_run)
    model = re.search(r'<span class="badge (hue-\d+)">(gpt-4o|claude-sonnet-4)</span>', run)
    assert model is not None
    model_fills = re.findall(rf'fill="(#[0-9a-f]{{6}})"><title>[^<]* · {model[2]}: ', analytics)
    assert set(model_fills) == {colours[model[1]]}


def test_without_duckdb_the_analytics_page_says_which_extra_to_install(recorded, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # as if the extra were not installed
    client = viewer_of(recorded)  # a viewer started so

    page = client.get("/analytics")

    assert page.status_code == 200
    assert "pip install &#39;agentledger[analytics]&#39;" in page.text
    assert client.get("/").status_code == 200  # the other pages need nothing more


def test_the_page_is_computed_again_only_once_the_ledger_changed(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        record_turn(ledger, "planner", "gpt-4o")
        client = viewer_of(path)

        first = client.get("/analytics").text
        time.sleep(1.1)  # computed again, it would say a later second
        assert client.get("/analytics").text == first

        forgotten = record_turn(ledger, "critic", "gpt-4o")
        second = client.get("/analytics").text
        assert "critic" in second and "critic" not in first
        assert computed_at(second) > computed_at(first)

        ledger.forget(forgotten)  # a deletion, in no tenant's scope: still a change
        third = client.get("/analytics").text
        assert "critic" not in third and computed_at(third) > computed_at(second)

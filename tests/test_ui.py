"""``agentledger ui``: the viewer's pages, read in-process (Starlette's test client, no server
and no browser) from a ledger on each backend that holds what a viewer must show: a turn
with a tool call and a subagent, a failed one, an interrupted one, one still running, in two
tenants. Its safety: only GET and HEAD, loopback names only without a token, the token on
every request with one, a strict Content-Security-Policy, and a scoped viewer that answers
"not found" for another tenant's ids exactly as for unknown ones. The hostile corpus is
rendered by ``test_hostile_input.py``."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from starlette.testclient import TestClient

from agentledger import ToolCall, Usage
from agentledger.ledger import Ledger
from agentledger.ui import create_app
from support.cli import Interactive, invoke
from support.databases import BACKENDS, fresh_database, sqlite_url

ADDRESS = "http://127.0.0.1:8765"
TIMETABLE = "Departures: " + ", ".join(
    f"{h:02d}:{m:02d}" for h in range(6, 23) for m in range(0, 60, 10)
)
"""A tool result longer than a page shows at once."""
TOKEN = "a-token-of-twenty-four-c"


@dataclass(frozen=True)
class Viewed:
    """A ledger on one backend and the ids of what it holds."""

    url: str
    planned: str
    """Conversation: a planner's turn that called a tool and a subagent (tenant acme, owner
    ann)."""
    planner_run: str
    child_run: str
    failed: str
    """Conversation: a turn that failed (tenant acme, owner bob)."""
    interrupted: str
    """Conversation: a turn cut short after it had shown text (tenant other)."""
    running: str
    """Conversation: a turn still running, its partial answer made durable (no tenant)."""
    running_run: str


def record(url: str) -> Viewed:
    with Ledger.open(url) as ledger:
        ann = ledger.scoped("acme", "ann")
        research = ToolCall(id="r1", name="research", arguments={"topic": "Lisbon trams"})
        timetable = ToolCall(id="t1", name="timetable", arguments={"line": 28})
        with ann.turn(user="Plan a day in Lisbon", agent_name="planner", model="gpt-4o") as turn:
            step = turn.step(
                tool_calls=[research, timetable],
                usage=Usage(input_tokens=100, output_tokens=10),
                reasoning="Trams first.",
            )
            with turn.child("Find tram lines", agent_name="researcher", call_id="r1") as child:
                child.answer("Tram 28 climbs to Graça.", usage=Usage(input_tokens=50))
            step.tool_result("r1", child.result.answer)
            step.tool_result("t1", TIMETABLE)
            turn.answer("Ride tram 28 in the morning.", usage=Usage(input_tokens=120))
        with ledger.scoped("acme", "bob").turn(user="Book it", agent_name="booker") as failed:
            failed.fail("the booking service refused")
        with ledger.scoped("other").turn(user="Tell me a story", agent_name="teller") as cut:
            cut.shown("Once upon a ")
            cut.interrupt("the user stopped it")
        running = ledger.turn(user="Count to three", agent_name="counter")
        running.begin()
        running.step("one", usage=Usage(input_tokens=5, output_tokens=1))
        running.shown("one, two")
        running.flush_shown()
        return Viewed(
            url,
            turn.conversation_id,
            turn.run_id,
            child.run_id,
            failed.conversation_id,
            cut.conversation_id,
            running.conversation_id,
            running.run_id,
        )


@pytest.fixture(scope="module", params=BACKENDS)
def viewed(request: pytest.FixtureRequest) -> Iterator[Viewed]:
    with fresh_database(request.param, request) as url:
        yield record(url)


@pytest.fixture(scope="module")
def ledger(viewed: Viewed) -> Iterator[Ledger]:
    with Ledger.open(viewed.url, migrate=False, read_only=True) as opened:
        yield opened


@pytest.fixture(scope="module")
def client(ledger: Ledger) -> TestClient:
    return TestClient(create_app(ledger), base_url=ADDRESS)


def main_text(page: str) -> str:
    """The page's main part, as :func:`flat`."""
    return flat(page.split("<main>", 1)[1].split("</main>", 1)[0])


def flat(markup: str) -> str:
    """``markup`` with its tags left out and its white space folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", markup).split())


# --- the pages ------------------------------------------------------------------------------------


def test_the_listing_shows_each_conversation_with_its_agent_turns_cost_and_last_status(
    client, viewed
):
    page = client.get("/")
    assert page.status_code == 200
    rows = {
        match[0]: flat(match[1])
        for match in re.findall(r'<tr data-conversation="([^"]+)">(.*?)</tr>', page.text, re.S)
    }
    assert set(rows) == {viewed.planned, viewed.failed, viewed.interrupted, viewed.running}
    planned = rows[viewed.planned]
    assert "Plan a day in Lisbon" in planned and "planner" in planned
    assert "recording API" in planned and "completed" in planned
    assert "$0.0006 + unpriced" in planned  # the subagent's step named no model: unpriced
    assert "failed" in rows[viewed.failed] and "booker" in rows[viewed.failed]
    assert "interrupted" in rows[viewed.interrupted]
    assert "running" in rows[viewed.running]
    assert "tenant acme · owner ann" in planned  # an unscoped viewer says whose it is
    assert f'href="/r/{viewed.planner_run}"' in page.text  # the last run, by its status


def test_a_conversation_shows_each_answer_with_its_run_folded_and_its_subagent_nested(
    client, viewed
):
    page = client.get(f"/c/{viewed.planned}").text
    text = main_text(page)

    assert text.index("Plan a day in Lisbon") < text.index("research") < text.index("Ride tram")
    runs = re.findall(r'<details class="run" data-run="([^"]+)"[^>]*>', page)
    assert runs == [viewed.planner_run, viewed.child_run]  # the subagent inside its parent
    assert " open" not in page.split('<details class="run"', 1)[1].split(">", 1)[0]  # folded
    assert "Lisbon trams" in text and "Tram 28 climbs to Graça." in text  # arguments, result
    assert "Trams first." in text  # the reasoning
    assert f'href="/r/{viewed.child_run}"' in page
    assert "gpt-4o" in text and "100 in / 10 out" in text


def test_a_long_value_is_folded_to_its_beginning_and_shown_whole_on_demand(client, viewed):
    page = client.get(f"/c/{viewed.planned}").text
    folded = re.search(
        r'<details class="fold"><summary><pre>(.*?)</pre></summary><pre>(.*?)</pre>', page
    )
    assert folded, "no folded value"
    assert folded[2] == TIMETABLE and len(folded[1]) < len(TIMETABLE)
    assert TIMETABLE.startswith(folded[1].removesuffix("…"))


def test_head_answers_as_get_does_without_a_body(client, viewed):
    for address in ("/", f"/c/{viewed.planned}", f"/r/{viewed.planner_run}", "/static/ui.js"):
        head, get = client.head(address), client.get(address)
        assert head.status_code == get.status_code == 200
        assert head.content == b""


def test_an_interrupted_answer_is_marked_and_a_running_runs_partial_answer_is_shown(client, viewed):
    cut = main_text(client.get(f"/c/{viewed.interrupted}").text)
    assert "assistant interrupted" in cut and "Once upon a" in cut

    running = main_text(client.get(f"/c/{viewed.running}").text)
    assert "shown so far one, two" in running
    assert "still going" in running


def test_a_failed_runs_error_is_shown_with_it(client, viewed):
    assert "the booking service refused" in main_text(client.get(f"/c/{viewed.failed}").text)


def test_a_run_shows_its_tree_with_the_usage_the_analytics_compute(client, viewed):
    from agentledger.analytics import Analytics

    page = client.get(f"/r/{viewed.planner_run}").text
    tree = flat(re.split(r'<ul class="tree"[^>]*>', page, maxsplit=1)[1].split("<h2>Trace</h2>")[0])
    with Analytics.open(viewed.url) as analytics:
        rollup = {
            row[0]: row[1:]
            for row in analytics.sql(
                "SELECT run_id, exclusive_input_tokens, inclusive_input_tokens, "
                "exclusive_steps, inclusive_steps FROM run_rollup"
            ).fetchall()
        }
    own_in, all_in, own_steps, all_steps = rollup[viewed.planner_run]
    assert f"own: {own_steps} steps · {own_in} in" in tree
    assert f"with subagents: {all_steps} steps · {all_in} in" in tree
    assert f'href="/r/{viewed.child_run}"' in page  # down to the child
    child = client.get(f"/r/{viewed.child_run}").text
    assert f'href="/r/{viewed.planner_run}"' in child  # and up to its parent
    assert f'href="/c/{viewed.planned}"' in page


def test_a_prefix_of_several_ids_links_to_each(tmp_path):
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        for n in (1, 2):
            ledger.create_conversation(conversation_id=f"trip/lisbon-{n}")
        client = TestClient(create_app(ledger), base_url=ADDRESS)
        page = client.get("/c/trip%2Flisbon")
    assert page.status_code == 404
    links = re.findall(r'<li><a class="id" href="([^"]+)">', page.text)
    assert links == ["/c/trip%2Flisbon-1", "/c/trip%2Flisbon-2"]


def test_short_prefixes_open_pages_and_every_id_links_to_its_page(client, viewed, ledger):
    short = ledger.short_ids([viewed.planned], of="conversation")[viewed.planned]
    assert client.get(f"/c/{short}").text == client.get(f"/c/{viewed.planned}").text
    run_short = ledger.short_ids([viewed.planner_run], of="run")[viewed.planner_run]
    assert client.get(f"/r/{run_short}").status_code == 200
    links = set(re.findall(r'href="([^"]+)"', client.get(f"/c/{viewed.planned}").text))
    assert {f"/r/{viewed.planner_run}", f"/r/{viewed.child_run}"} <= links
    for link in links - {"/static/ui.css"}:
        assert client.get(link).status_code == 200, link
    # The listing names each conversation's last run by its short id, as the command line does.
    assert f'href="/r/{viewed.planner_run}" title="run {run_short}"' in client.get("/").text


def test_search_finds_words_in_messages_and_in_tool_calls(client, viewed):
    said = main_text(client.get("/", params={"query": "tram"}).text)
    assert "Ride tram 28" in said
    traced = client.get("/", params={"query": "trams"}).text
    assert "trace: research (step 0)" in main_text(traced)
    step = f"step-{viewed.planner_run}-0"
    assert f'href="/r/{viewed.planner_run}#{step}"' in traced  # to the step in the run's page
    assert f'id="{step}"' in client.get(f"/r/{viewed.planner_run}").text
    nothing = main_text(client.get("/", params={"query": "zeppelin"}).text)
    assert "No message or tool call holds every word of it." in nothing


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ({"agent": "planner"}, {"planned"}),
        ({"status": "failed"}, {"failed"}),
        ({"status": "running"}, {"running"}),
        ({"tenant": "acme"}, {"planned", "failed"}),
        ({"tenant": "acme", "owner": "bob"}, {"failed"}),
        ({"owner": "nobody"}, set()),
    ],
)
def test_the_listing_keeps_to_an_agent_a_status_a_tenant_and_an_owner(client, viewed, query, shown):
    page = client.get("/", params=query).text
    listed = set(re.findall(r'<tr data-conversation="([^"]+)">', page))
    assert listed == {getattr(viewed, name) for name in shown}


def test_pages_follow_one_another_without_repeating_or_skipping_a_conversation(ledger, viewed):
    small = TestClient(create_app(ledger, page_size=1), base_url=ADDRESS)
    seen, address = [], "/"
    while address:
        page = small.get(address).text
        seen += re.findall(r'<tr data-conversation="([^"]+)">', page)
        found = re.search(r'<a rel="next" href="([^"]+)">', page)
        address = found[1].replace("&amp;", "&") if found else ""
    assert seen == [o.id for o in ledger.conversation_overviews()]
    assert len(seen) == 4


def test_a_long_conversation_shows_its_last_turns_and_links_to_the_ones_before(tmp_path):
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        conversation_id = None
        for n in range(5):
            with ledger.turn(user=f"question {n}", conversation_id=conversation_id) as turn:
                turn.answer(f"answer {n}")
            conversation_id = turn.conversation_id
        client = TestClient(create_app(ledger, turns_shown=2), base_url=ADDRESS)
        said, address, back = [], f"/c/{conversation_id}", []
        while address:
            page = client.get(address).text
            said = re.findall(r"question \d", main_text(page)) + said
            back.append("the latest turns" in page)  # a link back to the end, once not there
            found = re.search(r'<a rel="prev" href="([^"]+)">earlier turns</a>', page)
            address = found[1] if found else ""
        refused = client.get(f"/c/{conversation_id}", params={"before": "soon"})
    assert said == [f"question {n}" for n in range(5)]
    assert back == [False, True, True]
    assert refused.status_code == 400 and "earlier turns" in main_text(refused.text)


def test_a_bad_filter_is_said_plainly(client):
    page = client.get("/", params={"status": "sleeping"})
    assert page.status_code == 400
    assert "choose one of" in main_text(page.text)
    page = client.get("/", params={"after": "yesterday"})
    assert page.status_code == 400
    assert "follow the listing" in main_text(page.text)


# --- safety ---------------------------------------------------------------------------------------


def test_a_scoped_viewer_answers_another_tenants_ids_exactly_as_unknown_ones(ledger, viewed):
    scoped = TestClient(create_app(ledger.scoped("acme")), base_url=ADDRESS)
    listed = set(re.findall(r'<tr data-conversation="([^"]+)">', scoped.get("/").text))
    assert listed == {viewed.planned, viewed.failed}
    for kind, theirs in (("c", viewed.running), ("r", viewed.running_run)):
        unknown = "0" * len(theirs)
        outside, missing = scoped.get(f"/{kind}/{theirs}"), scoped.get(f"/{kind}/{unknown}")
        assert outside.status_code == missing.status_code == 404
        assert outside.text.replace(theirs, unknown) == missing.text
    assert "Tell me a story" not in scoped.get("/", params={"query": "story"}).text
    refused = scoped.get("/", params={"tenant": "other"})
    assert refused.status_code == 400 and "Tell me" not in refused.text


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_the_viewer_serves_no_method_that_could_write(client, method):
    for address in ("/", "/c/x", "/static/ui.js"):
        refused = client.request(method, address)
        assert refused.status_code == 405
        assert refused.headers["allow"] == "GET, HEAD"


def test_every_response_forbids_inline_script_and_other_origins(client, viewed):
    for address in ("/", f"/c/{viewed.planned}", "/r/nothing-such", "/static/ui.js", "/nowhere"):
        response = client.get(address)
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy, address
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    page = client.get(f"/c/{viewed.planned}").text
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/ui.js" defer>']
    assert not re.search(r"\son\w+=|\sstyle=|javascript:", page, re.IGNORECASE)
    assert "text/css" in client.get("/static/ui.css").headers["content-type"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example"])
def test_without_a_token_only_requests_to_a_loopback_name_are_answered(ledger, host):
    client = TestClient(create_app(ledger), base_url=ADDRESS)
    assert client.get("/", headers={"host": host}).status_code == 403
    for allowed in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "localhost"):
        assert client.get("/", headers={"host": allowed}).status_code == 200, allowed


def test_with_a_token_every_request_must_carry_it(ledger):
    client = TestClient(create_app(ledger, token=TOKEN), base_url="http://0.0.0.0:8765")
    assert client.get("/").status_code == 401
    assert client.get("/static/ui.js").status_code == 401
    assert client.get("/", params={"token": "wrong" * 5}).status_code == 401
    assert client.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200

    opened = client.get("/", params={"token": TOKEN, "agent": "planner"}, follow_redirects=False)
    assert opened.status_code == 303
    assert opened.headers["location"] == "/?agent=planner"  # the token left out of the address
    assert "HttpOnly" in opened.headers["set-cookie"]
    assert "SameSite=strict" in opened.headers["set-cookie"]
    assert client.get("/?agent=planner").status_code == 200  # the cookie carries it now
    # An address whose path names another host sends the browser on to this viewer's page.
    elsewhere = client.get(
        f"http://0.0.0.0:8765//evil.example/?token={TOKEN}", follow_redirects=False
    )
    assert elsewhere.headers["location"] == "/evil.example/"


# --- the command ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--host", "0.0.0.0"], "give a token too (--token, or AGENTLEDGER_UI_TOKEN)"),
        (["--host", "192.168.1.9"], "give a token too"),
        (["--host", "0.0.0.0", "--token", "short"], "too short"),
    ],
)
def test_ui_refuses_to_serve_beyond_this_machine_without_a_token(viewed, args, said):
    result = invoke("--db", viewed.url, "ui", *args)
    assert result.exit_code == 1
    assert said in result.output


def test_ui_refuses_a_ledger_file_that_does_not_exist(tmp_path):
    result = invoke("--db", str(tmp_path / "none.db"), "ui")
    assert result.exit_code == 1
    assert "no ledger at" in result.output
    assert not (tmp_path / "none.db").exists()


def test_a_damaged_ledger_is_said_so_on_the_page_not_as_a_traceback(tmp_path):
    import sqlite3

    from support.cli import record_a_run

    recorded = record_a_run(str(tmp_path / "ledger.db"))
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute("UPDATE agent_runs SET step_count = 5, checksum = NULL")
    conn.close()
    with Ledger.open(recorded.url, migrate=False, read_only=True) as ledger:
        page = TestClient(create_app(ledger), base_url=ADDRESS).get(
            f"/c/{recorded.conversation_id}"
        )
    assert page.status_code == 500
    assert "recorded 5 steps but the ledger reads 2" in main_text(page.text)
    assert "restore it from a backup" in main_text(page.text)


def test_ui_listens_on_the_loopback_interface_and_prints_the_address_to_open(tmp_path):
    """The one test of the process itself: the address it prints is where it listens, and it
    leaves no file beside the ledger."""
    recorded = record(sqlite_url(tmp_path))
    before = sorted(tmp_path.iterdir())
    served = Interactive("--db", recorded.url, "ui", "--port", "0")
    try:
        served.wait_for("/\n", after=served.wait_for("agentledger ui: "))
        address = re.search(r"at (http://127\.0\.0\.1:\d+/)\n", served.output)
        assert address, served.output
        page = httpx.get(address[1], timeout=30)
        assert page.status_code == 200 and "Plan a day in Lisbon" in page.text
        assert httpx.post(address[1], timeout=30).status_code == 405
    finally:
        served.close()
    assert sorted(tmp_path.iterdir()) == before


def test_ui_says_when_its_port_is_taken(viewed):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke("--db", viewed.url, "ui", "--port", str(port))
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "choose another port with --port" in result.output

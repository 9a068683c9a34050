"""``agentledger ui`` in a real browser (Debian's Chromium, driven by Playwright): the demo's
ledger, searched, a conversation opened, an answer expanded into its trace and a subagent into
its own, a run's tree followed; a run streamed by another process appearing step by step with
its partial answer, without a reload; a forgotten conversation leaving the open listing, and
its open page saying it is gone; a scoped viewer refusing another tenant's conversation;
the hostile corpus shown as text, no script of it run.

One viewer process for the module (and a scoped viewer in a thread), one browser, few page
loads: the pages' markup is checked in-process (``test_ui.py``, ``test_hostile_input.py``, the
analytics page's too); here what only a browser shows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentledger.ledger import Ledger
from agentledger.ui import create_app
from support.browser import chromium
from support.served import served
from support.viewer import HOSTILE, HOSTILE_TITLE, viewer, viewer_ledger

pytestmark = pytest.mark.serial  # a browser and a viewer's poller: kept off a loaded machine

WAIT = 30_000
"""How long, in milliseconds, something may take to show on a loaded machine."""

STREAMING_RUN = """
import sys
from agentledger import Usage
from agentledger.ledger import Ledger

with Ledger.open(sys.argv[1]) as ledger:
    turn = ledger.turn(user="Count to three, slowly", agent_name="counter", model="gpt-4o")
    turn.begin()
    print(turn.conversation_id, turn.run_id, flush=True)
    for word in ("one", "two"):
        sys.stdin.readline()
        turn.step(f"counted {word}", usage=Usage(input_tokens=5, output_tokens=1))
        turn.shown(f"so far: {word}")
        turn.flush_shown()
        print("stepped", flush=True)
    sys.stdin.readline()
    turn.answer("one, two, three")
    print("answered", flush=True)
"""
"""A run recorded by another process, a step (and what it has shown) each time it is told."""


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("viewer") / "demo.db"
    return path, viewer_ledger(path)


@pytest.fixture(scope="module")
def address(ledger: tuple[Path, dict[str, str]]) -> Iterator[str]:
    with viewer(ledger[0]) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as found:
        yield found


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    opened = browser.new_page()
    opened.set_default_timeout(WAIT)
    yield opened
    opened.close()


def test_search_open_a_conversation_expand_its_trace_and_a_subagents_and_follow_the_tree(
    address, page
):
    page.goto(address)
    assert page.locator("tr[data-conversation]").count() >= 5
    trip = page.get_by_role("link", name="A trip to Lisbon").get_attribute("href")
    page.fill("form.filters input[name=query]", "Lisbon")
    page.press("form.filters input[name=query]", "Enter")
    page.wait_for_selector("table.hits tbody tr")
    page.locator(f"table.hits a[href='{trip}']").first.click()
    page.wait_for_selector("section.turn")
    assert page.title().startswith("A trip to Lisbon")

    # An answer's run, folded: opened into its steps, its tool call into the subagent's run.
    spawning = page.locator("details.run:has(.subagent)").first
    spawning.locator("> summary").click()
    tool = spawning.locator("details.tool:has(.subagent)").first
    tool.locator("> summary").click()
    child = tool.locator(".subagent details.run").first
    assert not child.locator("li.step").first.is_visible()
    child.locator("> summary").click()
    assert child.locator("li.step").first.is_visible()

    # Its run page: its place in the tree, up to the run that spawned it and back down.
    child_id = child.get_attribute("data-run")
    child.locator("> summary a.id").first.click()
    page.wait_for_selector("ul.tree li.current")
    assert page.url.endswith(f"/r/{child_id}")
    page.locator("p.meta a.id[href^='/r/']").first.click()  # spawned by
    page.wait_for_selector(f"ul.tree a[href='/r/{child_id}']")
    assert not page.url.endswith(child_id)
    page.click(f"ul.tree a[href='/r/{child_id}']")
    page.wait_for_selector("ul.tree li.current")
    assert page.url.endswith(f"/r/{child_id}")


VISIBILITY = """() => {{
    Object.defineProperty(document, "hidden", {{ value: {hidden}, configurable: true }});
    document.dispatchEvent(new Event("visibilitychange"));
}}"""
"""What a browser does as its tab is put out of sight (``hidden``) and shown again."""


def test_a_run_streamed_by_another_process_appears_step_by_step_without_a_reload(
    ledger, address, browser
):
    listing, conversation = browser.new_page(), browser.new_page()
    for each in (listing, conversation):
        each.set_default_timeout(WAIT)
    listing.goto(address)
    listing.wait_for_selector("body[data-live='yes']")
    listing.evaluate("window.kept = 'this page'")
    run = subprocess.Popen(
        [sys.executable, "-c", STREAMING_RUN, str(ledger[0])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None and run.stdin is not None
        conversation_id, run_id = run.stdout.readline().split()
        # The new conversation appears in the open listing.
        listing.wait_for_selector(f"tr[data-conversation='{conversation_id}']")

        conversation.goto(f"{address}c/{conversation_id}")
        conversation.wait_for_selector("body[data-live='yes']")
        conversation.evaluate("window.kept = 'this page'")
        trace = f"details.run[data-run='{run_id}']"
        conversation.click(f"{trace} > summary")
        assert conversation.locator(f"{trace} li.step").count() == 0
        assert conversation.locator("p.pending").is_visible()

        for n, word in enumerate(("one", "two")):
            run.stdin.write("go\n")
            run.stdin.flush()
            assert run.stdout.readline().strip() == "stepped"
            conversation.wait_for_selector(f"{trace} [id='step-{run_id}-{n}']")
            partial = conversation.locator(f"{trace} .partial")
            partial.filter(has_text=f"so far: {word}").wait_for()
            assert conversation.locator(trace).get_attribute("open") is not None  # kept open

        # The listing is put out of sight: it closes its stream, and is told what it missed
        # when it is shown again.
        listing.evaluate(VISIBILITY.format(hidden="true"))
        listing.wait_for_selector("body[data-live='paused']")
        run.stdin.write("go\n")
        run.stdin.flush()
        assert run.stdout.readline().strip() == "answered"
        conversation.locator("article.role-assistant").filter(has_text="one, two, three").wait_for()
        conversation.wait_for_selector(f"{trace}[data-status='completed']")
        assert conversation.locator("p.pending").count() == 0
        assert listing.locator(f"tr[data-conversation='{conversation_id}'] .status-running").count()
        listing.evaluate(VISIBILITY.format(hidden="false"))
        listing.wait_for_selector(f"tr[data-conversation='{conversation_id}'] .status-completed")
        kept = [each.evaluate("window.kept") for each in (listing, conversation)]
    finally:
        run.kill()
        run.communicate(timeout=30)  # and closes its pipes
        listing.close()
        conversation.close()
    assert kept == ["this page", "this page"]  # updated in place, never reloaded


def test_a_forgotten_conversation_leaves_the_open_listing_and_its_open_page_says_so(
    ledger, address, browser
):
    listing, conversation = browser.new_page(), browser.new_page()
    for each in (listing, conversation):
        each.set_default_timeout(WAIT)
    try:
        with Ledger.open(ledger[0], migrate=False) as writer:
            with writer.turn(user="Forget me", agent_name="forgetful") as turn:
                turn.answer("Soon gone.")
            row = f"tr[data-conversation='{turn.conversation_id}']"
            listing.goto(address)
            listing.wait_for_selector(row)
            conversation.goto(f"{address}c/{turn.conversation_id}")
            for each in (listing, conversation):
                each.wait_for_selector("body[data-live='yes']")
            listing.evaluate("window.kept = 'this page'")

            writer.forget(turn.conversation_id)

            listing.wait_for_selector(row, state="detached")
            conversation.locator("p.problem").filter(has_text="No conversation").wait_for()
            kept = listing.evaluate("window.kept")
    finally:
        listing.close()
        conversation.close()
    assert kept == "this page"  # the listing updated in place; the forgotten page loaded again


def test_a_scoped_viewer_refuses_another_tenants_conversation_as_an_unknown_one(ledger, page):
    path, ids = ledger
    with (
        Ledger.open(path, migrate=False, read_only=True) as opened,
        served(create_app(opened.scoped("acme"))) as base,  # as `ui --tenant acme` serves it
    ):
        scoped = base + "/"
        page.goto(scoped)
        shown = page.locator("tr[data-conversation]").evaluate_all(
            "rows => rows.map(r => r.dataset.conversation)"
        )
        theirs = page.goto(f"{scoped}c/{ids['other']}")
        refused = page.text_content("main")
        unknown = page.goto(f"{scoped}c/{ids['other'][:-4]}zzzz")
        said = page.text_content("main")
    assert shown == [ids["acme"]]
    assert theirs.status == unknown.status == 404
    assert refused.replace(ids["other"], "ID") == said.replace(ids["other"][:-4] + "zzzz", "ID")
    assert "Their secret plan" not in refused


def test_the_hostile_corpus_is_shown_as_text_and_none_of_it_runs(ledger, address, page):
    _path, ids = ledger
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    ran = []
    page.goto(address)
    assert page.get_by_text(HOSTILE_TITLE).count() == 1  # the title, as written
    ran.append(page.evaluate("window.ran ?? null"))
    page.goto(f"{address}c/{ids['hostile']}")
    page.locator("details.run > summary").first.click()
    for tool in page.locator("details.tool > summary").all():
        tool.click()
    text = page.text_content("main")
    ran.append(page.evaluate("window.ran ?? null"))
    page.goto(address + "?query=script")
    assert page.locator("table.hits tbody tr").count() > 0
    ran.append(page.evaluate("window.ran ?? null"))
    assert all(each in text for each in HOSTILE)
    assert ran == [None] * 3 and dialogs == []

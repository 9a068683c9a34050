"""The example chat app (``examples/chat_app``): a run streamed as server-sent events, stopped by
its Stop endpoint or by a client that goes away, and the conversation as the user saw it, the
partial answer flagged interrupted; checked over HTTP, with SQL on the ledger's file, and in a
real browser.

A whole run and a cancel go through httpx's in-process transport; what needs a real stream (a
client that disconnects, a browser) goes to the app served by uvicorn on loopback."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from examples.chat_app.app import OfflineModel, create_app
from support.browser import chromium
from support.served import served, sse_events

QUESTION = "Lisbon"
VIEWER = "http://127.0.0.1:9999"
"""The viewer's address the tests give the app: each answer links to its run there."""
WAIT = 30.0
"""How long a condition may take to come true on a loaded machine, in seconds."""


# --- helpers --------------------------------------------------------------------------------------


def events_of(body: str) -> list[dict[str, Any]]:
    """The events of a server-sent event stream, each its JSON data with its ``event`` name."""
    return [{"event": kind, **json.loads(data)} for kind, data in sse_events(body)]


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in events if e["event"] == "text_delta")


def until_blank(lines: Iterator[str]) -> Iterator[str]:
    """The lines of one server-sent event, read as they come."""
    for line in lines:
        if not line:
            return
        yield line


def sql(path: Path, query: str, *params: object) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query, params).fetchall()


def stored_messages(path: Path, conversation_id: str) -> list[tuple[str, str, bool]]:
    found = sql(
        path,
        "SELECT role, content, interrupted FROM conversation_messages "
        "WHERE conversation_id = ? ORDER BY seq",
        conversation_id,
    )
    return [(role, content, bool(flag)) for role, content, flag in found]


def run_row(path: Path, run_id: str) -> tuple[str, str | None]:
    ((status, stop_reason),) = sql(
        path, "SELECT status, stop_reason FROM agent_runs WHERE id = ?", run_id
    )
    return status, stop_reason


def eventually(found: Callable[[], Any], what: str) -> Any:
    """``found()`` once it is truthy (polled); fails after :data:`WAIT` seconds."""
    deadline = time.monotonic() + WAIT
    while not (value := found()):
        assert time.monotonic() < deadline, f"still waiting for {what} after {WAIT} s"
        time.sleep(0.05)
    return value


async def aeventually(found: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := found()):
        assert time.monotonic() < deadline, f"still waiting for {what} after {WAIT} s"
        await asyncio.sleep(0.05)
    return value


def in_process(app: FastAPI, test: Callable[[httpx.AsyncClient], Any]) -> Any:
    """Run ``test`` with a client of ``app`` in this process, the app's lifespan around it."""

    async def main() -> Any:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://chat") as client:
                return await test(client)

    return asyncio.run(main())


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "chat.db"


# --- a whole run ----------------------------------------------------------------------------------


def test_a_run_streams_its_events_and_the_conversation_then_holds_question_and_answer(
    ledger_path: Path,
) -> None:
    app = create_app(str(ledger_path), OfflineModel(words=12, delay=0.0), viewer=f"{VIEWER}/")

    async def test(client: httpx.AsyncClient) -> tuple[Any, ...]:
        first = await client.post("/conversations/new/runs", json={"text": QUESTION})
        conversation_id = events_of(first.text)[0]["conversation_id"]
        second = await client.post(
            f"/conversations/{conversation_id}/runs", json={"text": "And Porto?"}
        )
        shown = await client.get(f"/conversations/{conversation_id}")
        return first, second, shown, await client.get("/about")

    first, second, shown, about = in_process(app, test)

    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/event-stream")
    events = events_of(first.text)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.index("tool_call_started") < kinds.index("tool_call_finished")
    assert kinds.index("tool_call_finished") < kinds.index("text_delta")
    assert kinds.count("text_delta") == 12
    call = next(e for e in events if e["event"] == "tool_call_started")["call"]
    assert (call["name"], call["arguments"]) == ("lookup", {"topic": QUESTION})
    end = events[-1]
    assert (end["status"], end["stop_reason"]) == ("completed", "completed")
    answer = streamed_text(events)
    assert end["answer"] == answer and answer.startswith("Lisbon a subject with")
    assert {e["run_id"] for e in events} == {events[0]["run_id"]}

    assert second.status_code == 200
    conversation = shown.json()
    assert conversation["id"] == events[0]["conversation_id"]
    assert [(m["role"], m["content"], m["interrupted"]) for m in conversation["messages"]] == [
        ("user", QUESTION, False),
        ("assistant", answer, False),
        ("user", "And Porto?", False),
        ("assistant", streamed_text(events_of(second.text)), False),
    ]
    assert stored_messages(ledger_path, conversation["id"]) == [
        (m["role"], m["content"], False) for m in conversation["messages"]
    ]
    # Each answer comes with its run's tool calls, read from the ledger, and its page in the
    # viewer; a question with neither.
    runs = [events[0]["run_id"], events_of(second.text)[0]["run_id"]]
    topics = [QUESTION, "And Porto?"]
    assert [
        (
            m["run_id"],
            m["trace"],
            [(c["name"], c["arguments"], c["is_error"]) for c in m["tool_calls"]],
        )
        for m in conversation["messages"]
    ] == [
        turn
        for run, topic in zip(runs, topics, strict=True)
        for turn in [
            (None, None, []),
            (run, f"{VIEWER}/r/{run}", [("lookup", {"topic": topic}, False)]),
        ]
    ]
    assert conversation["messages"][1]["tool_calls"][0]["id"] == call["id"]
    assert about.json() == {"model": "OfflineModel", "stand_in": True, "viewer": VIEWER}


def test_the_viewer_the_answers_link_to_is_agentledger_ui_s_address_unless_told(
    ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def viewer(client: httpx.AsyncClient) -> Any:
        return (await client.get("/about")).json()["viewer"]

    assert in_process(create_app(str(ledger_path), OfflineModel()), viewer) == (
        "http://127.0.0.1:8765"
    )
    monkeypatch.setenv("AGENTLEDGER_UI_URL", "http://viewer.example:8000")
    assert in_process(create_app(str(ledger_path), OfflineModel()), viewer) == (
        "http://viewer.example:8000"
    )


def test_an_unknown_conversation_or_run_is_a_404_that_says_what_is_missing(
    ledger_path: Path,
) -> None:
    app = create_app(str(ledger_path), OfflineModel(delay=0.0))

    async def test(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await client.get("/conversations/nope-nope-nope"),
            await client.post("/conversations/nope-nope-nope/runs", json={"text": "hi"}),
            await client.post("/runs/nope-nope-nope/cancel"),
        ]

    missing_conversation, run_on_it, cancel = in_process(app, test)

    assert missing_conversation.status_code == run_on_it.status_code == 404
    assert "nope-nope-nope" in missing_conversation.json()["detail"]
    assert cancel.status_code == 404
    assert "run nope-nope-nope is not streaming" in cancel.json()["detail"]
    assert sql(ledger_path, "SELECT COUNT(*) FROM conversations") == [(0,)]


def test_a_second_run_on_a_conversation_that_is_streaming_ends_with_an_error_event_and_no_run(
    ledger_path: Path,
) -> None:
    app = create_app(str(ledger_path), OfflineModel(words=2000, delay=0.01))

    async def test(client: httpx.AsyncClient) -> tuple[str, httpx.Response, httpx.Response]:
        first = asyncio.create_task(client.post("/conversations/new/runs", json={"text": "one"}))
        run_id, conversation_id = await aeventually(
            lambda: next(
                iter(sql(ledger_path, "SELECT id, conversation_id FROM agent_runs")), None
            ),
            "the first run to begin",
        )
        second = await client.post(f"/conversations/{conversation_id}/runs", json={"text": "two"})
        empty = await client.post(f"/conversations/{conversation_id}/runs", json={"text": ""})
        await aeventually(  # some of the answer shown (and made durable) before the cancel
            lambda: sql(ledger_path, "SELECT 1 FROM agent_runs WHERE partial_output <> ''"),
            "the first run to show some of its answer",
        )
        await client.post(f"/runs/{run_id}/cancel")
        await asyncio.wait_for(first, WAIT)
        return conversation_id, second, empty

    conversation_id, second, empty = in_process(app, test)

    ((kind, data),) = sse_events(second.text)
    assert kind == "error", data
    assert json.loads(data)["error"].startswith("ConversationBusyError: ")
    assert empty.status_code == 422
    assert sql(ledger_path, "SELECT COUNT(*) FROM agent_runs") == [(1,)]
    assert [role for role, _, _ in stored_messages(ledger_path, conversation_id)] == [
        "user",
        "assistant",
    ]


# --- Stop -----------------------------------------------------------------------------------------


def test_cancel_mid_answer_keeps_exactly_the_text_streamed_as_an_interrupted_answer(
    ledger_path: Path,
) -> None:
    app = create_app(str(ledger_path), OfflineModel(words=2000, delay=0.01))

    def streaming_run() -> str | None:
        # A run whose streamed text has been flushed as its partial output: it is mid-answer.
        found = sql(
            ledger_path,
            "SELECT id FROM agent_runs WHERE status = 'running' AND partial_output IS NOT NULL",
        )
        return found[0][0] if found else None

    async def test(client: httpx.AsyncClient) -> tuple[str, httpx.Response, httpx.Response, Any]:
        # The in-process transport hands the response over whole, once the stream has ended.
        run = asyncio.create_task(client.post("/conversations/new/runs", json={"text": QUESTION}))
        run_id = await aeventually(streaming_run, "the answer to stream")
        cancelled = await client.post(f"/runs/{run_id}/cancel")
        response = await asyncio.wait_for(run, WAIT)
        conversation_id = events_of(response.text)[0]["conversation_id"]
        return run_id, cancelled, response, (await client.get(f"/conversations/{conversation_id}"))

    run_id, cancelled, response, shown = in_process(app, test)

    assert cancelled.json() == {
        "run_id": run_id,
        "status": "interrupted",
        "stop_reason": "cancelled",
    }
    events = events_of(response.text)
    received = streamed_text(events)
    assert 0 < len(received.split()) < 2000
    end = events[-1]
    assert (end["event"], end["run_id"]) == ("run_finished", run_id)
    assert (end["status"], end["stop_reason"], end["answer"]) == (
        "interrupted",
        "cancelled",
        received,
    )
    conversation = shown.json()
    assert [(m["role"], m["content"], m["interrupted"]) for m in conversation["messages"]] == [
        ("user", QUESTION, False),
        ("assistant", received, True),
    ]
    assert stored_messages(ledger_path, conversation["id"]) == [
        ("user", QUESTION, False),
        ("assistant", received, True),
    ]
    assert run_row(ledger_path, run_id) == ("interrupted", "cancelled")


# --- a client that goes away ----------------------------------------------------------------------


def test_a_client_that_disconnects_mid_stream_stops_the_run_and_its_partial_answer_is_kept(
    ledger_path: Path,
) -> None:
    app = create_app(str(ledger_path), OfflineModel(words=2000, delay=0.01))
    with served(app) as url, httpx.Client(base_url=url, timeout=WAIT) as client:
        received: list[dict[str, Any]] = []
        with client.stream("POST", "/conversations/new/runs", json={"text": QUESTION}) as stream:
            lines = stream.iter_lines()
            while not received or received[-1]["event"] != "text_delta":
                received.extend(events_of("\n".join(until_blank(lines))))
        # The response is closed: the connection is gone, the run still running, for now.
        run_id, conversation_id = received[0]["run_id"], received[0]["conversation_id"]

        status = eventually(
            lambda: (s := run_row(ledger_path, run_id)) != ("running", None) and s,
            "the run to stop",
        )
        shown = client.get(f"/conversations/{conversation_id}").json()

    assert status == ("interrupted", "cancelled")
    (question, answer) = stored_messages(ledger_path, conversation_id)
    assert question == ("user", QUESTION, False)
    role, kept, interrupted = answer
    assert (role, interrupted) == ("assistant", True)
    # What the app had handed on (at least what this client read, never the whole answer).
    assert kept.startswith(streamed_text(received))
    assert 0 < len(kept.split()) < 2000
    assert shown["messages"][-1] == {**shown["messages"][-1], "content": kept, "interrupted": True}


# --- in a browser ---------------------------------------------------------------------------------


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as found:
        yield found


@pytest.mark.serial
def test_in_a_browser_the_answer_streams_stop_interrupts_it_and_a_reload_shows_it_flagged(
    ledger_path: Path, browser: Any
) -> None:
    app = create_app(str(ledger_path), OfflineModel(words=600, delay=0.05), viewer=VIEWER)
    with served(app) as url:
        page = browser.new_page()
        page.set_default_timeout(WAIT * 1000)
        page.goto(url)
        page.wait_for_selector("#model.stand-in")
        assert "offline stand-in model" in page.text_content("#model")
        page.fill("#text", QUESTION)
        page.click("#send")

        page.wait_for_selector(".tool", state="attached")
        assert page.text_content(".tool").startswith('⚙ lookup({"topic":"Lisbon"})')
        answer = ".msg.assistant"
        grows = "([sel, n]) => document.querySelector(sel).textContent.length > n"
        page.wait_for_function(grows, arg=[answer, 0])
        before = len(page.text_content(answer))
        page.wait_for_function(grows, arg=[answer, before])  # the answer streams in
        page.click("#stop")
        page.wait_for_selector(f"{answer}.interrupted")
        shown = page.text_content(answer)
        assert page.is_enabled("#send") and not page.is_enabled("#stop")

        conversation_id = page.evaluate("new URLSearchParams(location.search).get('c')")
        page.reload()
        page.wait_for_selector(f"body[data-loaded='{conversation_id}']")
        messages = page.eval_on_selector_all(
            ".msg", "els => els.map(e => [e.className, e.textContent])"
        )
        drawn = page.eval_on_selector_all(
            "#log > *", "els => els.map(e => [e.className, e.textContent, e.href || null])"
        )
        page.close()

    assert 0 < len(shown.split()) < 600
    assert messages == [["msg user", QUESTION], ["msg assistant interrupted", shown]]
    ((run_id,),) = sql(ledger_path, "SELECT id FROM agent_runs")
    assert drawn == [  # after a reload: the tool call read from the ledger, the run's link
        ["msg user", QUESTION, None],
        ["tool", '⚙ lookup({"topic":"Lisbon"}) ✓', None],
        ["msg assistant interrupted", shown, None],
        ["trace", "how this answer was made ↗", f"{VIEWER}/r/{run_id}"],
    ]
    assert stored_messages(ledger_path, conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", shown, True),
    ]

"""Live pages: ``Ledger.changes_since`` names what was written since a stamp (on each backend,
in a handle's scope, a transaction still open when the stamp was read included), the viewer
streams it as server-sent events from one poller, and serves the parts of a page that change
as fragments written with the page's own templates. The browser's side (swapping them in) is
``test_ui_browser.py``'s."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy
from starlette.testclient import TestClient

from agentledger import ToolCall, Usage
from agentledger.errors import UsageError
from agentledger.ledger import ChangedSince, Ledger, LedgerReader
from agentledger.ui import create_app
from support.databases import BACKENDS, fresh_database
from support.ledger import sqlalchemy_url
from support.served import served

ADDRESS = "http://127.0.0.1:8765"
WAIT = 30.0


@pytest.fixture(scope="module", params=BACKENDS)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ledger on each backend, shared: each test reads what changed after it began."""
    with fresh_database(request.param, request) as made:
        Ledger.open(made).close()
        yield made


def test_changes_since_names_the_conversations_and_runs_written_since_a_stamp(url):
    with Ledger.open(url) as ledger:
        start = ledger.changes_since()
        assert not start and start.conversation_ids == start.run_ids == frozenset()
        running = ledger.turn(user="Count to three", agent_name="counter")
        running.begin()
        begun = ledger.changes_since(start.stamp)
        assert begun.conversation_ids == {running.conversation_id}
        assert begun.run_ids == {running.run_id}
        assert not ledger.changes_since(begun.stamp)  # nothing new: nothing said

        running.step("one", usage=Usage(input_tokens=5, output_tokens=1))
        stepped = ledger.changes_since(begun.stamp)
        assert stepped.run_ids == {running.run_id}
        running.shown("one, two")
        running.flush_shown()
        flushed = ledger.changes_since(stepped.stamp)
        assert flushed.run_ids == {running.run_id}  # the partial answer is the run's
        running.answer("one, two, three")
        answered = ledger.changes_since(flushed.stamp)
        assert answered.conversation_ids == {running.conversation_id}
        assert answered.stamp > flushed.stamp > start.stamp


def test_a_scoped_handle_hears_only_of_its_own_tenants_changes(url):
    with Ledger.open(url) as ledger:
        start = ledger.changes_since().stamp
        with ledger.scoped("acme").turn(user="Ours", agent_name="a") as ours:
            ours.answer("yes")
        with ledger.scoped("other").turn(user="Theirs", agent_name="a") as theirs:
            theirs.answer("no")
        seen = ledger.scoped("acme").changes_since(start)
        assert seen.conversation_ids == {ours.conversation_id}
        assert seen.run_ids == {ours.run_id}
        everything = ledger.changes_since(start).conversation_ids
        assert everything == {ours.conversation_id, theirs.conversation_id}


def test_a_forgotten_conversation_is_told_as_a_deletion_in_every_scope(url):
    with Ledger.open(url) as ledger:
        with ledger.scoped("acme").turn(user="Forget me", agent_name="a") as turn:
            turn.answer("gone soon")
        before = ledger.changes_since().stamp
        assert not ledger.changes_since(before).deleted
        ledger.forget(turn.conversation_id)
        assert ledger.changes_since(before).deleted
        assert ledger.scoped("other").changes_since(before).deleted  # the log keeps no tenant
        assert not ledger.changes_since(ledger.changes_since().stamp).deleted


def test_a_change_committed_after_the_stamp_was_read_is_told_next_time(url):
    """A writer's transaction open while the stamp is read commits after it: on PostgreSQL its
    rows carry a stamp below the highest one committed then, and are still found."""
    with Ledger.open(url) as ledger:
        with ledger.turn(user="Hello", agent_name="a") as turn:
            turn.answer("hi")
        engine = sqlalchemy.create_engine(sqlalchemy_url(url))
        try:
            with engine.connect() as writer:
                with writer.begin():
                    writer.execute(
                        sqlalchemy.text(
                            "UPDATE conversations SET version = version WHERE id = :id"
                        ),
                        {"id": turn.conversation_id},
                    )
                    if not url.startswith("sqlite"):  # SQLite has one writer at a time
                        # A later transaction commits first: its stamp is above the open one's.
                        with ledger.turn(user="Later", agent_name="a") as later:
                            later.answer("ok")
                    before_commit = ledger.changes_since()
                after = ledger.changes_since(before_commit.stamp)
        finally:
            engine.dispose()
        assert turn.conversation_id in after.conversation_ids


def test_the_standard_librarys_reader_tells_the_same_changes(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        start = ledger.changes_since().stamp
        with ledger.turn(user="Hello", agent_name="a") as turn:
            turn.answer("hi")
        expected = ledger.changes_since(start)
    with LedgerReader.open(path, read_only=True) as reader:
        assert reader.changes_since(start) == expected
        assert reader.changes_since(expected.stamp) == ChangedSince(stamp=expected.stamp)


# --- the viewer ----------------------------------------------------------------------------------


@pytest.fixture
def running(url):
    """A ledger with a run still going, one step recorded."""
    ledger = Ledger.open(url)
    turn = ledger.turn(user="Count to three", agent_name="counter")
    turn.begin()
    turn.step("one", usage=Usage(input_tokens=5, output_tokens=1))
    yield ledger, turn
    ledger.close()


def test_pages_carry_the_stamp_they_were_read_at_and_fragments_show_what_changed(running):
    ledger, turn = running
    with Ledger.open(ledger.url, migrate=False, read_only=True) as viewer:
        client = TestClient(create_app(viewer), base_url=ADDRESS)
        page = client.get(f"/c/{turn.conversation_id}").text
        (stamp,) = re.findall(r'<body data-stamp="(\d+)">', page)
        assert int(stamp) == viewer.changes_since().stamp
        assert f'data-live="/live/c/{turn.conversation_id}"' in page
        assert 'data-live="/live/"' in client.get("/").text

        turn.step("two", usage=Usage(input_tokens=5, output_tokens=1))
        turn.shown("one, two")
        turn.flush_shown()
        run = client.get(f"/live/r/{turn.run_id}")
        turns = client.get(f"/live/c/{turn.conversation_id}")
        listing = client.get("/live/?agent=counter")
    assert run.status_code == turns.status_code == listing.status_code == 200
    assert run.text.startswith('<div class="fragment">') and "<body" not in run.text
    assert f'id="step-{turn.run_id}-1"' in run.text and "one, two" in run.text
    assert f'data-turn="{turn.run_id}"' in turns.text and "shown so far" in turns.text
    assert f'data-conversation="{turn.conversation_id}"' in listing.text
    assert 'data-live="/live/?agent=counter"' in listing.text


def test_reads_inside_ledger_reading_see_one_moment_and_a_write_there_is_refused(url):
    with Ledger.open(url) as ledger, Ledger.open(url) as other:

        def read_twice() -> tuple[int, int]:
            before = len(ledger.conversations())
            with other.turn(user="Meanwhile", agent_name="a") as turn:  # committed elsewhere
                turn.answer("ok")
            return before, len(ledger.conversations())

        before, after = ledger.reading("two listings", read_twice)
        assert after == before
        assert len(ledger.conversations()) == before + 1
        with pytest.raises(UsageError, match=r"inside Ledger\.reading"):
            ledger.reading("a write", lambda: ledger.create_conversation())
        assert len(ledger.conversations()) == before + 1


STEPS, CALLS = 12, 4


def test_a_run_read_while_another_handle_writes_it_shows_whole_steps_and_holds_up_no_write(url):
    """The viewer reads a run again and again while another handle records its steps, each
    with several tool calls: every read shows whole steps (each with all its calls, or not
    yet there), in order, and every write goes through at once (the viewer takes no lock a
    writer waits for)."""
    import threading

    shown: list[list[int]] = []
    statuses: set[int] = set()
    with Ledger.open(url) as writer, Ledger.open(url, migrate=False, read_only=True) as viewer:
        turn = writer.turn(user="Look everything up", agent_name="reader")
        turn.begin()
        client = TestClient(create_app(viewer), base_url=ADDRESS)
        done = threading.Event()

        def read_once() -> None:
            response = client.get(f"/live/r/{turn.run_id}")
            statuses.add(response.status_code)
            steps = response.text.split('<li class="step"')[1:]
            shown.append([step.count('<details class="tool') for step in steps])

        def read() -> None:
            while not done.is_set():
                read_once()

        reader = threading.Thread(target=read)
        reader.start()
        slowest = 0.0
        try:
            for n in range(STEPS):
                calls = [
                    ToolCall(id=f"c{n}-{i}", name="lookup", arguments={"key": f"{n}-{i}"})
                    for i in range(CALLS)
                ]
                began = time.monotonic()
                step = turn.step(f"step {n}", tool_calls=calls, usage=Usage(input_tokens=1))
                for call in calls:
                    step.tool_result(call.id, "x" * 2_000)
                slowest = max(slowest, time.monotonic() - began)
                read_before = len(shown)
                while len(shown) < read_before + 2 and reader.is_alive():
                    time.sleep(0.001)  # a whole read begun after this step's commit
            turn.answer("done")
        finally:
            done.set()
            reader.join()
        read_once()  # after the answer
    assert statuses == {200}  # never "damaged" for a run and its steps read apart
    assert shown[-1] == [CALLS] * STEPS + [0]  # the answer: a step without calls
    steps_seen = [len(counts) for counts in shown]
    assert set(range(1, STEPS + 1)) <= set(steps_seen)  # the run read after every step
    assert steps_seen == sorted(steps_seen)
    assert all(counts[:STEPS] == [CALLS] * min(len(counts), STEPS) for counts in shown)
    assert slowest < WAIT  # a writer waiting on a reader's lock would wait out its busy timeout


def test_a_fragment_of_another_tenants_run_is_not_found_as_an_unknown_one(tmp_path):
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        with ledger.scoped("other").turn(user="Theirs", agent_name="a") as theirs:
            theirs.answer("no")
        client = TestClient(create_app(ledger.scoped("acme")), base_url=ADDRESS)
        hidden = client.get(f"/live/r/{theirs.run_id}")
        unknown = client.get("/live/r/01234567-0000-7000-8000-000000000000")
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.text.replace(theirs.run_id, "ID") == unknown.text.replace(
        "01234567-0000-7000-8000-000000000000", "ID"
    )


def test_the_event_stream_tells_every_open_page_what_changed_as_it_is_committed(running):
    ledger, turn = running
    with Ledger.open(ledger.url, migrate=False, read_only=True) as viewer:
        stamp = viewer.changes_since().stamp
        with (
            served(create_app(viewer)) as base,
            httpx.Client(base_url=base) as client,
            client.stream("GET", f"/events?since={stamp}") as first,
            client.stream("GET", "/events", headers={"last-event-id": str(stamp)}) as second,
        ):
            assert first.headers["content-type"].startswith("text/event-stream")
            lines = [first.iter_lines(), second.iter_lines()]
            turn.step("two", usage=Usage(input_tokens=5, output_tokens=1))
            told = [next_change(each) for each in lines]
    for event_id, data in told:
        assert data["runs"] == [turn.run_id]
        assert event_id >= stamp  # PostgreSQL: the oldest open transaction of the server


def test_the_event_stream_tells_that_rows_were_deleted_and_a_forgotten_pages_parts_are_gone(url):
    with Ledger.open(url) as ledger, Ledger.open(url, migrate=False, read_only=True) as viewer:
        with ledger.turn(user="Forget me", agent_name="a") as turn:
            turn.answer("gone soon")
        stamp = viewer.changes_since().stamp
        with (
            served(create_app(viewer)) as base,
            httpx.Client(base_url=base) as client,
            client.stream("GET", f"/events?since={stamp}") as stream,
        ):
            assert client.head(f"/live/c/{turn.conversation_id}").status_code == 200
            ledger.forget(turn.conversation_id)
            told = stream_until(stream.iter_lines(), '"deleted": true')
            # What a page asks before it loads again: its conversation's and run's parts.
            conversation = client.head(f"/live/c/{turn.conversation_id}")
            run = client.head(f"/live/r/{turn.run_id}")
    assert turn.conversation_id not in told[-1] and turn.run_id not in told[-1]
    assert conversation.status_code == run.status_code == 404


def test_a_scoped_viewers_stream_never_names_another_tenants_conversation_or_run(url):
    with Ledger.open(url) as ledger, Ledger.open(url, migrate=False, read_only=True) as viewer:
        stamp = viewer.changes_since().stamp
        with (
            served(create_app(viewer.scoped("acme"))) as base,
            httpx.Client(base_url=base) as client,
            client.stream("GET", f"/events?since={stamp}") as stream,
        ):
            with ledger.scoped("other").turn(user="Theirs", agent_name="a") as theirs:
                theirs.answer("no")
            with ledger.scoped("acme").turn(user="Ours", agent_name="a") as ours:
                ours.answer("yes")
            told = stream_until(stream.iter_lines(), ours.run_id)
    named = " ".join(told)
    assert theirs.conversation_id not in named and theirs.run_id not in named
    assert ours.conversation_id in named


def stream_until(lines: Iterator[str], wanted: str) -> list[str]:
    """The data lines of a stream, read until one names ``wanted``."""
    deadline, told = time.monotonic() + WAIT, []
    for line in lines:
        assert time.monotonic() < deadline, f"{wanted} not told"
        if line.startswith("data: "):
            told.append(line)
            if wanted in line:
                return told
    raise AssertionError("the stream ended")


def next_change(lines: Iterator[str]) -> tuple[int, dict[str, list[str]]]:
    """The next event of a stream that names a change: its id and its data."""
    deadline = time.monotonic() + WAIT
    fields: dict[str, str] = {}
    for line in lines:
        assert time.monotonic() < deadline, "no change told"
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if fields.get("event") == "changes" and json.loads(fields["data"])["runs"]:
            return int(fields["id"]), json.loads(fields["data"])
        fields = {}
    raise AssertionError("the stream ended")

"""``LedgerSession`` against the rest of the OpenAI Agents SDK's session contract (its
session-persistence reference): ``get_items(limit)`` gives the newest items in the order they
were written whatever the writers' clocks say; ``pop_item`` is atomic (two handles popping at
once take two different items); concurrent first writers of one session lose nothing. Each
handle is its own engine and connections, as another process's would be."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentledger.integrations.openai_agents import LedgerSession
from agentledger.ledger import Ledger

SESSION = "user-7"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def at_once(workers: list[Callable[[], Any]]) -> list[Any]:
    """Run ``workers`` in threads released together; their results, or the first error."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        barrier.wait()
        try:
            results[n] = workers[n]()
        except BaseException as exc:  # pragma: no cover - raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def handles(db_url: str, ledger: Ledger) -> Iterator[list[Ledger]]:
    """Two more handles on the ledger, as two other processes would open it."""
    with Ledger.open(db_url) as first, Ledger.open(db_url) as second:
        yield [first, second]


# --- get_items: the order of writing, whatever the clocks say ------------------------------------


@pytest.mark.parametrize("separate_trace", [True, False])
def test_items_come_back_in_the_order_written_when_a_writers_clock_is_behind(
    db_url, ledger, separate_trace
):
    """Two hosts writing one session, the second's clock an hour behind: its items still come
    after the ones written before them, and a limit takes the newest written."""
    behind = datetime.now(UTC) - timedelta(hours=1)
    with Ledger.open(db_url, clock=lambda: behind) as late:
        first = LedgerSession(SESSION, ledger, separate_trace=separate_trace)
        second = LedgerSession(SESSION, late, separate_trace=separate_trace)
        run(first.add_items([said("one")]))
        run(second.add_items([said("two")]))
        run(first.add_items([said("three")]))

        expected = [said("one"), said("two"), said("three")]
        assert run(first.get_items()) == expected
        assert run(second.get_items()) == expected
        assert run(first.get_items(limit=2)) == expected[1:]


def test_runs_stamped_at_the_same_instant_keep_the_order_written(db_url):
    """A clock that never moves (ties on every timestamp): the order is still the writing."""
    instant = datetime(2026, 1, 1, tzinfo=UTC)
    with Ledger.open(db_url, clock=lambda: instant) as frozen:
        session = LedgerSession(SESSION, frozen)
        for text in ("one", "two", "three", "four"):
            run(session.add_items([said(text)]))
        assert run(session.pop_item()) == said("four")
        run(session.add_items([said("five")]))
        assert run(session.get_items()) == [said(t) for t in ("one", "two", "three", "five")]
        assert run(session.get_items(limit=1)) == [said("five")]


# --- pop_item is atomic --------------------------------------------------------------------------


@pytest.mark.parametrize("rounds", [3])
def test_two_handles_popping_at_once_take_two_different_items(ledger, handles, rounds):
    session = LedgerSession(SESSION, ledger)
    texts = [f"item {n}" for n in range(2 * rounds)]
    run(session.add_items([said(t) for t in texts]))
    poppers = [LedgerSession(SESSION, handle) for handle in handles]

    popped = []
    for _ in range(rounds):
        popped += at_once([lambda p=p: run(p.pop_item()) for p in poppers])

    assert sorted(item["content"] for item in popped) == sorted(texts)
    assert run(session.get_items()) == []
    assert run(session.pop_item()) is None


# --- concurrent first writers ---------------------------------------------------------------------


def test_concurrent_first_writers_of_one_session_lose_nothing(ledger, handles):
    """The session does not exist yet; writers on three handles add at once (each creating
    it on its first write): every item lands, each writer's in its own order."""
    writers = [LedgerSession(SESSION, handle) for handle in [ledger, *handles]]

    def write(n: int) -> None:
        for turn in range(3):
            run(writers[n].add_items([said(f"{n}.{turn}")]))

    at_once([lambda n=n: write(n) for n in range(len(writers))])

    items = [item["content"] for item in run(writers[0].get_items())]
    assert sorted(items) == sorted(f"{n}.{t}" for n in range(3) for t in range(3))
    for n in range(3):
        assert [i for i in items if i.startswith(f"{n}.")] == [f"{n}.{t}" for t in range(3)]
    assert len(ledger.runs(SESSION)) == 9


# --- the SDK's compaction hook --------------------------------------------------------------------


def test_the_compaction_hook_replaces_a_suffix_in_one_run_and_keeps_every_row(ledger, db):
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([said(t) for t in ("one", "two", "three")]))
    rows = db.scalar("SELECT count(*) FROM conversation_messages")

    snapshot = run(session._get_compaction_snapshot(2))
    assert snapshot.items == [said("two"), said("three")]
    assert snapshot.complete is False
    assert run(session._get_compaction_snapshot(5)).complete is True

    summary = {"role": "assistant", "content": "two and three, in short"}
    assert run(snapshot.replace_suffix(0, [summary])) is True
    assert run(session.get_items()) == [said("one"), summary]
    assert db.scalar("SELECT count(*) FROM conversation_messages") == rows + 1
    # A stale snapshot (the session moved on since it was read) replaces nothing.
    assert run(snapshot.replace_suffix(0, [said("stale")])) is False
    assert run(session.get_items()) == [said("one"), summary]


def test_the_compaction_hook_refuses_a_suffix_another_handle_changed(ledger, handles):
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([said("one"), said("two")]))
    snapshot = run(session._get_compaction_snapshot(2))
    run(LedgerSession(SESSION, handles[0]).add_items([said("three")]))

    assert run(snapshot.replace_suffix(0, [said("short")])) is False
    assert run(session.get_items()) == [said("one"), said("two"), said("three")]


def test_the_compaction_hook_prunes_the_expired_prefix_with_the_suffix(ledger):
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([said(t) for t in ("old 1", "old 2", "kept", "recent")]))
    snapshot = run(
        session._get_compaction_snapshot(1, prune_prefix=lambda i: i["content"].startswith("old"))
    )
    assert run(snapshot.replace_suffix(0, [said("summary")])) is True
    assert run(session.get_items()) == [said("kept"), said("summary")]

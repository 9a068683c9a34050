"""``LedgerSession``'s usage and branch operations, as the SDK's ``AdvancedSQLiteSession`` names
them: the same assertions run against the SDK's session and ours (a ``Runner`` driving an agent
on a fake model through a few turns with tools), so any difference from the SDK's own store is
a failing test. Then what only the ledger does: a branch is a conversation of its own that names
what it was forked from and copies nothing, a deleted branch keeps its rows, and the usage comes
from the runs' rows (``store_run_usage`` adds nothing, and says so when the hooks were left
out)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession

from agentledger.errors import UsageError
from agentledger.integrations.openai_agents import (
    BRANCH_KEY,
    CLEARED_KEY,
    FORKED_FROM_KEY,
    SESSION_KEY,
    LedgerSession,
)
from agentledger.ledger import Ledger
from support.agents_sdk import FakeModel, add, call, say, weather
from support.databases import fresh_database

NO_TRACING = RunConfig(tracing_disabled=True)
SESSION = "user-9"


def agent() -> Agent[Any]:
    """An agent whose model answers the turns of ``Store.three_turns``, then one more."""
    model = FakeModel(
        "scripted",
        [
            [call("add", {"a": 2, "b": 3}, "call_1")],
            [say("5.", "msg_1")],
            [call("weather", {"city": "Paris"}, "call_2"), call("add", {"a": 1, "b": 1}, "call_3")],
            [say("Sunny, and 2.", "msg_2")],
            [say("You are welcome.", "msg_3")],
            [call("weather", {"city": "Rome"}, "call_4")],
            [say("Sunny in Rome.", "msg_4")],
        ],
    )
    return Agent(name="assistant", tools=[add, weather], model=model)


@dataclass
class Store:
    """A session under test, with what driving it takes: the hooks ``Runner.run`` is given
    and the error the session raises for a call it refuses."""

    session: Any
    hooks: Any
    refused: type[Exception]

    def __post_init__(self) -> None:
        self.agent = agent()

    def __call__(self, coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    def turn(self, text: str) -> Any:
        async def run() -> Any:
            result = await Runner.run(
                self.agent, text, session=self.session, hooks=self.hooks, run_config=NO_TRACING
            )
            await self.session.store_run_usage(result)
            return result.final_output

        return self(run())

    def three_turns(self) -> None:
        for text in ("What is 2 + 3?", "Weather in Paris, and 1 + 1?", "Thanks!"):
            self.turn(text)


@pytest.fixture(
    params=[
        "sdk",
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgresql),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The SDK's ``AdvancedSQLiteSession``, or a ``LedgerSession`` (showing every item, as
    the SDK's does) on each backend."""
    if request.param == "sdk":
        sdk = AdvancedSQLiteSession(
            session_id=SESSION, db_path=tmp_path / "sdk.db", create_tables=True
        )
        yield Store(sdk, None, ValueError)
        sdk.close()
        return
    with (
        fresh_database(request.param, request, tmp_path) as url,
        Ledger.open(url) as ledger,
    ):
        session = LedgerSession(SESSION, ledger, separate_trace=False)
        yield Store(session, session.hooks, UsageError)


# --- the same assertions, against the SDK's session and ours -------------------------------------


def test_usage_per_turn_and_tool_and_a_branch_from_a_turn_are_what_the_sdk_gives(store):
    """Usage per session, turn and tool; then a branch forked before turn 2 with a turn of its
    own, which switching back and forth loses nothing of."""
    store.three_turns()
    session = store.session

    assert store(session.get_session_usage()) == {
        "requests": 5,
        "input_tokens": 500,
        "output_tokens": 100,
        "total_tokens": 600,
        "total_turns": 3,
    }
    turns = store(session.get_turn_usage())
    assert [(t["user_turn_number"], t["requests"], t["total_tokens"]) for t in turns] == [
        (1, 2, 240),
        (2, 2, 240),
        (3, 1, 120),
    ]
    second = store(session.get_turn_usage(2))
    assert (second["requests"], second["input_tokens"], second["output_tokens"]) == (2, 200, 40)
    assert second["input_tokens_details"]["cached_tokens"] == 80
    assert second["output_tokens_details"] == {"reasoning_tokens": 10}
    assert store(session.get_turn_usage(9)) == {}
    assert store(session.get_tool_usage()) == [("add", 1, 1), ("add", 1, 2), ("weather", 1, 2)]

    main_items = store(session.get_items())

    assert store(session.create_branch_from_turn(2, "alt")) == "alt"
    assert store(session.get_items()) == main_items[:4]  # turn 1: its user message to its answer
    store.turn("Weather in Rome?")
    alt_items = store(session.get_items())
    assert alt_items[:4] == main_items[:4]
    assert alt_items[4] == {"role": "user", "content": "Weather in Rome?"}

    branches = {b["branch_id"]: b for b in store(session.list_branches())}
    assert {
        name: (b["message_count"], b["user_turns"], b["is_current"]) for name, b in branches.items()
    } == {"main": (12, 3, False), "alt": (8, 2, True)}
    assert all(isinstance(b["created_at"], str) for b in branches.values())

    assert store(session.get_session_usage())["total_turns"] == 4
    assert store(session.get_session_usage())["requests"] == 7
    assert store(session.get_session_usage("alt")) == {
        "requests": 2,
        "input_tokens": 200,
        "output_tokens": 40,
        "total_tokens": 240,
        "total_turns": 1,
    }
    assert [t["user_turn_number"] for t in store(session.get_turn_usage())] == [2]
    assert store(session.get_tool_usage()) == [("add", 1, 1), ("weather", 1, 2)]

    store(session.switch_to_branch("main"))
    assert store(session.get_items()) == main_items
    assert store(session.get_items(branch_id="alt")) == alt_items
    assert [t["user_turn_number"] for t in store(session.get_turn_usage())] == [1, 2, 3]
    assert store(session.get_tool_usage(branch_id="alt")) == [("add", 1, 1), ("weather", 1, 2)]
    store(session.switch_to_branch("alt"))
    assert store(session.get_items()) == alt_items


def test_branch_operations_refuse_and_delete_as_the_sdk_does(store):
    store.three_turns()
    session = store.session
    for refused in (
        lambda: session.create_branch_from_turn(9),
        lambda: session.create_branch_from_turn(1, " "),
        lambda: session.switch_to_branch("nowhere"),
        lambda: session.delete_branch("main"),
        lambda: session.delete_branch("nowhere"),
    ):
        with pytest.raises(store.refused):
            store(refused())

    made = store(session.create_branch_from_turn(3))
    assert made.startswith("branch_from_turn_3_")
    with pytest.raises(store.refused):
        store(session.create_branch_from_turn(2, made))  # an id is taken once
    with pytest.raises(store.refused):
        store(session.delete_branch(made))  # the current one, without force
    store(session.delete_branch(made, force=True))

    assert [(b["branch_id"], b["is_current"]) for b in store(session.list_branches())] == [
        ("main", True)
    ]
    assert len(store(session.get_items())) == 12
    with pytest.raises(store.refused):
        store(session.switch_to_branch(made))
    with pytest.raises(store.refused):
        store(session.create_branch_from_turn(2, made))  # nor given again once deleted


def test_turns_are_listed_and_found_to_branch_from_and_clearing_takes_the_branches(store):
    store.three_turns()
    session = store.session
    main_items = store(session.get_items())

    turns = store(session.get_conversation_turns())
    assert [(t["turn"], t["content"], t["full_content"], t["can_branch"]) for t in turns] == [
        (1, "What is 2 + 3?", "What is 2 + 3?", True),
        (2, "Weather in Paris, and 1 + 1?", "Weather in Paris, and 1 + 1?", True),
        (3, "Thanks!", "Thanks!", True),
    ]
    assert all(isinstance(t["timestamp"], str) for t in turns)
    assert [t["turn"] for t in store(session.find_turns_by_content("PARIS"))] == [2]
    assert store(session.find_turns_by_content("London")) == []
    with pytest.raises(store.refused):
        store(session.create_branch_from_content("London"))

    assert store(session.create_branch_from_content("paris", "alt")) == "alt"
    assert store(session.get_items()) == main_items[:4]
    assert [t["turn"] for t in store(session.get_conversation_turns())] == [1]
    assert len(store(session.get_conversation_turns("main"))) == 3

    # Clearing the session takes its branches and its usage, and goes back to main.
    store(session.clear_session())
    assert store(session.get_items()) == []
    assert store(session.get_session_usage()) is None
    assert "alt" not in [b["branch_id"] for b in store(session.list_branches())]
    with pytest.raises(store.refused):
        store(session.switch_to_branch("alt"))


# --- what only the ledger does -------------------------------------------------------------------


@pytest.fixture
def driven(ledger: Ledger) -> Store:
    """A ``LedgerSession`` showing the conversation (the default), through the three turns,
    with a branch ``alt`` forked before the second and a turn of its own."""
    session = LedgerSession(SESSION, ledger)
    driven = Store(session, session.hooks, UsageError)
    driven.three_turns()
    driven(session.create_branch_from_turn(2, "alt"))
    driven.turn("Weather in Rome?")
    return driven


def said(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_branch_is_a_conversation_naming_what_it_was_forked_from_and_copies_nothing(
    driven, ledger, db, db_url
):
    branch = ledger.conversation(f"{SESSION}/branch/alt")
    assert branch.metadata_[SESSION_KEY] == SESSION
    assert branch.metadata_[BRANCH_KEY] == "alt"
    fork = branch.metadata_[FORKED_FROM_KEY]
    assert (fork["conversation"], fork["turn"]) == (SESSION, 2)
    # Its own turn only: what it shares with main stays in main's rows.
    rows = db.column(
        "SELECT content FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
        c=branch.id,
    )
    assert rows == ["Weather in Rome?", "Sunny in Rome."]
    alt = [i.get("content") for i in driven(driven.session.get_items())]
    assert alt[0] == "What is 2 + 3?" and alt[2] == "Weather in Rome?" and len(alt) == 4

    # What main does after the fork does not reach the branch, from this handle or another.
    driven(driven.session.switch_to_branch("main"))
    for _ in range(3):
        driven(driven.session.pop_item())
    driven(driven.session.add_items([said("Something else")]))
    with Ledger.open(db_url) as other:
        elsewhere = LedgerSession(SESSION, other)
        driven(elsewhere.switch_to_branch("alt"))
        assert [i.get("content") for i in driven(elsewhere.get_items())] == alt
        # Nor what the branch does main: popping into what the two share pops the branch's.
        main = driven(driven.session.get_items())
        popped = [driven(elsewhere.pop_item()) for _ in range(3)]
        assert [i.get("content") for i in popped][:2] == alt[:1:-1]
        assert [i.get("content") for i in driven(elsewhere.get_items())] == alt[:1]
        assert driven(driven.session.get_items()) == main
    assert ledger.verify() == []


def test_a_deleted_branch_keeps_its_rows_and_what_was_forked_from_it(driven, db):
    session = driven.session
    driven(session.add_items([said("And tomorrow?")]))
    driven(session.create_branch_from_turn(3, "alt-2"))  # shares alt's turn of its own
    shared = driven(session.get_items())
    assert said("Weather in Rome?") in shared
    driven(session.switch_to_branch("main"))
    before = db.scalar("SELECT count(*) FROM conversation_messages")

    driven(session.delete_branch("alt"))
    assert db.scalar("SELECT count(*) FROM conversation_messages") == before
    assert {b["branch_id"] for b in driven(session.list_branches())} == {"main", "alt-2"}
    assert driven(session.get_items(branch_id="alt-2")) == shared
    assert driven(session.get_session_usage("alt-2")) is None  # no model call of its own yet


def test_store_run_usage_adds_nothing_to_what_the_hooks_recorded(driven, db):
    """Seven model calls of 100 input tokens each, stored once, whatever the view."""
    assert db.scalar("SELECT sum(input_tokens) FROM agent_runs") == 700
    assert db.scalar("SELECT sum(input_tokens) FROM step_executions") == 700
    assert driven(driven.session.get_session_usage())["input_tokens"] == 700


_REFUSE_CLEARING = {
    "sqlite": [
        f"CREATE TRIGGER refuse_clearing BEFORE INSERT ON agent_runs WHEN new.metadata LIKE "
        f"'%{CLEARED_KEY}%' BEGIN SELECT RAISE(ABORT, 'clearing refused'); END"
    ],
    "postgresql": [
        f"CREATE FUNCTION refuse_clearing() RETURNS trigger AS $$ BEGIN IF NEW.metadata::text "
        f"LIKE '%{CLEARED_KEY}%' THEN RAISE EXCEPTION 'clearing refused'; END IF; RETURN NEW; "
        "END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_clearing BEFORE INSERT ON agent_runs "
        "FOR EACH ROW EXECUTE FUNCTION refuse_clearing()",
    ],
}


def test_clearing_is_one_transaction_branches_and_all(driven, db):
    """The database refuses the run that empties main, after the branches' were written: the
    session keeps every branch and item, and its current branch; once it takes it, the session
    is cleared whole."""
    session = driven.session
    branches, alt, main = (
        driven(session.list_branches()),
        driven(session.get_items()),
        driven(session.get_items(branch_id="main")),
    )
    runs = db.count("agent_runs")
    db.execute(*_REFUSE_CLEARING[db.dialect])
    with pytest.raises(Exception, match="clearing refused"):
        driven(session.clear_session())
    assert driven(session.list_branches()) == branches
    assert driven(session.get_items()) == alt  # still on the branch
    assert driven(session.get_items(branch_id="main")) == main
    assert db.count("agent_runs") == runs

    db.execute(
        "DROP TRIGGER refuse_clearing ON agent_runs"
        if db.dialect == "postgresql"
        else "DROP TRIGGER refuse_clearing"
    )
    driven(session.clear_session())
    assert [b["branch_id"] for b in driven(session.list_branches())] == ["main"]
    assert driven(session.get_items()) == []


def test_store_run_usage_says_to_pass_the_hooks_when_they_were_left_out(ledger, db):
    session = LedgerSession(SESSION, ledger)
    driven = Store(session, None, UsageError)
    with pytest.raises(UsageError, match=r"hooks=session\.hooks"):
        driven.turn("What is 2 + 3?")
    assert db.scalar("SELECT count(*) FROM conversation_messages") == 2  # the turn is kept


def test_two_handles_taking_one_branch_id_at_once_get_it_once(ledger, db_url):
    """As two processes would: one makes the branch, the other is refused, nothing half made."""
    run = asyncio.run
    run(LedgerSession(SESSION, ledger).add_items([said("one"), said("two")]))
    with Ledger.open(db_url) as first, Ledger.open(db_url) as second:
        sessions = [LedgerSession(SESSION, handle) for handle in (first, second)]
        barrier = threading.Barrier(2)
        outcomes: list[Any] = [None, None]

        def take(n: int) -> None:
            barrier.wait()
            try:
                outcomes[n] = run(sessions[n].create_branch_from_turn(2, "same"))
            except UsageError as refused:
                outcomes[n] = refused

        threads = [threading.Thread(target=take, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert sorted(map(type, outcomes), key=str) == sorted([str, UsageError], key=str)
    session = LedgerSession(SESSION, ledger)
    assert [b["branch_id"] for b in run(session.list_branches())] == ["main", "same"]
    assert run(session.get_items(branch_id="same")) == [said("one")]

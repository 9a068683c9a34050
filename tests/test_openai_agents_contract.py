"""``LedgerSession`` against the rest of the OpenAI Agents SDK's session contract (its
session-persistence reference): ``get_items(limit)`` gives the newest items in the order they
were written whatever the writers' clocks say; ``pop_item`` is atomic (two handles popping at
once take two different items); concurrent first writers of one session lose nothing. Each
handle is its own engine and connections, as another process's would be."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy
from agents import Agent as SdkAgent
from agents import Model, ModelResponse, RunConfig, Runner, Usage
from agents.memory import OpenAIResponsesCompactionSession
from agents.memory.session import _CompactionSnapshot
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from agentledger._agents_sdk_items import REMOVED_KEY
from agentledger.integrations.openai_agents import LedgerSession
from agentledger.ledger import Ledger

NO_TRACING = RunConfig(tracing_disabled=True)

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


# --- OpenAIResponsesCompactionSession over LedgerSession, end to end -----------------------------


class AnsweringModel(Model):
    """The SDK's ``Model`` answering each call with one text, as a stored Responses response
    (a response id: what the SDK's automatic compaction needs), keeping what it was sent."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any):
        self.inputs.append(json.loads(json.dumps(input)))
        n = len(self.inputs)
        text = ResponseOutputText(type="output_text", text=f"answer {n}", annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run without streaming")


COMPACTED = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA-what-came-before"}


class CompactingClient:
    """What the compaction session calls of an ``AsyncOpenAI`` client: ``responses.compact``,
    answering with a compaction item (and the caller's first message, as the API keeps it)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.outputs: list[list[Any]] = []
        self.responses = self

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        kept = [i for i in kwargs.get("input", []) if i.get("role") == "user"][:1]
        self.outputs.append([*kept, COMPACTED])
        return SimpleNamespace(output=self.outputs[-1], usage=None)


def compacting(session: LedgerSession) -> tuple[OpenAIResponsesCompactionSession, CompactingClient]:
    client = CompactingClient()
    wrapper = OpenAIResponsesCompactionSession(
        session.session_id,
        session,
        client=client,  # type: ignore[arg-type]
        should_trigger_compaction=lambda context: True,
    )
    return wrapper, client


def test_the_compaction_session_compacts_through_the_hook_and_the_model_sees_the_compaction(
    ledger,
):
    """Runner with ``OpenAIResponsesCompactionSession(underlying_session=LedgerSession)``:
    after the turn, the SDK compacts it through the session's hook (one run naming what it
    replaced), the next model call is sent the compaction item, and the ledger keeps every
    message that was said."""
    session = LedgerSession(SESSION, ledger)
    wrapper, client = compacting(session)
    model = AnsweringModel()
    agent = SdkAgent(name="assistant", model=model)

    run(Runner.run(agent, "hello", session=wrapper, run_config=NO_TRACING))
    assert client.requests == [{"model": "gpt-4.1", "previous_response_id": "resp_1"}]
    assert run(session.get_items()) == [COMPACTED]
    compactions = [r for r in ledger.runs(SESSION) if REMOVED_KEY in (r.metadata_ or {})]
    assert len(compactions) == 1  # the hook's one run, not a clear and an add

    run(Runner.run(agent, "and then?", session=wrapper, run_config=NO_TRACING))
    assert COMPACTED in model.inputs[1]
    assert [m.content for m in ledger.messages(SESSION)][:2] == ["hello", "answer 1"]


def test_a_manual_compaction_replaces_the_history_and_the_compaction_stays_in_view(ledger):
    """``run_compaction({"force": True})`` outside a run: the SDK clears the session and adds
    the compacted output; the compaction item is in the default view afterwards."""
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([said("one"), {"role": "assistant", "content": "two"}]))
    wrapper, client = compacting(session)

    run(wrapper.run_compaction({"force": True}))
    assert client.requests[0]["input"][0]["content"] == "one"
    assert run(session.get_items()) == [said("one"), COMPACTED]
    assert run(LedgerSession(SESSION, ledger, separate_trace=False).get_items()) == [
        said("one"),
        COMPACTED,
    ]


def test_the_sdk_private_compaction_hook_has_the_shape_the_session_gives_it():
    """``_CompactionSnapshot`` and the name the compaction session looks the hook up by are
    private to the SDK: this fails first when an SDK release changes either."""
    assert [f.name for f in dataclasses.fields(_CompactionSnapshot)] == [
        "items",
        "complete",
        "replace_suffix",
    ]
    source = inspect.getsource(OpenAIResponsesCompactionSession)
    assert '"_get_compaction_snapshot"' in source
    assert "snapshot.replace_suffix(suffix_start, output_items)" in source
    assert inspect.iscoroutinefunction(LedgerSession._get_compaction_snapshot)


# --- the commit order the session reads by holds ------------------------------------------------


def test_nothing_the_ledger_does_later_restamps_a_sessions_completed_runs(ledger, handles):
    """The session orders its runs by the change stamp their commit gave them. A pop that lost
    its race (a failed run), verifying the ledger and forgetting another conversation write or
    check rows around them: none re-stamps a completed run, and the order stays."""
    session = LedgerSession(SESSION, ledger)
    other = LedgerSession(SESSION, handles[0])
    run(session.add_items([said("one")]))
    run(other.add_items([said("two"), said("three")]))
    run(LedgerSession("someone else", ledger).add_items([said("elsewhere")]))
    stamps = {r.id: r.change_seq for r in ledger.runs(SESSION)}

    at_once([lambda s=s: run(s.pop_item()) for s in (session, other)])
    assert ledger.verify() == []
    ledger.forget("someone else")

    assert {r.id: r.change_seq for r in ledger.runs(SESSION) if r.id in stamps} == stamps
    assert run(session.get_items()) == [said("one")]


# --- add_items is one atomic batch ----------------------------------------------------------------

_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON conversation_messages "
        "WHEN new.content = 'poison' BEGIN SELECT RAISE(ABORT, 'poison refused'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$ BEGIN IF NEW.content = 'poison' "
        "THEN RAISE EXCEPTION 'poison refused'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON conversation_messages "
        "FOR EACH ROW EXECUTE FUNCTION refuse_poison()",
    ],
}


def test_a_batch_the_database_refuses_halfway_leaves_the_session_as_it_was(db_url, ledger):
    """The database refuses the batch's last item after its tool step was written: the whole
    batch is absent from the session (either view), the earlier history unchanged; once the
    database takes it, the same batch lands once."""
    session = LedgerSession(SESSION, ledger)
    run(session.add_items([said("before")]))
    batch = [
        said("add 2 and 3"),
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a":2,"b":3}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5"},
        {"role": "assistant", "content": "poison"},
    ]
    engine = sqlalchemy.create_engine(db_url)
    try:
        with engine.begin() as conn:
            for statement in _REFUSE[engine.dialect.name]:
                conn.execute(sqlalchemy.text(statement))
        with pytest.raises(Exception, match="poison refused"):
            run(session.add_items(batch))
        assert run(session.get_items()) == [said("before")]
        everything = LedgerSession(SESSION, ledger, separate_trace=False)
        assert run(everything.get_items()) == [said("before")]

        with engine.begin() as conn:
            conn.execute(
                sqlalchemy.text("DROP TRIGGER refuse_poison ON conversation_messages")
                if engine.dialect.name == "postgresql"
                else sqlalchemy.text("DROP TRIGGER refuse_poison")
            )
        run(session.add_items(batch))
        assert run(everything.get_items()) == [said("before"), *batch]
    finally:
        engine.dispose()

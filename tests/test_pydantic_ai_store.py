"""pydantic-ai's conversation store contract, run against its own ``InMemoryConversationStore``
and against ``LedgerConversationStore`` on SQLite and PostgreSQL: any difference from the
reference is a failing test. pydantic-ai publishes no tests of the store, so the assertions
follow its documented behaviour (the store's docstrings), driven through ``Agent.run`` with
``FunctionModel`` (no network)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import threading
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from pydantic_ai.usage import RequestUsage, RunUsage

from agentledger.errors import LedgerCorruptError
from agentledger.integrations.pydantic_ai import LedgerConversationStore
from agentledger.ledger import Ledger
from support.databases import BACKENDS, fresh_database
from support.ledger import Database

TOOL_STEPS = 2


def _sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """``test`` run to its end on an event loop of its own."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call ``lookup`` until it has answered :data:`TOOL_STEPS` times this turn, then answer."""
    returns = 0
    for message in reversed(messages):
        parts = getattr(message, "parts", [])
        if any(type(part).__name__ == "UserPromptPart" for part in parts):
            break
        returns += sum(isinstance(part, ToolReturnPart) for part in parts)
    usage = RequestUsage(input_tokens=100, output_tokens=10)
    if returns < TOOL_STEPS:
        call = ToolCallPart("lookup", {"key": returns}, tool_call_id=f"call-{len(messages)}")
        looking = TextPart(f"looking up {returns}")
        return ModelResponse(parts=[looking, call], usage=usage, model_name="scripted")
    return ModelResponse(parts=[TextPart(f"answer {len(messages)}")], usage=usage)


def _agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_reply))

    @agent.tool_plain
    def lookup(key: int) -> str:
        return f"value {key}"

    return agent


@pytest.fixture(params=["memory", *BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    """pydantic-ai's reference store, then ours on each backend."""
    if request.param == "memory":
        yield InMemoryConversationStore()
        return
    with (
        fresh_database(request.param, request, tmp_path) as url,
        Ledger.open(url) as ledger,
    ):
        yield LedgerConversationStore(ledger)


@pytest.fixture(params=["memory", "sqlite"])
def either(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    """pydantic-ai's reference store, then ours on SQLite: for the cases whose SQL is the
    same on both backends."""
    if request.param == "memory":
        yield InMemoryConversationStore()
        return
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        yield LedgerConversationStore(ledger)


async def _turn(
    store: ConversationStore, conversation_id: str, prompt: str
) -> list[ConversationEntry]:
    """One agent run in the conversation, saved: the entries the save wrote."""
    conversation = await store.load(conversation_id) or Conversation(
        conversation_id=conversation_id
    )
    result = await _agent().run(prompt, conversation=conversation)
    return await store.save(result)


async def _two_turns(store: ConversationStore) -> list[ConversationEntry]:
    """Two agent runs in conversation ``c1``: the entries they saved."""
    return await _turn(store, "c1", "first") + await _turn(store, "c1", "second")


@_sync
async def test_an_unknown_conversation_loads_as_none(either: ConversationStore) -> None:
    assert await either.load("nobody") is None
    assert await either.load_entries("nobody") is None


@_sync
async def test_turns_read_back_equal_with_their_usage(store: ConversationStore) -> None:
    saved = await _two_turns(store)
    assert [await store.read_entry(entry.id) for entry in saved] == saved
    loaded = await store.load("c1")
    assert loaded is not None
    entries = await store.load_entries("c1")
    assert entries is not None
    assert len(entries) == 2 * (2 + 2 * TOOL_STEPS)
    assert [e.message for e in entries] == loaded.messages
    assert all(b.parent_id == a.id for a, b in itertools.pairwise(entries))
    assert loaded.usage.requests == 2 * (TOOL_STEPS + 1)
    assert loaded.usage.input_tokens == 100 * 2 * (TOOL_STEPS + 1)
    for entry in entries:
        assert await store.read_entry(entry.id) == entry
    assert await store.read_history(entries[3].id, limit=2) == entries[2:4]


@_sync
async def test_a_stale_save_is_refused_and_writes_nothing(store: ConversationStore) -> None:
    await _turn(store, "c1", "first")
    a = await store.load("c1")
    b = await store.load("c1")
    assert a is not None and b is not None
    await store.save(await _agent().run("from a", conversation=a))
    with pytest.raises(ConversationConflict):
        await store.save(await _agent().run("from b", conversation=b))
    entries = await store.load_entries("c1")
    assert entries is not None and len(entries) == 2 * (2 + 2 * TOOL_STEPS)


@_sync
async def test_a_branch_and_a_fork_keep_the_tree(store: ConversationStore) -> None:
    entries = await _two_turns(store)
    assert entries is not None
    record = await store.read_record("c1")
    assert record is not None
    cut = 2 + 2 * TOOL_STEPS
    branched = await store.branch("c1", at=cut, expected_revision=record.revision)
    assert len(branched.messages) == cut
    record = await store.read_record("c1")
    assert record is not None and record.branches == [entries[-1].id]
    assert record.head_id == entries[cut - 1].id

    fork = await store.fork("c1", at=cut, new_conversation_id="f1")
    forked = await store.read_record("f1")
    assert forked is not None
    assert (forked.forked_from, forked.forked_at) == ("c1", entries[cut - 1].id)
    assert fork.messages == [e.message for e in entries[:cut]]
    await _turn(store, "f1", "on the fork")
    fork_entries = await store.load_entries("f1")
    assert fork_entries is not None and fork_entries[:cut] == entries[:cut]
    assert {r.conversation_id for r in await store.list_conversations()} == {"c1", "f1"}


@_sync
async def test_a_deleted_conversation_is_gone_and_can_start_again(
    store: ConversationStore,
) -> None:
    await _turn(store, "c1", "first")
    await store.delete("c1")
    await store.delete("c1")
    assert await store.load("c1") is None
    await _turn(store, "c1", "again")
    entries = await store.load_entries("c1")
    assert entries is not None and len(entries) == 2 + 2 * TOOL_STEPS


@_sync
async def test_a_first_save_over_an_existing_record_is_refused(store: ConversationStore) -> None:
    await _turn(store, "c1", "first")
    with pytest.raises(ConversationConflict):
        await store.save(await _agent().run("new", conversation=Conversation(conversation_id="c1")))


@_sync
async def test_scopes_keep_conversations_apart(store: ConversationStore) -> None:
    result = await _agent().run("hi", conversation=Conversation(conversation_id="c1"))
    await store.save(result, scope="alice")
    assert await store.load("c1", scope="bob") is None
    assert await store.load("c1", scope="alice") is not None
    assert [r.conversation_id for r in await store.list_conversations(scope="alice")] == ["c1"]
    assert await store.list_conversations(scope="bob") == []


def test_a_damaged_entry_or_record_is_an_error_that_names_it(ledger: Ledger, db: Database) -> None:
    store = LedgerConversationStore(ledger)
    asyncio.run(_turn(store, "c1", "first"))
    db.execute("UPDATE stored_records SET scope = 'mallory' WHERE id = 'c1'")

    with pytest.raises(LedgerCorruptError, match="of stored_records does not match"):
        asyncio.run(store.load("c1", scope="mallory"))
    db.execute("UPDATE stored_records SET scope = NULL WHERE id = 'c1'")
    db.execute("UPDATE stored_entries SET kind = 'tampered' WHERE parent_id IS NULL")
    with pytest.raises(LedgerCorruptError, match="of stored_entries does not match"):
        asyncio.run(store.load_entries("c1"))
    assert any("stored_entries" in line for line in ledger.verify())


def test_each_saved_agent_run_is_a_run_with_its_steps_tools_and_usage(ledger: Ledger) -> None:
    store = LedgerConversationStore(ledger)
    asyncio.run(_turn(store, "c1", "first"))
    asyncio.run(_turn(store, "c1", "second"))
    stale = asyncio.run(store.load("c1"))
    asyncio.run(_turn(store, "c1", "third"))
    assert stale is not None
    with pytest.raises(ConversationConflict):
        asyncio.run(store.save(asyncio.run(_agent().run("lost", conversation=stale))))

    runs = ledger.runs("c1")
    assert [r.status for r in runs] == ["completed"] * 3
    assert all(r.input_tokens == 100 * (TOOL_STEPS + 1) for r in runs)
    shown = [m.content for m in ledger.messages("c1")]
    assert shown[::2] == ["first", "second", "third"]
    assert shown[1::2] == [f"answer {n}" for n in (5, 11, 17)]
    steps = ledger.steps(runs[0].id)
    assert len(steps) == TOOL_STEPS + 1
    results = [e.result for s in steps[:-1] for e in s.step.tool_executions]
    assert results == [f"value {n}" for n in range(TOOL_STEPS)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_messages_text_is_stored_once_in_the_row_its_entry_refers_to(
    ledger: Ledger, db: Database
) -> None:
    store = LedgerConversationStore(ledger)
    saved = asyncio.run(_turn(store, "c1", "first"))
    assert [asyncio.run(store.read_entry(entry.id)) for entry in saved] == saved

    entries = db.rows("SELECT message, message_ids FROM stored_entries")
    kept = " ".join(str(entry["message"]) for entry in entries)
    texts = ["first", "looking up 0", "value 0", "value 1", f"answer {len(saved) - 1}"]
    assert [text for text in texts if text in kept] == []
    parts = [part for e in entries for part in json.loads(e["message"])["parts"]]
    assert [part for part in parts if "args" in part or "content" in part] == []
    referred = {i for e in entries for i in json.loads(e["message_ids"] or "[]") if i}
    held = db.column(
        "SELECT content FROM conversation_messages WHERE id IN ({ids}) UNION ALL "
        "SELECT result FROM tool_executions WHERE id IN ({ids}) UNION ALL "
        "SELECT content FROM step_executions WHERE message_id IN ({ids})".format(
            ids=", ".join(f"'{i}'" for i in referred)
        )
    )
    assert set(held) == {*texts, "looking up 1"}


def _race(handles: list[Ledger], saves: list[Conversation]) -> list[BaseException | None]:
    """Each of ``saves`` saved at once through a ledger handle of its own (``handles``, each
    with its own engine): what each save raised."""
    start = threading.Barrier(len(saves))
    outcomes: list[BaseException | None] = [None] * len(saves)

    def save(n: int) -> None:
        store = LedgerConversationStore(handles[n])
        start.wait()
        try:
            asyncio.run(store.save(saves[n]))
        except Exception as error:
            outcomes[n] = error

    threads = [threading.Thread(target=save, args=(n,)) for n in range(len(saves))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


async def _ran(prompt: str, conversation: Conversation) -> Conversation:
    return (await _agent().run(prompt, conversation=conversation)).conversation


def test_of_two_writers_saving_at_once_one_wins_and_nothing_of_the_other_is_written(
    ledger: Ledger, db_url: str
) -> None:
    new = [asyncio.run(_ran(p, Conversation(conversation_id="c1"))) for p in ("a1", "b1")]
    with Ledger.open(db_url) as other:
        first = _race([ledger, other], new)
        store = LedgerConversationStore(ledger)
        a, b = asyncio.run(store.load("c1")), asyncio.run(store.load("c1"))
        assert a is not None and b is not None
        second = _race([ledger, other], [asyncio.run(_ran("a2", a)), asyncio.run(_ran("b2", b))])

    prompts = []
    for outcomes, asked in ((first, ("a1", "b1")), (second, ("a2", "b2"))):
        assert sorted(type(e).__name__ for e in outcomes) == ["ConversationConflict", "NoneType"]
        prompts.append(asked[outcomes.index(None)])
    assert [m.content for m in ledger.messages("c1")][::2] == prompts
    assert [r.status for r in ledger.runs("c1")] == ["completed", "completed"]
    entries = asyncio.run(store.load_entries("c1"))
    assert entries is not None and len(entries) == 2 * (2 + 2 * TOOL_STEPS)
    assert ledger.verify() == []


@_sync
async def test_a_negative_limit_is_refused(either: ConversationStore) -> None:
    await _turn(either, "c1", "first")
    with pytest.raises(UserError, match="must not be negative"):
        await either.list_conversations(limit=-1)
    with pytest.raises(UserError, match="must not be negative"):
        await either.load("c1", limit=-1)


@_sync
async def test_an_unknown_entry_is_a_lookup_error_and_an_unknown_head_a_conflict(
    either: ConversationStore,
) -> None:
    with pytest.raises(LookupError):
        await either.read_entry("nowhere")
    record = ConversationRecord(conversation_id="c1", head_id="nowhere", revision="r1")
    with pytest.raises(ConversationConflict):
        await either.write_record(record, expected_revision=None)
    assert await either.read_record("c1") is None


@_sync
async def test_a_save_with_nothing_new_writes_only_a_new_revision(
    either: ConversationStore,
) -> None:
    await _turn(either, "c1", "first")
    loaded = await either.load("c1")
    assert loaded is not None and loaded.revision is not None
    before = loaded.revision
    assert await either.save(loaded) == []
    record = await either.read_record("c1")
    assert record is not None and record.revision not in (None, before)


@_sync
async def test_a_branch_moves_the_head_to_an_entry_or_back_to_a_branch_tip(
    either: ConversationStore,
) -> None:
    entries = await _two_turns(either)
    record = await either.read_record("c1")
    assert entries is not None and record is not None
    stale, tip = record.revision, entries[-1].id
    await either.branch("c1", from_entry=entries[1].id, expected_revision=stale)
    with pytest.raises(ConversationConflict):
        await either.branch("c1", at=1, expected_revision=stale)
    record = await either.read_record("c1")
    assert record is not None and (record.head_id, record.branches) == (entries[1].id, [tip])
    back = await either.branch("c1", from_entry=tip, expected_revision=record.revision)
    assert back.messages == [entry.message for entry in entries]
    record = await either.read_record("c1")
    assert record is not None and record.head_id == tip
    for wrong in ({"at": 99}, {"from_entry": "nowhere"}, {}, {"at": 1, "from_entry": tip}):
        with pytest.raises(UserError):
            await either.branch("c1", expected_revision=record.revision, **wrong)


@_sync
async def test_a_fork_keeps_usage_only_whole_and_refuses_a_taken_id(
    either: ConversationStore,
) -> None:
    await _two_turns(either)
    source = await either.load("c1")
    assert source is not None
    whole = await either.fork("c1", new_conversation_id="whole")
    part = await either.fork("c1", at=2, new_conversation_id="part")
    assert whole.usage == source.usage and whole.messages == source.messages
    assert part.usage == RunUsage() and part.messages == source.messages[:2]
    with pytest.raises(ConversationConflict):
        await either.fork("c1", new_conversation_id="whole")
    with pytest.raises(UserError):
        await either.fork("c1", source_scope="elsewhere", new_conversation_id="f3")


@_sync
async def test_conversations_are_listed_newest_first_up_to_the_limit(
    store: ConversationStore,
) -> None:
    for conversation_id in ("c1", "c2", "c3"):
        await _turn(store, conversation_id, "hi")
    listed = [r.conversation_id for r in await store.list_conversations()]
    assert listed == ["c3", "c2", "c1"]
    assert [r.conversation_id for r in await store.list_conversations(limit=2)] == ["c3", "c2"]
    assert await store.list_conversations(limit=0) == []


@_sync
async def test_every_field_of_a_record_and_its_entries_reads_back_equal(
    store: ConversationStore,
) -> None:
    call = ToolCallPart("lookup", '{"key": 1}', tool_call_id="call-1")
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart("Be brief."), UserPromptPart("What is 1?")],
            instructions="Answer in English.",
            metadata={"source": "test"},
        ),
        ModelResponse(parts=[ThinkingPart("hm"), call], usage=RequestUsage(input_tokens=3)),
        ModelRequest(parts=[ToolReturnPart("lookup", {"value": 1}, tool_call_id="call-1")]),
        ModelResponse(parts=[TextPart("One"), TextPart(" it is.")], finish_reason="stop"),
    ]
    entries, parent = [], None
    for message in messages:
        entries.append(ConversationEntry(id=f"e{len(entries)}", parent_id=parent, message=message))
        parent = entries[-1].id
    record = ConversationRecord(
        conversation_id="c1",
        head_id=parent,
        usage=RunUsage(input_tokens=3, requests=2, tool_calls=1, details={"reasoning": 2}),
        deferred_tool_requests=DeferredToolRequests(approvals=[call], metadata={"call-1": {}}),
        scope="alice",
        forked_from="c0",
        forked_at="e9",
        branches=["e1", "e2"],
        revision="r1",
        updated_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    )
    await store.write_record(record, new_entries=entries, expected_revision=None)
    assert await store.read_record("c1") == record
    assert [await store.read_entry(entry.id) for entry in entries] == entries
    assert await store.read_history(parent) == entries


def _asks_approval(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call ``delete_file`` (which needs approval) once, then answer."""
    if any(isinstance(part, ToolReturnPart) for m in messages for part in m.parts):
        return ModelResponse(parts=[TextPart("deleted")])
    return ModelResponse(parts=[ToolCallPart("delete_file", {"path": "a"}, tool_call_id="del")])


def _approving_agent() -> Agent[None, str | DeferredToolRequests]:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(_asks_approval), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f"{path} deleted"

    return agent


@_sync
async def test_a_save_that_resumes_deferred_tools_keeps_them_until_resolved(
    either: ConversationStore,
) -> None:
    agent = _approving_agent()
    asked = await agent.run("delete a", conversation=Conversation(conversation_id="c1"))
    assert isinstance(asked.output, DeferredToolRequests)
    await either.save(asked)
    waiting = await either.load("c1")
    assert waiting is not None and waiting.deferred_tool_requests == asked.output

    approved = DeferredToolResults(approvals={"del": True})
    resumed = await agent.run(conversation=waiting, deferred_tool_results=approved)
    assert resumed.output == "deleted"
    await either.save(resumed)
    done = await either.load("c1")
    assert done is not None and done.deferred_tool_requests is None
    assert done.messages == resumed.all_messages()
    if isinstance(either, LedgerConversationStore):
        runs = either.ledger.runs("c1")
        assert [r.status for r in runs] == ["interrupted"]


def test_forgetting_a_forks_source_leaves_the_fork_what_it_wrote(ledger: Ledger) -> None:
    store = LedgerConversationStore(ledger)
    asyncio.run(_turn(store, "c1", "first"))
    assert ledger.conversation("c1").id == "c1"
    asyncio.run(store.fork("c1", new_conversation_id="f1"))
    own = asyncio.run(_turn(store, "f1", "on the fork"))
    stale = asyncio.run(store.load("f1"))
    asyncio.run(store.fork("c1", new_conversation_id="f2"))

    ledger.forget("c1")
    assert asyncio.run(store.load("c1")) is None
    entries = asyncio.run(store.load_entries("f1"))
    assert entries is not None and [e.id for e in entries] == [e.id for e in own]
    assert entries[0].parent_id is None
    assert asyncio.run(store.load_entries("f2")) == []
    assert stale is not None
    with pytest.raises(ConversationConflict):
        asyncio.run(store.save(stale))
    assert ledger.verify() == []

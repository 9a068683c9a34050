"""pydantic-ai's conversation store contract, run against its own ``InMemoryConversationStore``
and against ``LedgerConversationStore`` on SQLite and PostgreSQL: any difference from the
reference is a failing test. pydantic-ai publishes no tests of the store, so the assertions
follow its documented behaviour (the store's docstrings), driven through ``Agent.run`` with
``FunctionModel`` (no network)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

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
        return ModelResponse(parts=[call], usage=usage, model_name="scripted")
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


async def _turn(store: ConversationStore, conversation_id: str, prompt: str) -> None:
    conversation = await store.load(conversation_id) or Conversation(
        conversation_id=conversation_id
    )
    result = await _agent().run(prompt, conversation=conversation)
    await store.save(result)


@_sync
async def test_an_unknown_conversation_loads_as_none(store: ConversationStore) -> None:
    assert await store.load("nobody") is None
    assert await store.load_entries("nobody") is None


@_sync
async def test_turns_read_back_equal_with_their_usage(store: ConversationStore) -> None:
    await _turn(store, "c1", "first")
    await _turn(store, "c1", "second")
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
    await _turn(store, "c1", "first")
    await _turn(store, "c1", "second")
    entries = await store.load_entries("c1")
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


def test_a_conversation_is_the_ledgers_and_forgotten_with_it(ledger: Ledger) -> None:
    store = LedgerConversationStore(ledger)
    asyncio.run(_turn(store, "c1", "first"))
    assert ledger.conversation("c1").id == "c1"
    ledger.forget("c1")
    assert asyncio.run(store.load("c1")) is None


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

"""The context budget: token estimates, their calibration by what a provider reported, and
observation masking within a run (on SQLite and PostgreSQL)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from _ledger_support import Database
from agentledger import AgentBuilder, Message, ToolCall, tool
from agentledger.context import (
    CHARS_PER_TOKEN,
    MASKED_KEY,
    TOKENS_PER_MESSAGE,
    ContextBudget,
    context_tokens,
    estimate_tokens,
    mask_observations,
)
from agentledger.errors import ConfigurationError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from agentledger.messages import Role
from agentledger.usage import Usage

RESULT_CHARS = 2_000
STEPS = 6


@tool
def fetch(page: int) -> str:
    """A long page of text."""
    return f"page {page} " + "x" * RESULT_CHARS


def fetch_call(page: int) -> InferenceResponse:
    return InferenceResponse(
        tool_calls=(ToolCall(id=f"call_{page}", name="fetch", arguments={"page": page}),),
        usage=Usage(input_tokens=0, output_tokens=5),
    )


def script() -> ScriptedLLM:
    return ScriptedLLM(
        [*(fetch_call(page) for page in range(STEPS)), InferenceResponse(content="done")]
    )


# --- estimates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "characters"),
    [
        (Message.user(""), 0),
        (Message.user("abcd"), 4),
        (Message.user("abcde"), 5),
        (
            Message.assistant("ab", tool_calls=[ToolCall(id="c1", name="f", arguments={"a": 1})]),
            2 + 2 + 1 + 8,
        ),
        (Message.tool("result", tool_call_id="c1", name="fetch"), 6 + 5 + 2),
    ],
)
def test_a_message_is_estimated_at_a_token_per_four_characters_plus_its_framing(
    message, characters
):
    assert (
        estimate_tokens([message]) == math.ceil(characters / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE
    )


def test_the_estimate_is_scaled_by_what_the_provider_reported_for_the_last_step():
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=(ToolCall(id="call_0", name="fetch", arguments={"page": 0}),),
                usage=Usage(input_tokens=1_000, output_tokens=5),
            ),
            InferenceResponse(content="done"),
        ]
    )
    state = AgentBuilder().with_llm(llm).with_tools([fetch]).build().run("read page 0").state
    first = state.step_executions[0].step
    ratio = 1_000 / estimate_tokens(first.input_messages)
    messages = state.messages()
    assert context_tokens(state, messages) == math.ceil(estimate_tokens(messages) * ratio)


@pytest.mark.parametrize(
    ("max_tokens", "keep_recent", "words"),
    [(0, 3, "max_tokens > 0"), (-5, 3, "max_tokens > 0"), (100, -1, "0 or more")],
)
def test_a_budget_that_cannot_be_kept_is_refused_with_what_to_give(max_tokens, keep_recent, words):
    with pytest.raises(ConfigurationError, match=words):
        AgentBuilder().with_context_budget(max_tokens, keep_recent=keep_recent)


# --- masking ------------------------------------------------------------------------------------


def assert_every_call_answered_right_after(messages: Any) -> None:
    """Each assistant tool call is followed by one result per call, in order, at once."""
    items = list(messages)
    for index, message in enumerate(items):
        if message.role is Role.ASSISTANT and message.tool_calls:
            results = items[index + 1 : index + 1 + len(message.tool_calls)]
            assert [r.tool_call_id for r in results] == [c.id for c in message.tool_calls]


def test_masking_replaces_the_oldest_results_until_the_context_fits_and_keeps_the_recent_raw():
    budget = ContextBudget(1_200, keep_recent=2)
    state = AgentBuilder().with_llm(script()).with_tools([fetch]).build().run("read").state
    # The run's trace, as the buffer held it before the answer: rebuild it from the steps.
    buffer = [m for e in state.step_executions for m in e.step.trace_messages]
    section = state.store.section(state.EXECUTION_BUFFER_SECTION)
    during = state.with_message_store(section.set_messages(buffer))

    masking = mask_observations(during, budget)

    results = [m for m in masking.messages if m.role is Role.TOOL]
    assert len(results) == STEPS
    assert all(MASKED_KEY not in m.metadata for m in results[-2:])
    masked = [m for m in results if MASKED_KEY in m.metadata]
    assert masking.masked == len(masked) > 0
    assert masked == results[: len(masked)]  # oldest first
    for original, kept in zip(buffer, masking.messages, strict=True):
        assert (kept.id, kept.tool_call_id, kept.role) == (
            original.id,
            original.tool_call_id,
            original.role,
        )
    for m in masked:
        characters = len("page 0 ") + RESULT_CHARS
        assert m.metadata[MASKED_KEY] == {"characters": characters, "tool_call_id": m.tool_call_id}
        assert "tool_executions" in m.content and m.tool_call_id in m.content
    assert masking.tokens_after < masking.tokens_before
    assert_every_call_answered_right_after(masking.messages)


def test_masking_stops_at_the_recent_results_even_when_the_budget_is_not_met():
    budget = ContextBudget(10, keep_recent=3)
    state = AgentBuilder().with_llm(script()).with_tools([fetch]).build().run("read").state
    buffer = [m for e in state.step_executions for m in e.step.trace_messages]
    during = state.with_message_store(
        state.store.section(state.EXECUTION_BUFFER_SECTION).set_messages(buffer)
    )
    masking = mask_observations(during, budget)
    assert masking.masked == STEPS - 3
    assert masking.tokens_after > budget.max_tokens


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.close()


def test_a_run_over_its_budget_sends_old_results_masked_and_records_them_whole(db, db_url):
    llm = script()
    with Ledger.open(db_url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(llm)
            .with_tools([fetch])
            .with_context_budget(1_500, keep_recent=2)
            .with_ledger(ledger)
            .build()
        )
        result = agent.run("read the pages")

    assert result.answer == "done"
    last = llm.requests[-1].messages
    results = [m for m in last if m.role is Role.TOOL]
    assert len(results) == STEPS
    assert any(MASKED_KEY in m.metadata for m in results)
    assert all(MASKED_KEY not in m.metadata for m in results[-2:])
    assert all(len(m.content) > RESULT_CHARS for m in results[-2:])
    for request in llm.requests:
        assert_every_call_answered_right_after(request.messages)
        maskable = [m for m in request.messages if m.role is Role.TOOL][:-2]
        fits = estimate_tokens(request.messages) <= 1_500
        assert fits or all(MASKED_KEY in m.metadata for m in maskable)
    # The ledger keeps every result whole, and the conversation as the user saw it.
    stored = db.column("SELECT result FROM tool_executions ORDER BY step_index")
    assert stored == [f"page {page} " + "x" * RESULT_CHARS for page in range(STEPS)]
    assert db.column("SELECT content FROM conversation_messages ORDER BY seq") == [
        "read the pages",
        "done",
    ]

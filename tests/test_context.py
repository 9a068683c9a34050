"""The context budget: token estimates, their calibration by what a provider reported, and
observation masking within a run (on SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger import AgentBuilder, Message, ToolCall, tool
from agentledger._core import (
    CHARS_PER_TOKEN,
    MASKED_KEY,
    TOKENS_PER_MESSAGE,
    ContextBudget,
    context_tokens,
    estimate_tokens,
    mask_observations,
)
from agentledger._values import Role, Usage, new_id
from agentledger.errors import (
    CompactionError,
    ConfigurationError,
    ConversationBusyError,
    ProviderServerError,
    UsageError,
)
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.ledger import Database

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


def test_each_masking_is_recorded_with_its_token_delta_in_the_runs_step(db, db_url):
    with Ledger.open(db_url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(script())
            .with_tools([fetch])
            .with_context_budget(1_500, keep_recent=2)
            .with_ledger(ledger)
            .build()
        )
        result = agent.run("read the pages")
        recorded = ledger.compactions(result.conversation_id)

    rows = db.rows(
        "SELECT run_id, step_index, kind, status, messages, tokens_before, tokens_after "
        "FROM context_compactions ORDER BY step_index"
    )
    assert rows, "the run went over its budget, so it masked"
    assert all(r["run_id"] == result.run_id and r["kind"] == "masking" for r in rows)
    assert all(r["status"] == "completed" and r["messages"] >= 1 for r in rows)
    assert all(r["tokens_after"] < r["tokens_before"] for r in rows)
    # As many results masked in all as the last request shows masked.
    last = script_requests_masked(result)
    assert sum(r["messages"] for r in rows) == last
    assert [(c.step_index, c.tokens_saved) for c in recorded] == [
        (r["step_index"], r["tokens_before"] - r["tokens_after"]) for r in rows
    ]


def script_requests_masked(result: Any) -> int:
    """How many tool results the run's last step was sent masked."""
    (last,) = [e for e in result.state.step_executions][-1:]
    return sum(1 for m in last.step.input_messages if MASKED_KEY in m.metadata)


# --- summaries between runs ---------------------------------------------------------------------

TURN_CHARS = 400


def turn(n: int) -> str:
    return f"question {n}: " + "q" * TURN_CHARS


def answer_of(request: Any) -> InferenceResponse:
    return InferenceResponse(content="answer: " + "a" * TURN_CHARS)


def summary_of(request: Any) -> InferenceResponse:
    return InferenceResponse(
        content="the user asked questions and got answers",
        usage=Usage(input_tokens=estimate_tokens(request.messages), output_tokens=9),
        cost_usd=0.0005,
        model="summary-model",
    )


class Failing:
    """A summarizer whose provider fails."""

    def complete(self, request: Any) -> InferenceResponse:
        raise ProviderServerError("the provider answered 503", provider="Test", status_code=503)


def summarizing_agent(ledger: Any, llm: Any, summarizer: Any, **budget: Any) -> Any:
    settings = {"keep_recent": 2, **budget}
    return (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([fetch])
        .with_system_prompt("You answer questions.")
        .with_context_budget(1_000, summarizer=summarizer, **settings)
        .with_ledger(ledger)
        .build()
    )


TURNS = 12


def test_a_long_conversation_stays_within_its_budget_and_the_user_history_never_changes(db, db_url):
    llm, summarizer = ScriptedLLM([answer_of] * TURNS), ScriptedLLM([summary_of] * TURNS)
    histories: list[list[str]] = []
    with Ledger.open(db_url) as ledger:
        agent = summarizing_agent(ledger, llm, summarizer)
        conversation = None
        for n in range(TURNS):
            result = agent.run(turn(n), conversation)
            conversation = result.conversation_id
            histories.append([m.content for m in ledger.history(conversation)])
        compactions = ledger.compactions(conversation)
        context = ledger.model_context(conversation)

    # Every request the model got fits the budget.
    assert len(llm.requests) == TURNS
    assert all(estimate_tokens(r.messages) <= 1_000 for r in llm.requests)
    summaries = [c for c in compactions if c.kind == "summary"]
    assert len(summaries) >= 2 and all(c.status == "completed" for c in summaries)
    assert len(summarizer.requests) == len(summaries)
    # The conversation as the user saw it only ever grew: each history extends the one before.
    for before, after in itertools.pairwise(histories):
        assert after[: len(before)] == before
    expected = [text for n in range(TURNS) for text in (turn(n), "answer: " + "a" * TURN_CHARS)]
    assert histories[-1] == expected
    # The model sees the newest summary (a system message) first, then the recent messages.
    assert context[0].role is Role.SYSTEM and "the user asked questions" in context[0].content
    assert [m.content for m in context[1:]] == expected[-len(context) + 1 :]
    # In SQL: every message out of the context points at a summary, the newest summary is the
    # only one in it, and out-of-context rows all come before the context.
    out = db.rows(
        "SELECT seq, section, summary_id FROM conversation_messages "
        "WHERE NOT in_context ORDER BY seq"
    )
    summary_ids = set(db.column("SELECT id FROM conversation_messages WHERE section = 'summary'"))
    assert out and all(r["summary_id"] in summary_ids for r in out)
    assert {r["section"] for r in out} == {"buffer", "summary"}
    first_in = db.scalar("SELECT MIN(seq) FROM conversation_messages WHERE in_context")
    assert max(r["seq"] for r in out) < first_in
    assert db.column(
        "SELECT id FROM conversation_messages WHERE section = 'summary' AND in_context"
    ) == [summaries[-1].summary_id]
    # Each summary's token delta, and what its model call spent, are recorded.
    row = db.row(
        "SELECT tokens_before, tokens_after, model, input_tokens, output_tokens, cost_usd, "
        "first_seq, last_seq FROM context_compactions WHERE id = :id",
        id=summaries[-1].id,
    )
    assert row["tokens_before"] > row["tokens_after"]
    assert (row["model"], row["output_tokens"], row["cost_usd"]) == ("summary-model", 9, 0.0005)
    assert row["input_tokens"] > 0 and row["first_seq"] <= row["last_seq"]
    replaced = db.column(
        "SELECT seq FROM conversation_messages WHERE summary_id = :id AND section = 'buffer'",
        id=summaries[-1].summary_id,
    )
    assert (min(replaced), max(replaced)) == (row["first_seq"], row["last_seq"])
    with Ledger.open(db_url, migrate=False) as ledger:
        assert ledger.verify() == []


def test_the_summarizer_reads_the_summary_before_and_the_messages_it_replaces(db_url):
    summarizer = ScriptedLLM([summary_of] * 2)
    with Ledger.open(db_url) as ledger:
        agent = summarizing_agent(ledger, ScriptedLLM([answer_of] * 3), summarizer)
        first = agent.run(turn(0))
        agent.run(turn(1), first.conversation_id)
        agent.compact(first.conversation_id, force=True)
        assert agent.compact(first.conversation_id, force=True) is None  # only the recent left
        agent.run(turn(2), first.conversation_id)
        agent.compact(first.conversation_id, force=True)
    first_prompt = summarizer.requests[0].messages[-1].content
    assert turn(0) in first_prompt
    second_prompt = summarizer.requests[1].messages[-1].content
    assert "earlier summary: Summary of the earlier conversation" in second_prompt
    assert all(r.settings.max_output_tokens == 1_000 // 8 for r in summarizer.requests)


@pytest.mark.parametrize("summarizer", ["raises", "empty"])
def test_a_failed_summary_leaves_the_conversation_exactly_as_it_was(db, db_url, summarizer):
    model = (
        Failing() if summarizer == "raises" else ScriptedLLM([InferenceResponse(content=" ")] * 2)
    )
    with Ledger.open(db_url) as ledger:
        writer = summarizing_agent(ledger, ScriptedLLM([answer_of] * 3), None, summarize=False)
        conversation = writer.run(turn(0)).conversation_id
        writer.run(turn(1), conversation)
        snapshot = db.rows("SELECT * FROM conversation_messages ORDER BY seq")
        version = db.scalar("SELECT version FROM conversations")
        agent = summarizing_agent(ledger, ScriptedLLM([answer_of]), model)

        with pytest.raises(CompactionError, match="the conversation is unchanged"):
            agent.compact(conversation, force=True)
        assert db.rows("SELECT * FROM conversation_messages ORDER BY seq") == snapshot
        assert db.scalar("SELECT version FROM conversations") == version

        # Before a run, the failure is logged and recorded and the run goes on unsummarized.
        result = agent.run(turn(2), conversation)
        assert result.status == "completed"
        assert db.rows("SELECT * FROM conversation_messages ORDER BY seq")[:4] == snapshot
        assert db.scalar("SELECT COUNT(*) FROM conversation_messages WHERE NOT in_context") == 0
    failures = db.rows(
        "SELECT kind, status, error, tokens_before, tokens_after FROM context_compactions"
    )
    assert len(failures) == 2
    assert all(f["kind"] == "summary" and f["status"] == "failed" for f in failures)
    assert all(f["tokens_before"] == f["tokens_after"] for f in failures)
    reason = "the provider answered 503" if summarizer == "raises" else "empty summary"
    assert all(reason in f["error"] for f in failures)


def test_a_conversation_is_not_compacted_while_a_run_holds_it(db, db_url):
    with Ledger.open(db_url) as ledger:
        agent = summarizing_agent(ledger, ScriptedLLM([answer_of] * 2), ScriptedLLM([summary_of]))
        first = agent.run(turn(0))
        agent.run(turn(1), first.conversation_id)
        snapshot = db.rows("SELECT * FROM conversation_messages ORDER BY seq")
        state = ledger.recorder.load_conversation(first.conversation_id)
        running = state.model_copy(update={"run_id": new_id(), "status": "running"})
        ledger.recorder.begin_run(running, user_message=None, agent_name="other")

        with pytest.raises(ConversationBusyError, match="a run is in progress"):
            agent.compact(first.conversation_id, force=True)
    assert db.rows("SELECT * FROM conversation_messages ORDER BY seq") == snapshot
    assert db.scalar("SELECT COUNT(*) FROM context_compactions") == 0


def test_another_handle_sees_the_summary_at_its_next_load(db_url):
    with Ledger.open(db_url) as reader, Ledger.open(db_url) as writer:
        agent = summarizing_agent(writer, ScriptedLLM([answer_of] * 2), ScriptedLLM([summary_of]))
        first = agent.run(turn(0))
        agent.run(turn(1), first.conversation_id)
        before = reader.recorder.load_conversation(first.conversation_id).messages_for_inference()
        compaction = agent.compact(first.conversation_id, force=True)
        after = reader.recorder.load_conversation(first.conversation_id).messages_for_inference()
    assert len(before) == 4
    assert compaction is not None
    assert [m.id for m in after] == [compaction.summary_id, *(m.id for m in before[2:])]


def test_the_in_memory_recorder_compacts_by_the_same_rules():
    summarizer = ScriptedLLM([summary_of])
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([answer_of] * 2))
        .with_context_budget(1_000, keep_recent=2, summarizer=summarizer)
        .build()
    )
    first = agent.run(turn(0))
    agent.run(turn(1), first.conversation_id)
    compaction = agent.compact(first.conversation_id, force=True)
    state = agent.recorder.load_conversation(first.conversation_id)
    assert compaction is not None and compaction.messages == 2
    assert [m.id for m in state.store.section("summary").messages()] == [compaction.summary_id]
    assert [m.content for m in state.messages()] == [turn(1), "answer: " + "a" * TURN_CHARS]
    assert agent.recorder.compactions(first.conversation_id) == [compaction]


def test_compact_without_a_summarizer_says_how_to_get_one():
    agent = AgentBuilder().with_llm(ScriptedLLM([])).build()
    with pytest.raises(UsageError, match="with_context_budget"):
        agent.compact("any")


# --- carry-over ---------------------------------------------------------------------------------


def two_fetches() -> ScriptedLLM:
    return ScriptedLLM([fetch_call(0), fetch_call(1), InferenceResponse(content="done")])


@pytest.mark.parametrize("policy", ["separated", "inline", "masked"])
def test_what_a_finished_run_leaves_for_later_runs_follows_the_carry_over_policy(
    db, db_url, policy
):
    with Ledger.open(db_url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(two_fetches())
            .with_tools([fetch])
            .with_carry_over(policy)
            .with_ledger(ledger)
            .build()
        )
        result = agent.run("read two pages")
        conversation = list(ledger.messages(result.conversation_id))

    roles = [m.role.value for m in conversation]
    contents = db.column("SELECT content FROM conversation_messages ORDER BY seq")
    if policy == "separated":
        assert roles == ["user", "assistant"]
    else:
        assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert_every_call_answered_right_after(conversation)
        results = [m for m in conversation if m.role is Role.TOOL]
        if policy == "inline":
            assert [m.content for m in results] == [
                f"page {p} " + "x" * RESULT_CHARS for p in range(2)
            ]
        else:
            assert all(MASKED_KEY in m.metadata for m in results)
            assert all("tool_executions" in m.content for m in results)
            assert all(len(c) < 300 for c in contents)
    assert contents[-1] == "done"
    # The full results are in the trace whatever the policy.
    assert db.column("SELECT result FROM tool_executions ORDER BY step_index") == [
        f"page {p} " + "x" * RESULT_CHARS for p in range(2)
    ]


def test_an_unknown_carry_over_policy_is_refused_with_the_choices():
    with pytest.raises(ConfigurationError, match="'separated', 'inline', 'masked'"):
        AgentBuilder().with_carry_over("summarized")

"""What the ledger gives back: each fact of a step held once (in memory and read back), and
conversations and runs as the typed rows of their tables, with enums for their enum columns."""

from __future__ import annotations

import pytest

from agentledger import (
    AgentBuilder,
    AgentStatus,
    InferenceResponse,
    Ledger,
    ScriptedLLM,
    StopReason,
    ToolCall,
    Usage,
    UsageError,
    tool,
)
from agentledger.ledger import AgentRun, Conversation, ConversationKind


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


def weather_run(ledger: Ledger):
    calls = [
        ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="c2", name="get_weather", arguments={"city": "Oslo"}),
    ]
    llm = ScriptedLLM(
        [
            InferenceResponse(
                content="Looking.",
                tool_calls=calls,
                reasoning="Two cities.",
                usage=Usage(input_tokens=100, output_tokens=10),
                cost_usd=0.001,
                finish_reason="tool_calls",
            ),
            InferenceResponse(content="Sunny in both.", usage=Usage(input_tokens=150)),
        ],
        model="m-1",
    )
    agent = AgentBuilder().with_llm(llm).with_tools([get_weather]).with_ledger(ledger).build()
    return agent.run("Weather in Paris and Oslo?")


def test_a_step_holds_its_tool_calls_once_in_memory_and_read_back(db_url):
    with Ledger.open(db_url) as ledger:
        result = weather_run(ledger)
        live = result.state.step_executions[0].step
        (read,) = [e.step for e in ledger.steps(result.run_id)][:1]

    for step in (live, read):
        assert step.assistant_message is not None
        calls = step.assistant_message.tool_calls
        assert [c.id for c in calls] == ["c1", "c2"]
        # The call in the message and the call its execution answers are one object.
        assert all(c is e.tool_call for c, e in zip(calls, step.tool_executions, strict=True))
        assert (step.usage, step.cost_usd, step.model, step.finish_reason) == (
            Usage(input_tokens=100, output_tokens=10),
            0.001,
            "m-1",
            "tool_calls",
        )
    assert read.trace_messages == live.trace_messages
    assert read.response_messages == live.response_messages


def test_conversations_and_runs_are_the_rows_of_their_tables_with_enums(db_url):
    with Ledger.open(db_url) as ledger:
        result = weather_run(ledger)
        run = ledger.run(result.run_id)
        conversation = ledger.conversation(result.conversation_id)
        listed = ledger.runs(result.conversation_id)
        conversations = ledger.conversations()

    assert isinstance(run, AgentRun) and isinstance(conversation, Conversation)
    assert run.status is AgentStatus.COMPLETED and run.stop_reason is StopReason.COMPLETED
    assert conversation.kind is ConversationKind.MAIN
    assert [r.id for r in listed] == [run.id] and [c.id for c in conversations] == [conversation.id]
    assert run.usage == result.usage and run.cost_usd == result.cost_usd
    assert run.duration_ms is not None and run.duration_ms >= 0
    assert (run.conversation_id, run.root_run_id, run.step_count) == (
        conversation.id,
        run.id,
        2,
    )


def test_a_row_returned_is_detached_changing_it_changes_nothing_stored(db_url):
    with Ledger.open(db_url) as ledger:
        result = weather_run(ledger)
        run = ledger.run(result.run_id)
        run.status = AgentStatus.FAILED
        run.agent_name = "someone else"
        again = ledger.run(result.run_id)
        assert (again.status, again.agent_name) == (AgentStatus.COMPLETED, "agent")
        assert ledger.verify() == []


def test_runs_filter_by_a_status_given_as_an_enum_or_its_text(db_url):
    with Ledger.open(db_url) as ledger:
        result = weather_run(ledger)
        for status in (AgentStatus.COMPLETED, "completed"):
            assert [r.id for r in ledger.runs(status=status)] == [result.run_id]
        assert ledger.runs(status="failed") == []
        with pytest.raises(UsageError, match="status='finished' is not one of 'ready', 'running'"):
            ledger.runs(status="finished")


def test_a_ledger_hands_out_its_recorder_and_the_builder_takes_either(db_url):
    with Ledger.open(db_url) as ledger:
        llm = ScriptedLLM([InferenceResponse(content="Hi.")] * 2)
        via_ledger = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
        via_recorder = AgentBuilder().with_llm(llm).with_ledger(ledger.recorder).build()
        assert via_ledger.recorder is via_recorder.recorder is ledger.recorder
        first = via_ledger.run("Hello?")
        second = via_recorder.run("Again?", first.conversation_id)
        assert [m.content for m in ledger.messages(first.conversation_id)] == [
            "Hello?",
            "Hi.",
            "Again?",
            "Hi.",
        ]
        assert second.status is AgentStatus.COMPLETED

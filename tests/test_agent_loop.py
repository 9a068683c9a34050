"""The agent loop end to end: what reaches the conversation, the buffer and the model."""

from __future__ import annotations

import itertools

import pytest

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    InMemoryRecorder,
    Message,
    Messages,
    ReActDriver,
    Role,
    StopReason,
    ToolCall,
    Usage,
)
from agentledger._values import StepType
from agentledger.errors import ConfigurationError, UnstorableTextError
from agentledger.llm import InferenceResponse, ScriptedLLM


def calls(*tool_calls: ToolCall, content: str = "", **fields: object) -> InferenceResponse:
    return InferenceResponse(content=content, tool_calls=tool_calls, **fields)


def answer(text: str, **fields: object) -> InferenceResponse:
    return InferenceResponse(content=text, **fields)


def weather_call(call_id: str, city: str = "Paris") -> ToolCall:
    return ToolCall(id=call_id, name="get_weather", arguments={"city": city})


def question(text: str = "What is the weather in Paris?") -> AgentState:
    return AgentState.empty().with_messages(Messages.from_string(text))


def roles(messages: Messages) -> list[Role]:
    return [m.role for m in messages]


def is_trace(message: Message) -> bool:
    return message.role is Role.TOOL or bool(message.tool_calls)


# --- one tool call --------------------------------------------------------------------------


def test_one_tool_call_leaves_only_the_question_and_the_answer_in_the_conversation(weather_tool):
    llm = ScriptedLLM([calls(weather_call("c1")), answer("Sunny, 22C.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    state = agent.execute(question())

    assert roles(state.messages()) == [Role.USER, Role.ASSISTANT]
    assert state.messages()[1].content == "Sunny, 22C."
    assert state.messages()[1].tool_calls == ()
    assert state.answer() == "Sunny, 22C."
    assert state.execution_buffer().is_empty()
    assert len(state.step_executions) == 2
    assert [e.step_index for e in state.step_executions] == [0, 1]
    assert state.status is AgentStatus.COMPLETED


def test_the_model_sees_its_tool_call_followed_by_the_matching_tool_result(weather_tool):
    llm = ScriptedLLM([calls(weather_call("c1")), answer("Sunny, 22C.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    agent.execute(question())

    seen = llm.requests[1].messages
    assert roles(seen) == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert seen[0].content == "What is the weather in Paris?"
    assert seen[1].tool_calls == (weather_call("c1"),)
    assert seen[2].tool_call_id == "c1"
    assert seen[2].content == "22C and sunny in Paris"


def test_the_first_request_offers_the_tool_schema_built_from_the_function(weather_tool):
    llm = ScriptedLLM([answer("Hello.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    agent.execute(question())

    (schema,) = llm.requests[0].tools
    assert schema.name == "get_weather"
    assert schema.description == "Current weather for a city."
    assert schema.parameters["type"] == "object"
    assert schema.parameters["properties"]["city"]["type"] == "string"
    assert schema.parameters["required"] == ["city"]


def test_the_tool_trace_of_a_run_stays_on_its_steps(weather_tool):
    llm = ScriptedLLM([calls(weather_call("c1")), answer("Sunny.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    state = agent.execute(question())

    first, second = (e.step for e in state.step_executions)
    assert first.step_type is StepType.TOOL_USE
    assert second.step_type is StepType.RESPONSE
    assert roles(first.trace_messages) == [Role.ASSISTANT, Role.TOOL]
    assert first.response_messages.is_empty()
    (execution,) = first.tool_executions
    assert execution.tool_call_id == "c1"
    assert execution.tool_name == "get_weather"
    assert execution.arguments == {"city": "Paris"}
    assert execution.result == "22C and sunny in Paris"
    assert not execution.is_error
    assert second.trace_messages.is_empty()
    assert [m.content for m in second.response_messages] == ["Sunny."]


# --- several tool calls ---------------------------------------------------------------------


def test_several_tool_calls_in_one_step_are_answered_in_call_order(weather_tool):
    cities = ["Paris", "Oslo", "Lima"]
    llm = ScriptedLLM(
        [calls(*(weather_call(f"c{i}", c) for i, c in enumerate(cities))), answer("Done.")]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    state = agent.execute(question())

    seen = llm.requests[1].messages
    assert roles(seen) == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.TOOL]
    assert [m.tool_call_id for m in seen[2:]] == ["c0", "c1", "c2"]
    assert [m.content for m in seen[2:]] == [f"22C and sunny in {c}" for c in cities]
    assert roles(state.messages()) == [Role.USER, Role.ASSISTANT]
    assert state.answer() == "Done."


def test_tool_calls_over_several_steps_each_follow_the_message_that_made_them(weather_tool):
    llm = ScriptedLLM(
        [
            calls(weather_call("a", "Paris")),
            calls(weather_call("b", "Oslo"), weather_call("c", "Rome")),
            calls(weather_call("d", "Lima")),
            answer("All sunny."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    state = agent.execute(question())

    seen = llm.requests[3].messages
    assert roles(seen) == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
    ]
    assert [m.tool_call_id for m in seen if m.role is Role.TOOL] == ["a", "b", "c", "d"]
    assert [[c.id for c in m.tool_calls] for m in seen if m.role is Role.ASSISTANT] == [
        ["a"],
        ["b", "c"],
        ["d"],
    ]
    for earlier, later in itertools.pairwise(llm.requests):
        assert list(later.messages)[: len(earlier.messages)] == list(earlier.messages)
    assert [m.content for m in state.messages()] == ["What is the weather in Paris?", "All sunny."]
    assert state.step_count == 4
    assert state.execution_buffer().is_empty()


# --- no tool calls --------------------------------------------------------------------------


def test_an_answer_without_tool_calls_completes_the_run_in_one_step(weather_tool):
    llm = ScriptedLLM([answer("Hello!")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    state = agent.execute(question("Hi"))

    assert [(m.role, m.content) for m in state.messages()] == [
        (Role.USER, "Hi"),
        (Role.ASSISTANT, "Hello!"),
    ]
    assert state.step_count == 1
    assert state.step_executions[0].step.step_type is StepType.RESPONSE
    outcome = state.continuation_outcome
    assert outcome is not None
    assert outcome.should_continue is False
    assert outcome.stop_reason is StopReason.COMPLETED
    assert state.stop_reason is StopReason.COMPLETED
    assert state.status is AgentStatus.COMPLETED
    assert state.execution_buffer().is_empty()


# --- inline mode ----------------------------------------------------------------------------


def test_inline_mode_appends_every_step_output_to_the_conversation(weather_tool):
    llm = ScriptedLLM(
        [
            calls(weather_call("a", "Paris")),
            calls(weather_call("b", "Oslo"), weather_call("c", "Rome")),
            answer("All sunny."),
        ]
    )
    agent = (
        AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_separated_tool_trace(False)
    ).build()

    state = agent.execute(question())

    conversation = state.messages()
    assert roles(conversation) == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert [m.tool_call_id for m in conversation if m.role is Role.TOOL] == ["a", "b", "c"]
    assert conversation[-1].content == "All sunny."
    expected = [conversation[0]]
    for execution in state.step_executions:
        expected.extend(execution.step.output_messages())
    assert list(conversation) == expected
    assert state.execution_buffer().is_empty()
    assert state.status is AgentStatus.COMPLETED


def test_inline_mode_lets_the_next_run_see_the_tool_results_of_the_previous_one(weather_tool):
    llm = ScriptedLLM([calls(weather_call("a")), answer("Sunny."), answer("Still sunny.")])
    agent = (
        AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_separated_tool_trace(False)
    ).build()

    state = agent.execute(question())
    state = agent.execute(state.with_user_message("And now?"))

    assert roles(llm.requests[2].messages) == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert state.answer() == "Still sunny."


# --- a second run on the same state ---------------------------------------------------------


def test_a_second_run_starts_afresh_and_keeps_the_conversation(weather_tool):
    llm = ScriptedLLM(
        [
            calls(weather_call("a", "Paris")),
            answer("Sunny in Paris."),
            calls(weather_call("b", "Oslo")),
            answer("Cold in Oslo."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    first = agent.execute(question())
    second = agent.execute(first.with_user_message("And in Oslo?"))

    assert second.run_id is not None
    assert second.run_id != first.run_id
    assert second.conversation_id == first.conversation_id
    assert second.step_count == 2
    assert [e.step_index for e in second.step_executions] == [0, 1]
    assert {e.step.id for e in second.step_executions}.isdisjoint(
        e.step.id for e in first.step_executions
    )
    assert [e.step.tool_executions[0].tool_call_id for e in second.step_executions[:1]] == ["b"]
    opening = llm.requests[2].messages
    assert [(m.role, m.content) for m in opening] == [
        (Role.USER, "What is the weather in Paris?"),
        (Role.ASSISTANT, "Sunny in Paris."),
        (Role.USER, "And in Oslo?"),
    ]
    assert not any(is_trace(m) for m in opening)
    assert [(m.role, m.content) for m in second.messages()] == [
        (Role.USER, "What is the weather in Paris?"),
        (Role.ASSISTANT, "Sunny in Paris."),
        (Role.USER, "And in Oslo?"),
        (Role.ASSISTANT, "Cold in Oslo."),
    ]
    assert second.execution_buffer().is_empty()
    assert second.usage == Usage()


def test_a_second_run_counts_only_its_own_usage():
    llm = ScriptedLLM(
        [
            answer("One.", usage=Usage(input_tokens=10, output_tokens=1)),
            answer("Two.", usage=Usage(input_tokens=20, output_tokens=2)),
        ]
    )
    agent = AgentBuilder().with_llm(llm).build()

    first = agent.execute(question("1?"))
    second = agent.execute(first.with_user_message("2?"))

    assert first.usage == Usage(input_tokens=10, output_tokens=1)
    assert second.usage == Usage(input_tokens=20, output_tokens=2)


# --- iterate --------------------------------------------------------------------------------


def test_iterate_yields_the_state_after_every_step(weather_tool):
    llm = ScriptedLLM(
        [calls(weather_call("a")), calls(weather_call("b")), answer("Sunny everywhere.")]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    states = list(agent.iterate(question()))

    assert len(states) == 3
    assert [s.step_count for s in states] == [1, 2, 3]
    assert len({s.run_id for s in states}) == 1
    assert [s.continuation_outcome.should_continue for s in states] == [True, True, False]
    assert [s.status for s in states] == [
        AgentStatus.RUNNING,
        AgentStatus.RUNNING,
        AgentStatus.COMPLETED,
    ]
    assert states[-1].answer() == "Sunny everywhere."
    for before, after in itertools.pairwise(states):
        assert after.step_executions[:-1] == before.step_executions
        assert after.step_executions[-1].step_index == before.step_count


def test_iterate_shows_the_tool_trace_in_the_buffer_while_the_run_lasts(weather_tool):
    llm = ScriptedLLM([calls(weather_call("a")), answer("Sunny.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build()

    during, after = agent.iterate(question())

    assert roles(during.execution_buffer()) == [Role.ASSISTANT, Role.TOOL]
    assert roles(during.messages()) == [Role.USER]
    assert after.execution_buffer().is_empty()
    assert roles(after.messages()) == [Role.USER, Role.ASSISTANT]


# --- reasoning ------------------------------------------------------------------------------


@pytest.mark.parametrize("separated", [True, False], ids=["separated", "inline"])
def test_reasoning_never_reaches_the_conversation_but_stays_on_the_step(separated, weather_tool):
    llm = ScriptedLLM(
        [
            calls(weather_call("a"), reasoning="I should look it up."),
            answer("Sunny.", reasoning="The tool said sunny."),
        ]
    )
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_separated_tool_trace(separated)
        .build()
    )

    state = agent.execute(question())

    final = state.messages()[-1]
    assert final.content == "Sunny."
    assert final.reasoning is None
    assert all(m.reasoning is None for m in state.messages() if not m.tool_calls)
    last_step = state.step_executions[-1].step
    assert last_step.assistant_message is not None
    assert last_step.assistant_message.reasoning == "The tool said sunny."
    assert state.step_executions[0].step.assistant_message.reasoning == "I should look it up."
    assert "The tool said sunny." not in state.messages().to_string()


# --- system prompt --------------------------------------------------------------------------


def test_the_system_prompt_opens_every_request_and_is_not_stored(weather_tool):
    llm = ScriptedLLM([calls(weather_call("a")), answer("Sunny."), answer("Bye.")])
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_system_prompt("You are a weather bot.")
        .build()
    )

    state = agent.execute(question())
    state = agent.execute(state.with_user_message("Thanks"))

    assert len(llm.requests) == 3
    for request in llm.requests:
        assert request.messages[0].role is Role.SYSTEM
        assert request.messages[0].content == "You are a weather bot."
        assert request.system_prompt() == "You are a weather bot."
        assert [m.role for m in request.messages].count(Role.SYSTEM) == 1
    assert all(m.role is not Role.SYSTEM for m in state.messages_for_inference())
    for section in state.store.names():
        assert all(m.role is not Role.SYSTEM for m in state.store.section(section).messages())


# --- configuration --------------------------------------------------------------------------


def test_building_without_a_model_says_to_call_with_llm():
    with pytest.raises(ConfigurationError, match="with_llm"):
        AgentBuilder().build()


def test_with_parallel_tools_refuses_less_than_one():
    with pytest.raises(ConfigurationError):
        AgentBuilder().with_parallel_tools(0)


def test_a_builder_is_a_value_that_can_be_specialised(weather_tool):
    base = AgentBuilder().with_tools([weather_tool])
    llm_a = ScriptedLLM([answer("A")])
    llm_b = ScriptedLLM([answer("B")])

    agent_a = base.with_llm(llm_a).build()
    agent_b = base.with_llm(llm_b).with_system_prompt("Be brief.").build()

    assert agent_a.execute(question()).answer() == "A"
    assert agent_b.execute(question()).answer() == "B"
    assert llm_a.requests[0].messages[0].role is Role.USER
    assert llm_b.requests[0].messages[0].role is Role.SYSTEM
    with pytest.raises(ConfigurationError):
        base.build()


def test_the_model_name_given_to_with_llm_is_sent_with_every_request():
    llm = ScriptedLLM([answer("Hi.")])
    agent = AgentBuilder().with_llm(llm, model="gpt-test").build()

    state = agent.execute(question())

    assert llm.requests[0].model == "gpt-test"
    assert state.current_step.model == "gpt-test"


# --- text the ledger cannot store -----------------------------------------------------------


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["NUL", "lone surrogate"])
def test_a_user_message_the_ledger_cannot_store_is_refused_before_anything_is_written(bad):
    recorder = InMemoryRecorder()
    llm = ScriptedLLM([answer("Hi."), answer("Hi again.")])
    agent = AgentBuilder().with_llm(llm).with_ledger(recorder).build()
    first = agent.run("Hello")

    with pytest.raises(UnstorableTextError, match=r"the user message holds .* at offset 1"):
        agent.run(bad, first.conversation_id)

    assert len(llm.requests) == 1  # the model was not asked
    stored = recorder.load_conversation(first.conversation_id).messages()
    assert [m.content for m in stored] == ["Hello", "Hi."]
    assert agent.run("Again", first.conversation_id).status is AgentStatus.COMPLETED


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["NUL", "lone surrogate"])
def test_an_agent_name_the_ledger_cannot_store_is_refused_at_build(bad):
    builder = AgentBuilder().with_llm(ScriptedLLM([]))

    with pytest.raises(UnstorableTextError, match="the agent's name"):
        builder.with_name(bad)
    with pytest.raises(UnstorableTextError, match="the agent's name"):
        AgentBuilder(llm=ScriptedLLM([]), name=bad).build()


@pytest.mark.parametrize(
    ("response", "where"),
    [
        (answer("Sunny\x00."), "a NUL character at offset 5 of content"),
        (
            answer("Sunny.", reasoning="\ud800"),
            "a lone surrogate (U+D800) at offset 0 of reasoning",
        ),
        (calls(weather_call("c\x00")), "of tool_calls[0].id"),
        (calls(weather_call("c1", city="Pa\x00ris")), "of tool_calls[0].arguments['city']"),
        (
            calls(ToolCall(id="c1", name="get_weather", raw_arguments="{\x00")),
            "of tool_calls[0].raw_arguments",
        ),
        (answer("Sunny.", metadata={"id\x00": 1}), "of the key metadata['id\\x00']"),
        (answer("Sunny.", finish_reason="stop\x00"), "of finish_reason"),
    ],
    ids=[
        "content",
        "reasoning",
        "tool call id",
        "arguments",
        "raw arguments",
        "metadata key",
        "finish reason",
    ],
)
def test_model_output_the_ledger_cannot_store_fails_the_step_and_the_run_can_go_on(
    response, where, weather_tool
):
    recorder = InMemoryRecorder()
    broken = ScriptedLLM([calls(weather_call("a")), response])
    builder = AgentBuilder().with_tools([weather_tool]).with_ledger(recorder)

    failed = builder.with_llm(broken).build().run("Weather in Paris?")

    assert failed.status is AgentStatus.FAILED
    assert failed.stop_reason is StopReason.ERROR
    assert failed.error.startswith("UnstorableTextError: the model's response holds ")
    assert where in failed.error
    assert "resumed" in failed.error
    assert "\x00" not in failed.error and "\ud800" not in failed.error
    assert failed.state.current_step.step_type is StepType.ERROR
    assert failed.state.current_step.assistant_message is None
    assert roles(failed.state.execution_buffer()) == [Role.ASSISTANT, Role.TOOL]
    assert roles(failed.state.messages()) == [Role.USER]

    working = builder.with_llm(ScriptedLLM([answer("Sunny.")])).build()
    resumed = working.resume(failed.run_id)

    assert resumed.run_id == failed.run_id
    assert resumed.status is AgentStatus.COMPLETED
    assert resumed.answer == "Sunny."


def test_a_refused_model_response_still_counts_the_tokens_and_cost_it_spent(weather_tool):
    spent = Usage(input_tokens=120, output_tokens=30)
    refused = answer("Sunny\x00.", usage=spent, cost_usd=0.25, model="m\x00")
    llm = ScriptedLLM([refused])

    failed = AgentBuilder().with_llm(llm).with_tools([weather_tool]).build().run("Weather?")

    assert failed.status is AgentStatus.FAILED
    step = failed.state.current_step
    assert step.usage == spent and step.cost_usd == 0.25
    assert step.model == "m\\x00"  # diagnostics, escaped; the text itself is not kept
    assert step.assistant_message is None  # no message: its text is not kept
    assert failed.usage == spent


def test_a_model_error_message_with_nul_is_escaped_in_the_run_error():
    def down(_request):
        raise ConnectionError("reset\x00by peer\udfff")

    result = AgentBuilder().with_llm(ScriptedLLM([down])).build().run("Hello")

    assert result.status is AgentStatus.FAILED
    assert result.error == "ConnectionError: reset\\x00by peer\\udfff"


@pytest.mark.parametrize(
    ("reply", "where"),
    [
        ('{"thought": "", "final_answer": "a\x00b"}', "at offset 34 of content"),
        ('{"thought": "", "final_answer": "a\\u0000b"}', "at offset 1 of content"),
        (
            '{"thought": "\\ud800", "action": {"tool": "get_weather", "arguments": {}}}',
            "at offset 0 of reasoning",
        ),
    ],
    ids=["in the reply", "as a JSON escape in the answer", "as a JSON escape in the thought"],
)
def test_a_react_decision_the_ledger_cannot_store_fails_the_step(reply, where, weather_tool):
    llm = ScriptedLLM([answer(reply)])
    agent = AgentBuilder().with_driver(ReActDriver(llm)).with_tools([weather_tool]).build()

    result = agent.run("Weather in Paris?")

    assert result.status is AgentStatus.FAILED
    assert result.error.startswith("UnstorableTextError: the model's response holds ")
    assert where in result.error
    assert result.state.current_step.step_type is StepType.ERROR

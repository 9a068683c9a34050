"""``ReActDriver``: tools for models without native tool calling, through one JSON decision per
step over plain chat. Decisions and observations are trace; only the answer reaches the
conversation. Checked through the public API, and with SQL on a real ledger database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    Messages,
    ReActDriver,
    Role,
    StopReason,
    Usage,
)
from agentledger._core import FunctionTool
from agentledger._values import StepType
from agentledger.errors import ConfigurationError
from agentledger.ledger import Ledger
from agentledger.ledger.checksums import canonical_json
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM
from support.ledger import Database

QUESTION = "What is the weather in Paris and in Oslo?"
SYSTEM_PROMPT = "You are a weather assistant."


# --- helpers ------------------------------------------------------------------------------------


def reply(text: str, **fields: Any) -> InferenceResponse:
    return InferenceResponse(content=text, **fields)


def action_text(tool: str, arguments: dict[str, Any], thought: str = "I need a tool.") -> str:
    return json.dumps({"thought": thought, "action": {"tool": tool, "arguments": arguments}})


def action(
    tool: str, arguments: dict[str, Any], thought: str = "I need a tool."
) -> InferenceResponse:
    return reply(action_text(tool, arguments, thought))


def weather(city: str, thought: str = "I need the weather.") -> InferenceResponse:
    return action("get_weather", {"city": city}, thought)


def final(answer: str, thought: str = "I know the answer.") -> InferenceResponse:
    return reply(json.dumps({"thought": thought, "final_answer": answer}))


def react_agent(llm: ScriptedLLM, *tools: FunctionTool, **driver_options: Any) -> AgentBuilder:
    return AgentBuilder().with_driver(ReActDriver(llm, **driver_options)).with_tools(tools)


def question(text: str = QUESTION) -> AgentState:
    return AgentState.empty().with_messages(Messages.from_string(text))


def step_types(state: AgentState) -> list[StepType]:
    return [e.step.step_type for e in state.step_executions]


def chat(request: InferenceRequest) -> list[tuple[Role, str]]:
    return [(m.role, m.content) for m in request.messages]


def as_json(value: Any) -> Any:
    """A JSON column's value: text on SQLite (through plain SQL), decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


MALFORMED = [
    pytest.param("I will look up the weather first.", "contains no JSON object", id="prose"),
    pytest.param('{"thought": "hm", "action": }', "is not valid JSON", id="broken-json"),
    pytest.param('{"thought": "hm"}', 'neither "action" nor "final_answer"', id="neither"),
    pytest.param(
        '{"action": {"tool": "get_weather", "arguments": {}}, "final_answer": "x"}',
        'both "action" and "final_answer"',
        id="both",
    ),
    pytest.param(
        '{"thought": "hm", "action": {"tool": 3, "arguments": {}}}',
        "action.tool: Input should be a valid string",
        id="tool-not-a-string",
    ),
    pytest.param(
        '{"thought": "hm", "action": {"tool": "get_weather", "arguments": [1]}}',
        "action.arguments: Input should be a valid dictionary",
        id="arguments-not-an-object",
    ),
    pytest.param('{"final_answer": ["Sunny"]}', "final_answer: Input should be", id="answer-list"),
    pytest.param("", "contains no JSON object", id="empty"),
]


# --- a run with tools ------------------------------------------------------------------------


def test_two_actions_then_an_answer_leave_only_the_question_and_the_answer_in_the_conversation(
    weather_tool,
):
    llm = ScriptedLLM([weather("Paris"), weather("Oslo"), final("Sunny in both.", "Done.")])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    assert [(m.role, m.content) for m in state.messages()] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, "Sunny in both."),
    ]
    answer = state.messages()[1]
    assert (answer.tool_calls, answer.reasoning, answer.metadata) == ((), None, {})
    assert state.answer() == "Sunny in both."
    assert state.status is AgentStatus.COMPLETED
    assert state.stop_reason is StopReason.COMPLETED
    assert state.execution_buffer().is_empty()
    assert step_types(state) == [StepType.TOOL_USE, StepType.TOOL_USE, StepType.RESPONSE]


def test_an_action_is_filed_as_a_structured_tool_call_with_the_thought_as_reasoning(weather_tool):
    llm = ScriptedLLM([weather("Paris", "Paris first."), final("Sunny.")])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    step = state.step_executions[0].step
    assistant, result = step.trace_messages
    (call,) = assistant.tool_calls
    assert (call.name, dict(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.id
    assert assistant.content == ""
    assert assistant.reasoning == "Paris first."
    assert assistant.metadata == {
        "react": {"raw": action_text("get_weather", {"city": "Paris"}, "Paris first.")}
    }
    assert step.assistant_message == assistant
    assert (result.role, result.tool_call_id, result.content) == (
        Role.TOOL,
        call.id,
        "22C and sunny in Paris",
    )
    assert step.response_messages.is_empty()
    assert step.has_tool_calls()
    (execution,) = step.tool_executions
    assert (execution.tool_call, execution.arguments, execution.is_error) == (
        call,
        {"city": "Paris"},
        False,
    )


def test_a_step_keeps_the_usage_and_model_of_the_real_response(weather_tool):
    usage = Usage(input_tokens=120, output_tokens=30)
    llm = ScriptedLLM(
        [
            reply(action_text("get_weather", {"city": "Paris"}), usage=usage, finish_reason="stop"),
            final("Sunny."),
        ],
        model="small-model",
    )
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    step = state.step_executions[0].step
    assert (step.usage, step.model, step.finish_reason) == (usage, "small-model", "stop")
    assert state.usage.input_tokens == 120


# --- what the model is sent --------------------------------------------------------------------


def test_the_system_prompt_lists_the_tools_with_their_schemas_and_no_native_tools_are_sent(
    weather_tool, add_tool
):
    llm = ScriptedLLM([final("Hello.")])
    agent = react_agent(llm, weather_tool, add_tool).with_system_prompt(SYSTEM_PROMPT).build()

    agent.execute(question())

    (request,) = llm.requests
    assert request.tools == ()
    system, user = request.messages
    assert system.role is Role.SYSTEM
    assert system.content.startswith(SYSTEM_PROMPT + "\n\n")
    for schema in agent.tools.schemas():
        assert f"- {schema.name}: {schema.description}" in system.content
        assert json.dumps(schema.parameters) in system.content
    assert '"action": {"tool": "<tool name>"' in system.content
    assert '"final_answer": "<your answer to the user>"' in system.content
    assert (user.role, user.content) == (Role.USER, QUESTION)


def test_observations_reach_the_model_as_user_messages_after_the_decision_that_asked_for_them(
    weather_tool,
):
    llm = ScriptedLLM([weather("Paris", "Paris first."), weather("Oslo"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).build()

    agent.execute(question())

    sent = llm.requests[2]
    assert [m.role for m in sent.messages] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert all(not m.tool_calls and m.reasoning is None for m in sent.messages)
    first_decision = json.loads(sent.messages[2].content)
    assert first_decision == {
        "thought": "Paris first.",
        "action": {"tool": "get_weather", "arguments": {"city": "Paris"}},
    }
    assert sent.messages[3].content == "Observation from get_weather: 22C and sunny in Paris"
    assert sent.messages[5].content == "Observation from get_weather: 22C and sunny in Oslo"


def test_the_steps_input_messages_are_the_provider_neutral_state_messages(weather_tool):
    llm = ScriptedLLM([weather("Paris"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).with_system_prompt(SYSTEM_PROMPT).build()

    state = agent.execute(question())

    seen = state.step_executions[1].step.input_messages
    assert [m.role for m in seen] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert seen[0].content == SYSTEM_PROMPT
    assert seen[2].tool_calls == state.step_executions[0].step.assistant_message.tool_calls


def test_an_agent_without_tools_is_asked_for_an_answer_only():
    llm = ScriptedLLM([final("Hello!")])
    agent = react_agent(llm).build()

    state = agent.execute(question("Hi"))

    prompt = llm.requests[0].messages[0].content
    assert "You cannot call tools" in prompt
    assert '"action"' not in prompt
    assert state.answer() == "Hello!"


# --- lenient parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrapped",
    [
        pytest.param("```json\n{decision}\n```", id="json-fence"),
        pytest.param("```\n{decision}\n```", id="bare-fence"),
        pytest.param(
            "Here is my decision:\n```json\n{decision}\n```\nThanks.", id="fence-in-prose"
        ),
        pytest.param("Sure. {decision} Hope that helps.", id="object-in-prose"),
        pytest.param("```\nweather(paris)\n```\n{decision}", id="fence-without-json-first"),
        pytest.param("\n\n  {decision}  \n", id="whitespace"),
    ],
)
def test_a_decision_wrapped_in_a_code_fence_or_prose_is_accepted(weather_tool, wrapped):
    decision = action_text("get_weather", {"city": "Paris"})
    llm = ScriptedLLM([reply(wrapped.replace("{decision}", decision)), final("Sunny.")])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.TOOL_USE, StepType.RESPONSE]
    assert state.step_executions[0].step.tool_executions[0].result == "22C and sunny in Paris"


def test_arguments_sent_as_json_text_are_decoded(weather_tool):
    text = json.dumps(
        {"thought": "t", "action": {"tool": "get_weather", "arguments": '{"city": "Oslo"}'}}
    )
    llm = ScriptedLLM([reply(text), final("Sunny.")])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    assert state.step_executions[0].step.tool_executions[0].result == "22C and sunny in Oslo"


def test_a_decision_without_a_thought_is_accepted(weather_tool):
    text = json.dumps({"action": {"tool": "get_weather", "arguments": {"city": "Lima"}}})
    llm = ScriptedLLM([reply(text), reply('{"final_answer": "Sunny."}')])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    assert state.step_executions[0].step.assistant_message.reasoning is None
    assert state.answer() == "Sunny."


# --- tool errors are observations, not decision errors ---------------------------------------


@pytest.mark.parametrize(
    ("decision", "observation"),
    [
        pytest.param(
            action("get_wether", {"city": "Paris"}),
            "Observation from get_wether: Error: unknown tool 'get_wether'. "
            "Available tools: get_weather, add.",
            id="unknown-tool",
        ),
        pytest.param(
            action("add", {"a": "one"}),
            "Observation from add: Error: invalid arguments for tool 'add': a: Input should be a "
            "valid integer, unable to parse string as an integer. Call it again with valid "
            "arguments.",
            id="invalid-arguments",
        ),
        pytest.param(
            action("add", {"a": 1, "c": 2}),
            "Observation from add: Error: invalid arguments for tool 'add': c: Extra inputs are "
            "not permitted. Call it again with valid arguments.",
            id="extra-argument",
        ),
    ],
)
def test_an_unknown_tool_or_invalid_arguments_become_error_observations(
    weather_tool, add_tool, decision, observation
):
    llm = ScriptedLLM([decision, final("Sorry.")])
    agent = react_agent(llm, weather_tool, add_tool).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.TOOL_USE, StepType.RESPONSE]
    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert llm.requests[1].messages[-1].content == observation
    assert (llm.requests[1].messages[-1].role, state.status) == (Role.USER, AgentStatus.COMPLETED)


# --- malformed decisions ------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "problem"), MALFORMED)
def test_a_malformed_decision_is_fed_back_as_an_error_observation_and_the_run_goes_on(
    weather_tool, raw, problem
):
    llm = ScriptedLLM([reply(raw), weather("Paris"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.INVALID_OUTPUT, StepType.TOOL_USE, StepType.RESPONSE]
    assert state.status is AgentStatus.COMPLETED
    assert [m.content for m in state.messages()] == [QUESTION, "Sunny."]
    invalid = state.step_executions[0]
    assert invalid.outcome is not None and invalid.outcome.should_continue
    (rejected,) = invalid.step.trace_messages
    assert (rejected.role, rejected.content, rejected.tool_calls) == (Role.ASSISTANT, raw, ())
    error = rejected.metadata["react"]["error"]
    assert problem in error
    assert '"final_answer"' in error  # it says what to send instead
    assert invalid.step.response_messages.is_empty()
    assert invalid.step.error is None
    assert chat(llm.requests[1])[1:] == [
        (Role.USER, QUESTION),
        (Role.ASSISTANT, raw),
        (Role.USER, f"Observation: Error: {error}"),
    ]


@pytest.mark.parametrize("max_invalid", [0, 1, 2, 3])
def test_max_invalid_decisions_in_a_row_and_one_more_fail_the_run_with_its_buffer_kept(
    weather_tool, max_invalid
):
    llm = ScriptedLLM([reply("no idea")] * (max_invalid + 1))
    agent = react_agent(llm, weather_tool, max_invalid_decisions=max_invalid).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.INVALID_OUTPUT] * max_invalid + [StepType.ERROR]
    assert state.status is AgentStatus.FAILED
    assert state.stop_reason is StopReason.ERROR
    assert state.error is not None
    assert state.error.startswith(f"the model gave {max_invalid + 1} malformed ReAct decisions")
    assert "contains no JSON object" in state.error
    assert "max_invalid_decisions" in state.error
    assert "ToolCallingDriver" in state.error
    assert [m.content for m in state.messages()] == [QUESTION]
    assert state.answer() is None
    assert [m.content for m in state.execution_buffer()] == ["no idea"] * (max_invalid + 1)
    assert llm.remaining == 0


def test_a_run_failed_on_malformed_decisions_continues_when_run_again(weather_tool):
    llm = ScriptedLLM([reply("no"), reply("no"), reply("still no"), final("Sunny.")])
    agent = react_agent(llm, weather_tool, max_invalid_decisions=1).build()

    failed = agent.execute(question())
    assert (failed.status, step_types(failed)) == (
        AgentStatus.FAILED,
        [StepType.INVALID_OUTPUT, StepType.ERROR],
    )
    again = agent.execute(failed)

    assert again.run_id == failed.run_id
    assert again.status is AgentStatus.COMPLETED
    assert step_types(again)[2:] == [StepType.INVALID_OUTPUT, StepType.RESPONSE]
    assert [m.content for m in again.messages()] == [QUESTION, "Sunny."]
    observations = [c for r, c in chat(llm.requests[3]) if c.startswith("Observation: Error:")]
    assert len(observations) == 3


def test_malformed_decisions_corrected_in_between_do_not_add_up(weather_tool):
    llm = ScriptedLLM(
        [reply("oops"), weather("Paris"), reply("oops"), weather("Oslo"), final("Ok.")]
    )
    agent = react_agent(llm, weather_tool, max_invalid_decisions=1).build()

    state = agent.execute(question())

    assert state.status is AgentStatus.COMPLETED
    assert step_types(state).count(StepType.INVALID_OUTPUT) == 2


def test_a_negative_max_invalid_decisions_is_refused():
    with pytest.raises(ConfigurationError, match="max_invalid_decisions=-1"):
        ReActDriver(ScriptedLLM([]), max_invalid_decisions=-1)


# --- limits, the final response, failures ---------------------------------------------------------


def test_a_final_response_step_after_the_steps_limit_asks_for_an_answer_only(weather_tool):
    llm = ScriptedLLM([weather("Paris"), weather("Oslo"), final("Paris is sunny; Oslo unknown.")])
    agent = react_agent(llm, weather_tool).with_max_steps(2).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.TOOL_USE, StepType.TOOL_USE, StepType.FINAL_RESPONSE]
    assert state.answer() == "Paris is sunny; Oslo unknown."
    assert (state.status, state.stop_reason) == (AgentStatus.STOPPED, StopReason.STEPS_LIMIT)
    last = llm.requests[2]
    assert last.tools == ()
    assert "You cannot call tools" in last.messages[0].content
    assert "get_weather:" not in last.messages[0].content
    assert last.messages[-1].role is Role.USER
    assert "limit of this run" in last.messages[-1].content


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("Paris is sunny.", id="prose"),
        pytest.param(action_text("get_weather", {"city": "Oslo"}), id="an-action"),
    ],
)
def test_a_final_response_that_is_not_an_answer_decision_is_taken_as_the_answer(weather_tool, raw):
    llm = ScriptedLLM([weather("Paris"), reply(f"  {raw}\n")])
    agent = react_agent(llm, weather_tool).with_max_steps(1).build()

    state = agent.execute(question())

    assert step_types(state) == [StepType.TOOL_USE, StepType.FINAL_RESPONSE]
    assert state.answer() == raw
    assert state.stop_reason is StopReason.STEPS_LIMIT
    assert state.step_executions[1].step.tool_executions == ()


def test_malformed_decisions_count_against_the_steps_limit(weather_tool):
    llm = ScriptedLLM([reply("hmm"), reply("hmm"), final("I could not decide.")])
    agent = react_agent(llm, weather_tool, max_invalid_decisions=5).with_max_steps(2).build()

    state = agent.execute(question())

    assert step_types(state) == [
        StepType.INVALID_OUTPUT,
        StepType.INVALID_OUTPUT,
        StepType.FINAL_RESPONSE,
    ]
    assert state.answer() == "I could not decide."


def test_a_failed_model_call_fails_the_run_as_with_the_tool_calling_driver(weather_tool):
    def unreachable(request: InferenceRequest) -> InferenceResponse:
        raise ConnectionError("model server unreachable")

    agent = react_agent(ScriptedLLM([unreachable]), weather_tool).build()

    state = agent.execute(question())

    (execution,) = state.step_executions
    assert execution.step.step_type is StepType.ERROR
    assert execution.step.error == "ConnectionError: model server unreachable"
    assert execution.step.assistant_message is None and execution.step.model is None
    assert (state.status, state.stop_reason) == (AgentStatus.FAILED, StopReason.ERROR)


# --- inline mode ---------------------------------------------------------------------------------


def test_in_inline_mode_a_later_run_sees_the_earlier_decisions_and_observations(weather_tool):
    llm = ScriptedLLM([reply("?"), weather("Paris"), final("Sunny."), final("Still sunny.")])
    agent = react_agent(llm, weather_tool).with_separated_tool_trace(False).build()

    first = agent.execute(question())
    agent.execute(first.with_user_message("And now?"))

    assert [r for r, _ in chat(llm.requests[3])] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,  # the malformed decision
        Role.USER,  # its error observation
        Role.ASSISTANT,  # the tool call, as a decision
        Role.USER,  # its observation
        Role.ASSISTANT,  # the answer
        Role.USER,
    ]
    assert chat(llm.requests[3])[6:] == [(Role.ASSISTANT, "Sunny."), (Role.USER, "And now?")]


# --- recorded in a ledger -----------------------------------------------------------------------


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.close()


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    opened = Ledger.open(db_url)
    yield opened
    opened.close()


def test_a_recorded_run_keeps_decisions_and_observations_out_of_the_conversation(
    db, ledger, weather_tool
):
    llm = ScriptedLLM([reply("Let me think."), weather("Paris"), weather("Oslo"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).with_system_prompt(SYSTEM_PROMPT).with_ledger(ledger)

    result = agent.build().run(QUESTION)

    assert (result.status, result.answer) == ("completed", "Sunny.")
    rows = db.conversation_rows(result.conversation_id)
    assert [(r["role"], r["content"], r["tool_calls"]) for r in rows] == [
        ("user", QUESTION, None),
        ("assistant", "Sunny.", None),
    ]
    assert [as_json(r["metadata"]) for r in rows] == [None, None]
    assert db.count("execution_buffer_rows") == 0
    steps = db.rows(
        "SELECT step_type, content, tool_call_count, reasoning, metadata, should_continue "
        "FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    )
    assert [s["step_type"] for s in steps] == ["invalid_output", "tool_use", "tool_use", "response"]
    assert [bool(s["should_continue"]) for s in steps] == [True, True, True, False]
    invalid = steps[0]
    assert invalid["content"] == "Let me think."
    assert "contains no JSON object" in as_json(invalid["metadata"])["react"]["error"]
    assert [s["tool_call_count"] for s in steps] == [0, 1, 1, 0]  # each call is a tool row, below
    assert steps[1]["reasoning"] == "I need the weather."
    assert db.rows(
        "SELECT tool_name, arguments, result, is_error FROM tool_executions "
        "WHERE run_id = :r ORDER BY step_index",
        r=result.run_id,
    ) == [
        {
            "tool_name": "get_weather",
            "arguments": {"city": city}
            if db.dialect == "postgresql"
            else canonical_json({"city": city}),  # the ledger's JSON text on SQLite
            "result": f"22C and sunny in {city}",
            "is_error": False if db.dialect == "postgresql" else 0,
        }
        for city in ("Paris", "Oslo")
    ]
    db.assert_runs_consistent()


def test_the_trace_of_a_recorded_run_is_rebuilt_exactly_from_its_rows(ledger, weather_tool):
    llm = ScriptedLLM([reply("Let me think."), weather("Paris"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).with_ledger(ledger).build()

    result = agent.run(QUESTION)

    live = result.state.step_executions
    rebuilt = ledger.steps(result.run_id)
    assert [e.step.step_type for e in rebuilt] == [e.step.step_type for e in live]
    assert [e.step.trace_messages for e in rebuilt] == [e.step.trace_messages for e in live]
    assert [e.step.response_messages for e in rebuilt] == [e.step.response_messages for e in live]
    trace = ledger.trace_messages(result.run_id)
    assert [(m.role, m.content) for m in trace] == [
        (Role.ASSISTANT, "Let me think."),
        (Role.ASSISTANT, ""),
        (Role.TOOL, "22C and sunny in Paris"),
    ]


def test_a_recorded_run_failed_on_malformed_decisions_keeps_its_buffer_and_can_be_resumed(
    db, ledger, weather_tool
):
    llm = ScriptedLLM([reply("no"), reply("nope"), reply("never"), final("Sunny.")])
    agent = react_agent(llm, weather_tool).with_ledger(ledger).build()

    failed = agent.run(QUESTION)

    run = db.row("SELECT status, stop_reason, error FROM agent_runs WHERE id = :r", r=failed.run_id)
    assert (run["status"], run["stop_reason"]) == ("failed", "error")
    assert run["error"].startswith("the model gave 3 malformed ReAct decisions in a row")
    assert db.column(
        "SELECT step_type FROM step_executions WHERE run_id = :r ORDER BY step_index",
        r=failed.run_id,
    ) == ["invalid_output", "invalid_output", "error"]
    assert db.column(
        "SELECT content FROM execution_buffer_rows WHERE run_id = :r ORDER BY seq",
        r=failed.run_id,
    ) == ["no", "nope", "never"]
    assert [r["content"] for r in db.conversation_rows(failed.conversation_id)] == [QUESTION]

    resumed = agent.resume(failed.run_id)

    assert (resumed.status, resumed.answer) == ("completed", "Sunny.")
    sent = chat(llm.requests[3])
    assert [c for r, c in sent if r is Role.ASSISTANT] == ["no", "nope", "never"]
    assert sum(c.startswith("Observation: Error:") for _, c in sent) == 3
    assert [r["content"] for r in db.conversation_rows(failed.conversation_id)] == [
        QUESTION,
        "Sunny.",
    ]
    assert db.count("execution_buffer_rows") == 0
    db.assert_runs_consistent()

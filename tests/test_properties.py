"""Properties that hold over any scripted sequence of model responses.

A scenario is a script of responses (tool calls, some of them to unknown tools or with invalid
arguments, with or without text; plain answers; model failures), a mode (separated or inline),
a steps limit and a final-response policy. The scenario asks a question, runs the agent, asks
again after every run that ended and continues every run that failed, until the script runs out.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    Message,
    Messages,
    Role,
    ToolCall,
    Usage,
    tool,
)
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM, ScriptItem

PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@tool
def explode(reason: str = "") -> str:
    """Always raises."""
    raise RuntimeError(f"exploded {reason}")


TOOLS = [get_weather, add, explode]


def model_down(request: InferenceRequest) -> InferenceResponse:
    raise ConnectionError("the model is down")


valid_calls = st.one_of(
    st.builds(lambda city: ("get_weather", {"city": city}), st.text(max_size=8)),
    st.builds(lambda a, b: ("add", {"a": a, "b": b}), st.integers(-9, 9), st.integers(-9, 9)),
    st.builds(lambda a: ("add", {"a": a}), st.integers(-9, 9)),
    st.just(("explode", {"reason": "boom"})),
)
invalid_calls = st.sampled_from(
    [
        ("teleport", {"to": "Mars"}),
        ("add", {}),
        ("add", {"a": "many"}),
        ("get_weather", {"city": "Oslo", "country": "NO"}),
    ]
)
calls = st.one_of(valid_calls, valid_calls, invalid_calls)
usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 1000),
    output_tokens=st.integers(0, 200),
    cache_read_tokens=st.integers(0, 100),
    reasoning_tokens=st.integers(0, 50),
)
texts = st.text(min_size=1, max_size=12)
reasonings = st.none() | st.text(max_size=8)


@st.composite
def tool_responses(draw: st.DrawFn) -> tuple[str, ...]:
    return (
        "tools",
        draw(st.lists(calls, min_size=1, max_size=3)),
        draw(st.just("") | texts),
        draw(usages),
        draw(reasonings),
        draw(st.sampled_from([None, "tool_calls", "content_filter"])),
    )


@st.composite
def text_responses(draw: st.DrawFn) -> tuple[str, ...]:
    return (
        "text",
        draw(texts | st.just("")),
        draw(usages),
        draw(reasonings),
        draw(st.sampled_from([None, "stop", "length"])),
    )


items = st.one_of(tool_responses(), tool_responses(), text_responses(), st.just(("fail",)))


def to_script(specs: list[tuple[object, ...]]) -> list[ScriptItem]:
    script: list[ScriptItem] = []
    for position, spec in enumerate(specs):
        if spec[0] == "fail":
            script.append(model_down)
        elif spec[0] == "tools":
            _, tool_calls, content, usage, reasoning, finish_reason = spec
            script.append(
                InferenceResponse(
                    content=content,
                    tool_calls=tuple(
                        ToolCall(id=f"call-{position}-{n}", name=name, arguments=arguments)
                        for n, (name, arguments) in enumerate(tool_calls)
                    ),
                    usage=usage,
                    reasoning=reasoning,
                    finish_reason=finish_reason,
                )
            )
        else:
            _, content, usage, reasoning, finish_reason = spec
            script.append(
                InferenceResponse(
                    content=content, usage=usage, reasoning=reasoning, finish_reason=finish_reason
                )
            )
    return script


@dataclass(frozen=True)
class Scenario:
    script: list[ScriptItem]
    separated: bool
    max_steps: int
    final_response: str
    parallel: int


scenarios = st.builds(
    Scenario,
    script=st.lists(items, max_size=12).map(to_script),
    separated=st.booleans(),
    max_steps=st.integers(1, 5),
    final_response=st.sampled_from(["generate", "none"]),
    parallel=st.sampled_from([1, 3]),
)
separated_scenarios = scenarios.map(lambda s: Scenario(**{**s.__dict__, "separated": True}))
inline_scenarios = scenarios.map(lambda s: Scenario(**{**s.__dict__, "separated": False}))


@dataclass(frozen=True)
class Execution:
    """One call to ``execute``: the conversation its run started from (the question included),
    the state it returned, and the script positions it consumed."""

    prefix: tuple[Message, ...]
    state: AgentState
    consumed: range


def play(scenario: Scenario) -> tuple[ScriptedLLM, list[Execution]]:
    llm = ScriptedLLM(scenario.script)
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools(TOOLS)
        .with_separated_tool_trace(scenario.separated)
        .with_max_steps(scenario.max_steps)
        .with_final_response(scenario.final_response)
        .with_parallel_tools(scenario.parallel)
        .build()
    )
    state = AgentState.empty()
    prefix: tuple[Message, ...] = ()
    executions: list[Execution] = []
    for turn in range(len(scenario.script) + 1):
        if turn and llm.remaining <= 0:
            break
        if state.status is not AgentStatus.FAILED:
            state = state.with_user_message(f"question {turn}")
            prefix = tuple(state.messages())
        start = len(llm.requests)
        state = agent.execute(state)
        executions.append(Execution(prefix, state, range(start, len(llm.requests))))
    return llm, executions


def new_messages(execution: Execution) -> list[Message]:
    conversation = list(execution.state.messages())
    assert conversation[: len(execution.prefix)] == list(execution.prefix)
    return conversation[len(execution.prefix) :]


@given(separated_scenarios)
@PROPERTY_SETTINGS
def test_in_separated_mode_the_conversation_holds_only_questions_and_answers(scenario):
    _, executions = play(scenario)

    for execution in executions:
        conversation = execution.state.messages()
        assert all(m.role in (Role.USER, Role.ASSISTANT) for m in conversation)
        assert all(not m.tool_calls and m.tool_call_id is None for m in conversation)
        assert all(m.reasoning is None for m in conversation)
        added = new_messages(execution)
        assert len(added) <= 1
        if added:
            (answer,) = added
            assert answer.role is Role.ASSISTANT
            assert answer.content
            assert answer.content == execution.state.answer()


@given(scenarios)
@PROPERTY_SETTINGS
def test_the_buffer_is_empty_after_every_run_that_did_not_fail(scenario):
    _, executions = play(scenario)

    for execution in executions:
        state = execution.state
        assert state.continuation_outcome is not None
        assert state.continuation_outcome.should_continue is False
        if state.status is AgentStatus.FAILED:
            assert state.error
            if scenario.separated:
                trace = [m for e in state.step_executions for m in e.step.trace_messages]
                assert list(state.execution_buffer()) == trace
        else:
            assert state.status in (AgentStatus.COMPLETED, AgentStatus.STOPPED)
            assert state.execution_buffer().is_empty()


def assert_tool_results_follow_their_calls(messages: Messages) -> None:
    unanswered: list[str] = []
    answered: set[str] = set()
    for message in messages:
        if message.role is Role.TOOL:
            assert message.tool_call_id in unanswered, "a tool result without its tool call"
            unanswered.remove(message.tool_call_id)
            answered.add(message.tool_call_id)
            continue
        assert unanswered == [], "a tool call without its tool result"
        if message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            assert answered.isdisjoint(ids)
            unanswered = ids
    assert unanswered == [], "a tool call without its tool result"


@given(scenarios)
@PROPERTY_SETTINGS
def test_every_tool_result_the_model_sees_follows_the_call_it_answers(scenario):
    llm, _ = play(scenario)

    for request in llm.requests:
        assert_tool_results_follow_their_calls(request.messages)


@given(scenarios)
@PROPERTY_SETTINGS
def test_every_tool_result_follows_its_call_in_the_state_the_next_run_starts_from(scenario):
    _, executions = play(scenario)

    for execution in executions:
        assert_tool_results_follow_their_calls(execution.state.messages_for_inference())


@given(inline_scenarios)
@PROPERTY_SETTINGS
def test_in_inline_mode_the_conversation_is_the_question_then_every_step_output(scenario):
    _, executions = play(scenario)

    for execution in executions:
        outputs = [m for e in execution.state.step_executions for m in e.step.output_messages()]
        assert new_messages(execution) == outputs
        assert execution.state.execution_buffer().is_empty()


@given(scenarios)
@PROPERTY_SETTINGS
def test_the_usage_of_a_run_is_the_sum_of_the_responses_it_consumed(scenario):
    _, executions = play(scenario)

    spent: dict[str | None, Usage] = {}
    for execution in executions:
        consumed = [
            item.usage
            for position in execution.consumed
            if position < len(scenario.script)
            and isinstance(item := scenario.script[position], InferenceResponse)
        ]
        run_id = execution.state.run_id
        spent[run_id] = sum(consumed, spent.get(run_id, Usage()))
        assert execution.state.usage == spent[run_id]
    total = sum(
        (item.usage for item in scenario.script if isinstance(item, InferenceResponse)), Usage()
    )
    assert sum(spent.values(), Usage()) == total


@given(scenarios)
@PROPERTY_SETTINGS
def test_step_indexes_of_a_run_count_up_from_zero(scenario):
    _, executions = play(scenario)

    for execution in executions:
        indexes = [e.step_index for e in execution.state.step_executions]
        assert indexes == list(range(len(indexes)))
        assert all(e.outcome is not None for e in execution.state.step_executions)

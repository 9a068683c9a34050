"""When a run goes on and when it stops: limits, the final response, finish reasons, criteria."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    ExecutionBudget,
    Messages,
    Role,
    StopReason,
    ToolCall,
    Usage,
    stop_when,
)
from agentledger._values import ContinuationDecision, StepType
from agentledger.llm import InferenceResponse, ScriptedLLM


def looking_up(n: int, **fields: object) -> InferenceResponse:
    """A response that calls the weather tool once, with call id ``c{n}``."""
    call = ToolCall(id=f"c{n}", name="get_weather", arguments={"city": f"City {n}"})
    return InferenceResponse(tool_calls=(call,), **fields)


def keeps_calling_tools(count: int = 10, **fields: object) -> list[InferenceResponse]:
    return [looking_up(n, **fields) for n in range(count)]


def answer(text: str, **fields: object) -> InferenceResponse:
    return InferenceResponse(content=text, **fields)


def question() -> AgentState:
    return AgentState.empty().with_messages(Messages.from_string("Weather everywhere?"))


def assert_no_trace_in(messages: Messages) -> None:
    assert all(m.role is not Role.TOOL for m in messages)
    assert all(not m.tool_calls for m in messages)


# --- the steps limit and the final response -------------------------------------------------


def test_the_steps_limit_asks_for_a_final_answer_without_tools(weather_tool):
    usage = Usage(input_tokens=10, output_tokens=5)
    final = answer("I looked up two cities.", usage=Usage(input_tokens=30, output_tokens=7))
    llm = ScriptedLLM([*keeps_calling_tools(2, usage=usage), final, answer("unused")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_max_steps(2).build()

    state = agent.execute(question())

    assert len(llm.requests) == 3
    assert state.step_count == 3
    last = state.step_executions[-1].step
    assert last.step_type is StepType.FINAL_RESPONSE
    assert llm.requests[0].tools != ()
    assert llm.requests[-1].tools == ()
    instruction = llm.requests[-1].messages[-1]
    assert instruction.role is Role.USER
    assert "limit" in instruction.content.lower()
    assert state.usage == usage + usage + Usage(input_tokens=30, output_tokens=7)
    assert state.status is AgentStatus.STOPPED
    outcome = state.continuation_outcome
    assert outcome.should_continue is False
    assert outcome.stop_reason is StopReason.STEPS_LIMIT
    assert outcome.decided_by == "steps_limit"
    assert state.stop_reason is StopReason.STEPS_LIMIT
    assert state.execution_buffer().is_empty()
    assert [(m.role, m.content) for m in state.messages()] == [
        (Role.USER, "Weather everywhere?"),
        (Role.ASSISTANT, "I looked up two cities."),
    ]
    assert state.answer() == "I looked up two cities."


def test_the_final_response_request_still_shows_the_model_its_tool_trace(weather_tool):
    llm = ScriptedLLM([*keeps_calling_tools(2), answer("Done.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_max_steps(2).build()

    agent.execute(question())

    seen = llm.requests[-1].messages
    assert [m.role for m in seen] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.USER,
    ]
    assert [m.tool_call_id for m in seen if m.role is Role.TOOL] == ["c0", "c1"]


def test_the_limit_before_the_final_response_says_a_final_answer_is_required(weather_tool):
    llm = ScriptedLLM([*keeps_calling_tools(2), answer("Done.")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_max_steps(2).build()

    states = list(agent.iterate(question()))

    limit_reached = states[1].continuation_outcome
    assert limit_reached.should_continue is True
    assert limit_reached.final_response_required is True
    assert limit_reached.stop_reason is StopReason.STEPS_LIMIT
    assert states[-1].continuation_outcome.final_response_required is False


def test_a_custom_final_instruction_is_what_the_model_is_asked(weather_tool):
    llm = ScriptedLLM([*keeps_calling_tools(1), answer("Done.")])
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_max_steps(1)
        .with_final_response("generate", instruction="Stop now ({reason}) and answer.")
        .build()
    )

    agent.execute(question())

    assert llm.requests[-1].messages[-1].content == "Stop now (steps_limit) and answer."


def test_without_a_final_response_a_stopped_run_ends_without_an_answer(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(5))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_max_steps(2)
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert len(llm.requests) == 2
    assert state.step_count == 2
    assert all(e.step.step_type is StepType.TOOL_USE for e in state.step_executions)
    assert state.status is AgentStatus.STOPPED
    assert state.stop_reason is StopReason.STEPS_LIMIT
    assert state.continuation_outcome.decided_by == "steps_limit"
    assert state.execution_buffer().is_empty()
    assert [m.content for m in state.messages()] == ["Weather everywhere?"]
    assert state.answer() is None


def test_an_answer_on_the_step_that_reaches_the_limit_completes_the_run(weather_tool):
    llm = ScriptedLLM([looking_up(0), answer("Sunny."), answer("unused")])
    agent = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_max_steps(2).build()

    state = agent.execute(question())

    assert len(llm.requests) == 2
    assert state.step_count == 2
    assert state.status is AgentStatus.COMPLETED
    assert state.stop_reason is StopReason.COMPLETED
    assert state.continuation_outcome.should_continue is False
    assert state.step_executions[-1].step.step_type is StepType.RESPONSE
    assert state.answer() == "Sunny."


def test_in_inline_mode_a_stopped_run_keeps_its_trace_and_final_answer(weather_tool):
    llm = ScriptedLLM([*keeps_calling_tools(2), answer("Partial answer.")])
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_max_steps(2)
        .with_separated_tool_trace(False)
        .build()
    )

    state = agent.execute(question())

    assert [m.role for m in state.messages()] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert state.messages()[-1].content == "Partial answer."
    assert all(m.role is not Role.USER for m in state.messages()[1:])


# --- every limit ----------------------------------------------------------------------------

Configure = Callable[[AgentBuilder, object], AgentBuilder]

LIMITS: list[tuple[str, Configure, dict[str, object], StopReason, str]] = [
    (
        "steps",
        lambda b, clock: b.with_max_steps(3),
        {},
        StopReason.STEPS_LIMIT,
        "steps_limit",
    ),
    (
        "tokens",
        lambda b, clock: b.with_budget(ExecutionBudget(max_tokens=120)),
        {"usage": Usage(input_tokens=40, output_tokens=10)},
        StopReason.TOKEN_LIMIT,
        "token_limit",
    ),
    (
        "cost",
        lambda b, clock: b.with_budget(ExecutionBudget(max_cost_usd=0.025)),
        {"cost_usd": 0.01},
        StopReason.COST_LIMIT,
        "cost_limit",
    ),
    (
        "time",
        lambda b, clock: b.with_budget(ExecutionBudget(max_seconds=6)),
        {},
        StopReason.TIME_LIMIT,
        "time_limit",
    ),
    (
        "deadline",
        lambda b, clock: b.with_budget(
            ExecutionBudget(deadline=clock.start + timedelta(seconds=6))
        ),
        {},
        StopReason.DEADLINE,
        "deadline",
    ),
]
LIMIT_IDS = [row[0] for row in LIMITS]


@pytest.mark.parametrize(
    ("name", "configure", "fields", "reason", "decided_by"), LIMITS, ids=LIMIT_IDS
)
def test_a_limit_stops_a_run_that_keeps_calling_tools(
    name, configure, fields, reason, decided_by, clock, weather_tool
):
    llm = ScriptedLLM(keeps_calling_tools(10, **fields))
    builder = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_clock(clock)
    agent = configure(builder, clock).with_final_response("none").build()

    state = agent.execute(question())

    outcome = state.continuation_outcome
    assert outcome.should_continue is False
    assert outcome.stop_reason is reason
    assert outcome.decided_by == decided_by
    assert outcome.final_response_required is False
    assert state.status is AgentStatus.STOPPED
    assert 1 < state.step_count < 10
    assert len(llm.requests) == state.step_count
    assert all(e.outcome.should_continue for e in state.step_executions[:-1])
    assert state.execution_buffer().is_empty()
    assert [m.role for m in state.messages()] == [Role.USER]


@pytest.mark.parametrize(
    ("name", "configure", "fields", "reason", "decided_by"), LIMITS, ids=LIMIT_IDS
)
def test_a_limit_is_followed_by_a_final_answer_by_default(
    name, configure, fields, reason, decided_by, make_clock, weather_tool
):
    responses = keeps_calling_tools(10, **fields)
    clock = make_clock()
    builder = AgentBuilder().with_llm(ScriptedLLM(responses)).with_tools([weather_tool])
    limited = configure(builder.with_clock(clock), clock).with_final_response("none").build()
    steps_before_limit = limited.execute(question()).step_count

    final = answer("Here is what I found.", **fields)
    llm = ScriptedLLM([*responses[:steps_before_limit], final])
    clock = make_clock()
    builder = AgentBuilder().with_llm(llm).with_tools([weather_tool]).with_clock(clock)
    agent = configure(builder, clock).build()

    state = agent.execute(question())

    assert state.step_count == steps_before_limit + 1
    assert state.step_executions[-1].step.step_type is StepType.FINAL_RESPONSE
    assert llm.requests[-1].tools == ()
    outcome = state.continuation_outcome
    assert outcome.should_continue is False
    assert outcome.stop_reason is reason
    assert outcome.decided_by == decided_by
    assert state.status is AgentStatus.STOPPED
    assert state.answer() == "Here is what I found."
    assert [m.content for m in state.messages()] == ["Weather everywhere?", "Here is what I found."]
    assert_no_trace_in(state.messages())
    assert state.execution_buffer().is_empty()


def test_the_token_limit_counts_input_and_output_tokens(weather_tool):
    usage = Usage(input_tokens=40, output_tokens=10)
    llm = ScriptedLLM(keeps_calling_tools(10, usage=usage))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_budget(ExecutionBudget(max_tokens=120))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_count == 3
    assert state.usage.total_tokens == 150


def test_the_cost_limit_adds_up_the_cost_of_each_response(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10, cost_usd=0.01))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_budget(ExecutionBudget(max_cost_usd=0.025))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_count == 3
    assert state.cost_usd == pytest.approx(0.03)


def test_the_cost_limit_ignores_responses_of_unknown_cost(weather_tool):
    llm = ScriptedLLM([*keeps_calling_tools(3), answer("Done.")])
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_budget(ExecutionBudget(max_cost_usd=0.0))
        .build()
    )

    state = agent.execute(question())

    assert state.cost_usd is None
    assert state.status is AgentStatus.COMPLETED


@pytest.mark.parametrize("limit_seconds", [3, 6, 11])
def test_the_time_limit_stops_at_the_first_step_that_ends_past_it(
    limit_seconds, clock, weather_tool
):
    llm = ScriptedLLM(keeps_calling_tools(20))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_clock(clock)
        .with_budget(ExecutionBudget(max_seconds=limit_seconds))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    limit = timedelta(seconds=limit_seconds)
    assert state.run_started_at == clock.start
    ends = [e.finished_at - state.run_started_at for e in state.step_executions]
    assert ends[-1] >= limit
    assert all(end < limit for end in ends[:-1])
    assert state.stop_reason is StopReason.TIME_LIMIT


def test_the_deadline_stops_at_the_first_step_that_ends_past_it(clock, weather_tool):
    deadline = clock.start + timedelta(seconds=6)
    llm = ScriptedLLM(keeps_calling_tools(20))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_clock(clock)
        .with_budget(ExecutionBudget(deadline=deadline))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_executions[-1].finished_at >= deadline
    assert all(e.finished_at < deadline for e in state.step_executions[:-1])
    assert state.stop_reason is StopReason.DEADLINE


def test_a_budget_on_the_state_is_tightened_by_the_agents(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_max_steps(5)
        .with_final_response("none")
        .build()
    )
    state = question().model_copy(update={"budget": ExecutionBudget(max_steps=2)})

    state = agent.execute(state)

    assert state.step_count == 2
    assert state.stop_reason is StopReason.STEPS_LIMIT


def test_with_budget_keeps_the_limits_it_does_not_name(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_max_steps(2)
        .with_budget(ExecutionBudget(max_tokens=10_000))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_count == 2
    assert state.stop_reason is StopReason.STEPS_LIMIT


# --- provider finish reasons ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reasons", "finish_reason", "stops"),
    [
        (None, "content_filter", True),
        (None, "refusal", True),
        (None, "length", False),
        (None, "tool_calls", False),
        (("length",), "length", True),
        (("length",), "content_filter", False),
        (("length", "content_filter"), "content_filter", True),
    ],
)
def test_a_provider_finish_reason_in_the_configured_set_stops_the_run(
    stop_reasons, finish_reason, stops, weather_tool
):
    llm = ScriptedLLM([looking_up(0, finish_reason=finish_reason), answer("Sunny.")])
    builder = AgentBuilder().with_llm(llm).with_tools([weather_tool])
    if stop_reasons is not None:
        builder = builder.with_stop_finish_reasons(*stop_reasons)

    state = builder.build().execute(question())

    if stops:
        assert len(llm.requests) == 1
        assert state.continuation_outcome.should_continue is False
        assert state.stop_reason is StopReason.FINISH_REASON
        assert state.continuation_outcome.decided_by == "finish_reason"
        assert state.continuation_outcome.detail == finish_reason
        assert state.status is AgentStatus.STOPPED
        assert state.execution_buffer().is_empty()
        assert [m.role for m in state.messages()] == [Role.USER]
    else:
        assert len(llm.requests) == 2
        assert state.stop_reason is StopReason.COMPLETED
        assert state.answer() == "Sunny."


def test_a_finish_reason_that_stops_the_run_wins_over_an_answer():
    llm = ScriptedLLM([answer("Sorry, I cut myself short", finish_reason="length")])
    agent = AgentBuilder().with_llm(llm).with_stop_finish_reasons("length").build()

    state = agent.execute(question())

    assert state.stop_reason is StopReason.FINISH_REASON
    assert state.status is AgentStatus.STOPPED


# --- custom criteria ------------------------------------------------------------------------


def two_steps_are_enough(state: AgentState) -> ContinuationDecision:
    if state.step_count >= 2:
        return ContinuationDecision.stop(StopReason.CUSTOM, "two steps are enough")
    return ContinuationDecision.abstain()


def test_a_custom_criterion_can_stop_the_run(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_continuation_criteria(two_steps_are_enough)
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_count == 2
    outcome = state.continuation_outcome
    assert outcome.should_continue is False
    assert outcome.stop_reason is StopReason.CUSTOM
    assert outcome.decided_by == "two_steps_are_enough"
    assert outcome.detail == "two steps are enough"
    assert state.status is AgentStatus.STOPPED
    assert state.execution_buffer().is_empty()


def test_a_custom_criterion_sees_the_step_just_taken(weather_tool):
    seen: list[int] = []

    def record(state: AgentState) -> ContinuationDecision:
        seen.append(state.step_count)
        assert state.current_step is not None
        return ContinuationDecision.abstain()

    llm = ScriptedLLM([*keeps_calling_tools(2), answer("Done.")])
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_continuation_criteria(record)
        .build()
    )

    state = agent.execute(question())

    assert seen == [1, 2, 3]
    assert state.status is AgentStatus.COMPLETED


def test_an_answer_completes_the_run_even_when_a_custom_criterion_says_stop():
    llm = ScriptedLLM([answer("Hi.")])
    always = stop_when(lambda state: True)
    agent = AgentBuilder().with_llm(llm).with_continuation_criteria(always).build()

    state = agent.execute(question())

    assert state.status is AgentStatus.COMPLETED
    assert state.stop_reason is StopReason.COMPLETED


def found_two_cities(state: AgentState) -> bool:
    return state.step_count >= 2


@pytest.mark.parametrize(
    ("predicate", "decided_by"),
    [(found_two_cities, "found_two_cities"), (lambda state: state.step_count >= 2, "stop_when")],
    ids=["named function", "lambda"],
)
def test_stop_when_stops_the_run_once_its_predicate_holds(predicate, decided_by, weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10))
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_continuation_criteria(stop_when(predicate))
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.step_count == 2
    outcome = state.continuation_outcome
    assert outcome.should_continue is False
    assert outcome.stop_reason is StopReason.CUSTOM
    assert outcome.decided_by == decided_by
    assert state.status is AgentStatus.STOPPED


def test_stop_when_keeps_the_detail_it_is_given(weather_tool):
    llm = ScriptedLLM(keeps_calling_tools(10))
    criterion = stop_when(found_two_cities, "enough cities")
    agent = (
        AgentBuilder()
        .with_llm(llm)
        .with_tools([weather_tool])
        .with_continuation_criteria(criterion)
        .with_final_response("none")
        .build()
    )

    state = agent.execute(question())

    assert state.continuation_outcome.detail == "enough cities"

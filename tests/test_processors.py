"""State processors: middleware around every step."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import pytest

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    Message,
    Messages,
    Role,
    StateProcessor,
    StopReason,
    ToolCall,
)
from agentledger._core import AppendStepMessages, AppendToolTraceToBuffer, ClearExecutionBuffer
from agentledger.errors import ConfigurationError, ProcessorError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.databases import sqlite_url
from support.ledger import Database


def script() -> list[InferenceResponse]:
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})
    return [InferenceResponse(tool_calls=(call,)), InferenceResponse(content="Sunny.")]


def question() -> AgentState:
    return AgentState.empty().with_messages(Messages.from_string("Weather?"))


@dataclass
class Recorder:
    """Records the state each step starts from and the state it ends in."""

    before: list[AgentState] = field(default_factory=list)
    after: list[AgentState] = field(default_factory=list)

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next) -> AgentState:
        self.before.append(state)
        new_state = next(state)
        self.after.append(new_state)
        return new_state


@dataclass
class OnlyFromSecondStep(Recorder):
    def can_process(self, state: AgentState) -> bool:
        return state.step_count >= 1


class Swallow:
    """Breaks the contract: never calls ``next``."""

    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next) -> AgentState:
        return state.with_user_message("swallowed")


def test_the_built_in_processors_are_state_processors():
    for processor in (
        AppendToolTraceToBuffer(),
        AppendStepMessages(separate_tool_trace=True),
        ClearExecutionBuffer(),
        Recorder(),
    ):
        assert isinstance(processor, StateProcessor)


def test_a_processor_sees_the_state_before_and_after_every_step(weather_tool):
    recorder = Recorder()
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script()))
        .with_tools([weather_tool])
        .with_processors(recorder)
        .build()
    )

    state = agent.execute(question())

    assert [s.step_count for s in recorder.before] == [0, 1]
    assert [s.step_count for s in recorder.after] == [1, 2]
    assert recorder.before[0].current_step is None
    assert recorder.before[0].continuation_outcome is None
    first_after = recorder.after[0]
    assert first_after.current_step is not None
    assert first_after.current_step.has_tool_calls()
    assert first_after.continuation_outcome.should_continue is True
    assert [m.role for m in first_after.execution_buffer()] == [Role.ASSISTANT, Role.TOOL]
    last_after = recorder.after[-1]
    assert last_after.current_step.final_response().content == "Sunny."
    assert last_after.continuation_outcome.should_continue is False
    assert last_after.continuation_outcome.stop_reason is StopReason.COMPLETED
    assert last_after == state
    assert recorder.before[1] == recorder.after[0]


def test_user_processors_see_the_step_after_the_built_ins_filed_it(weather_tool):
    recorder = Recorder()
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script()))
        .with_tools([weather_tool])
        .with_processors(recorder)
        .build()
    )

    agent.execute(question())

    last_after = recorder.after[-1]
    assert [m.content for m in last_after.messages()] == ["Weather?", "Sunny."]
    assert last_after.execution_buffer().is_empty()


def test_a_processor_that_cannot_process_a_state_is_skipped_for_that_step(weather_tool):
    processor = OnlyFromSecondStep()
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script()))
        .with_tools([weather_tool])
        .with_processors(processor)
        .build()
    )

    state = agent.execute(question())

    assert [s.step_count for s in processor.before] == [1]
    assert state.status is AgentStatus.COMPLETED


def test_processors_run_first_listed_outermost():
    order: list[str] = []

    @dataclass
    class Named:
        name: str

        def can_process(self, state: AgentState) -> bool:
            return True

        def process(self, state: AgentState, next) -> AgentState:
            order.append(f"{self.name} before")
            new_state = next(state)
            order.append(f"{self.name} after")
            return new_state

    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([InferenceResponse(content="Hi.")]))
        .with_processors(Named("outer"), [Named("middle")])
        .with_processors(Named("inner"))
        .build()
    )

    agent.execute(question())

    assert order == [
        "outer before",
        "middle before",
        "inner before",
        "inner after",
        "middle after",
        "outer after",
    ]


def test_a_processor_can_shape_what_the_model_sees():
    class Remind:
        def can_process(self, state: AgentState) -> bool:
            return True

        def process(self, state: AgentState, next) -> AgentState:
            store = state.store.section(AgentState.SUMMARY_SECTION).set_messages(
                Message.user("Earlier: the user likes short answers.")
            )
            return next(state.with_message_store(store))

    llm = ScriptedLLM([InferenceResponse(content="Hi.")])
    agent = AgentBuilder().with_llm(llm).with_processors(Remind()).build()

    agent.execute(question())

    assert [m.content for m in llm.requests[0].messages] == [
        "Earlier: the user likes short answers.",
        "Weather?",
    ]


def test_a_processor_that_never_calls_next_raises_a_processor_error():
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([InferenceResponse(content="Hi.")]))
        .with_processors(Swallow())
        .build()
    )

    with pytest.raises(ProcessorError):
        agent.execute(question())


def test_a_processor_that_skips_next_on_a_later_step_raises_a_processor_error(weather_tool):
    class SwallowSecond(Swallow):
        def process(self, state: AgentState, next) -> AgentState:
            return state if state.step_count >= 1 else next(state)

    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script()))
        .with_tools([weather_tool])
        .with_processors(SwallowSecond())
        .build()
    )

    with pytest.raises(ProcessorError):
        agent.execute(question())


# --- plain functions ------------------------------------------------------------------------------


def test_a_plain_function_is_a_processor_chained_where_it_is_listed(weather_tool):
    seen: list[tuple[str, int]] = []

    def count_steps(state: AgentState, next) -> AgentState:
        seen.append(("function before", state.step_count))
        after = next(state)
        seen.append(("function after", after.step_count))
        return after

    recorder = Recorder()
    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM(script()))
        .with_tools([weather_tool])
        .with_processors([count_steps], recorder)
        .build()
    )

    state = agent.execute(question())

    assert seen == [
        ("function before", 0),
        ("function after", 1),
        ("function before", 1),
        ("function after", 2),
    ]
    assert [s.step_count for s in recorder.before] == [0, 1]  # inside the function
    assert state.status is AgentStatus.COMPLETED


def test_a_function_that_never_calls_next_raises_a_processor_error_naming_it():
    def swallow(state: AgentState, next) -> AgentState:
        return state.with_user_message("swallowed")

    agent = (
        AgentBuilder()
        .with_llm(ScriptedLLM([InferenceResponse(content="Hi.")]))
        .with_processors(swallow)
        .build()
    )

    with pytest.raises(ProcessorError, match="swallow"):
        agent.execute(question())


def refuse(state: AgentState, next) -> AgentState:
    raise ValueError("no weather today")


class Refuse:
    def can_process(self, state: AgentState) -> bool:
        return True

    def process(self, state: AgentState, next) -> AgentState:
        return refuse(state, next)


@pytest.mark.parametrize("processor", [Refuse(), refuse], ids=["object", "function"])
def test_an_error_a_processor_raises_fails_the_run_alike_object_or_function(processor, tmp_path):
    url = sqlite_url(tmp_path)
    with Ledger.open(url) as ledger:
        agent = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Hi.")]))
            .with_processors(processor)
            .with_ledger(ledger)
            .build()
        )
        with pytest.raises(ValueError, match="no weather today"):
            agent.run("Weather?")
    with contextlib.closing(Database(url)) as db:
        assert db.row("SELECT status, error FROM agent_runs") == {
            "status": "failed",
            "error": "ValueError: no weather today",
        }


@pytest.mark.parametrize("given", [42, "refuse", [refuse, None]])
def test_with_processors_says_what_a_processor_is(given):
    with pytest.raises(ConfigurationError, match=r"process\(state, next\)"):
        AgentBuilder().with_processors(given)

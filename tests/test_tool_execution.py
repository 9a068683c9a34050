"""Tools inside a run: results, errors fed back to the model, context, parallel calls; and what
happens when the model call itself fails."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from datetime import datetime

import pytest
from pydantic import BaseModel

from agentledger import (
    AgentBuilder,
    AgentState,
    AgentStatus,
    Messages,
    Role,
    StopReason,
    ToolCall,
    ToolContext,
    ToolOutput,
    tool,
)
from agentledger._loop import TRACEBACK_KEY
from agentledger._values import StepType
from agentledger.errors import ScriptExhaustedError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceRequest, InferenceResponse, ScriptedLLM


def calls(*tool_calls: ToolCall, content: str = "") -> InferenceResponse:
    return InferenceResponse(content=content, tool_calls=tool_calls)


def answer(text: str) -> InferenceResponse:
    return InferenceResponse(content=text)


def question(text: str = "Help me.") -> AgentState:
    return AgentState.empty().with_messages(Messages.from_string(text))


class Point(BaseModel):
    x: int
    y: int


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot do it: {reason}")


@tool
def as_dict() -> dict[str, object]:
    """A dict."""
    return {"temperature": 22, "unit": "C", "tags": ["sunny"]}


@tool
def as_list() -> list[int]:
    """A list."""
    return [1, 2, 3]


@tool
def as_model() -> Point:
    """A pydantic model."""
    return Point(x=1, y=2)


@tool
def as_number() -> float:
    """A number."""
    return 2.5


@tool
def as_object() -> object:
    """Something that is not JSON."""
    return object()


@tool
def refuse(what: str) -> ToolOutput:
    """Marks its own result as an error."""
    return ToolOutput(content=f"not allowed: {what}", is_error=True)


def run_one_call(tools, call: ToolCall):
    """Run a call to ``tools`` then an answer; return (state, llm)."""
    llm = ScriptedLLM([calls(call), answer("Done.")])
    agent = AgentBuilder().with_llm(llm).with_tools(tools).build()
    return agent.execute(question()), llm


# --- results --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_", "expected"),
    [
        (as_dict, {"temperature": 22, "unit": "C", "tags": ["sunny"]}),
        (as_list, [1, 2, 3]),
        (as_model, {"x": 1, "y": 2}),
        (as_number, 2.5),
    ],
    ids=["dict", "list", "pydantic model", "float"],
)
def test_a_result_that_is_not_a_string_is_sent_as_json(tool_, expected):
    state, llm = run_one_call([tool_], ToolCall(id="c1", name=tool_.name))

    (execution,) = state.step_executions[0].step.tool_executions
    assert not execution.is_error
    assert json.loads(execution.result) == expected
    assert json.loads(llm.requests[1].messages[-1].content) == expected


def test_a_string_result_is_sent_as_it_is(weather_tool):
    _, llm = run_one_call(
        [weather_tool], ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"})
    )

    assert llm.requests[1].messages[-1].content == "22C and sunny in Oslo"


class Reading:
    """A value of the tool's own making that JSON cannot encode."""


@tool
def custom() -> Reading:
    """Returns something that is not JSON."""
    return Reading()


@pytest.mark.parametrize(
    ("tool_", "type_name"),
    [(as_object, "object"), (custom, f"{__name__}.Reading")],
    ids=["object", "a class of the tool's module"],
)
def test_a_result_that_cannot_be_json_encoded_says_its_type_and_what_to_return(tool_, type_name):
    state, llm = run_one_call([tool_], ToolCall(id="c1", name=tool_.name))

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert execution.error.startswith(
        f"tool {tool_.name!r} returned a value of type {type_name} that cannot be stored"
    )
    assert "Return a string, a JSON-compatible value" in execution.error
    assert "raised" not in execution.error  # the tool did not fail: what it returned did
    assert execution.metadata == {}
    assert llm.requests[1].messages[-1].content == execution.result
    assert state.status is AgentStatus.COMPLETED


def test_a_tool_can_mark_its_own_result_as_an_error():
    state, llm = run_one_call([refuse], ToolCall(id="c1", name="refuse", arguments={"what": "x"}))

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert execution.result == "not allowed: x"
    assert execution.error == "not allowed: x"
    assert llm.requests[1].messages[-1].content == "not allowed: x"
    assert state.status is AgentStatus.COMPLETED


def test_validated_arguments_are_recorded_with_their_defaults(add_tool):
    state, _ = run_one_call([add_tool], ToolCall(id="c1", name="add", arguments={"a": 2}))

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.arguments == {"a": 2, "b": 0}
    assert execution.result == "2"


# --- errors are fed back to the model -------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected_in_error"),
    [
        (
            ToolCall(id="c1", name="explode", arguments={"reason": "no fuel"}),
            ["ValueError", "cannot do it: no fuel"],
        ),
        (
            ToolCall(id="c1", name="teleport", arguments={"to": "Mars"}),
            ["teleport", "explode", "add"],
        ),
        (ToolCall(id="c1", name="add", arguments={}), ["a"]),
        (ToolCall(id="c1", name="add", arguments={"a": "not a number"}), ["a"]),
        (ToolCall(id="c1", name="add", arguments={"a": 1, "c": 3}), ["c"]),
    ],
    ids=["tool raises", "unknown tool", "missing field", "wrong type", "extra field"],
)
def test_a_tool_error_is_fed_back_to_the_model(call, expected_in_error, add_tool):
    state, llm = run_one_call([explode, add_tool], call)

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert execution.error
    for fragment in expected_in_error:
        assert fragment in execution.error
    tool_message = llm.requests[1].messages[-1]
    assert tool_message.role is Role.TOOL
    assert tool_message.tool_call_id == "c1"
    assert execution.error in tool_message.content
    assert state.step_executions[0].step.tool_errors == (execution,)
    assert state.status is AgentStatus.COMPLETED
    assert state.answer() == "Done."
    assert state.execution_buffer().is_empty()


def test_an_unknown_tool_error_lists_the_available_tools(add_tool, weather_tool):
    state, _ = run_one_call([add_tool, weather_tool], ToolCall(id="c1", name="nope"))

    error = state.step_executions[0].step.tool_executions[0].error
    assert "nope" in error
    assert "add" in error
    assert "get_weather" in error
    assert state.step_executions[0].step.tool_executions[0].arguments is None


def test_invalid_arguments_are_not_passed_to_the_tool():
    called: list[int] = []

    @tool
    def count(n: int) -> str:
        """Counts."""
        called.append(n)
        return "ok"

    state, _ = run_one_call([count], ToolCall(id="c1", name="count", arguments={"n": [1]}))

    assert called == []
    assert state.step_executions[0].step.tool_executions[0].is_error


def test_one_failing_call_does_not_stop_the_others_in_the_step(add_tool):
    llm = ScriptedLLM(
        [
            calls(
                ToolCall(id="ok1", name="add", arguments={"a": 1, "b": 2}),
                ToolCall(id="bad", name="explode", arguments={"reason": "x"}),
                ToolCall(id="ok2", name="add", arguments={"a": 3}),
            ),
            answer("Done."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([add_tool, explode]).build()

    state = agent.execute(question())

    executions = state.step_executions[0].step.tool_executions
    assert [e.is_error for e in executions] == [False, True, False]
    results = [m.content for m in llm.requests[1].messages if m.role is Role.TOOL]
    assert results[0] == "3"
    assert results[1].startswith("Error")
    assert results[2] == "3"
    assert state.status is AgentStatus.COMPLETED


# --- text the ledger cannot store -------------------------------------------------------------


@tool
def read_bytes(path: str) -> str:
    """Returns raw bytes decoded carelessly."""
    return "PK\x03\x04\x00\x00 binary"


@tool
def tagged() -> ToolOutput:
    """Returns metadata with a lone surrogate."""
    return ToolOutput(content="fine", metadata={"source": ["ok", "half \ud83d of an emoji"]})


@tool
def nul_error(reason: str) -> str:
    """Raises with a NUL in its message."""
    raise RuntimeError(f"bad\x00{reason}\ud800")


@pytest.mark.parametrize(
    ("tool_", "expected"),
    [
        (read_bytes, "a NUL character at offset 4 of content"),
        (tagged, "a lone surrogate (U+D83D) at offset 5 of metadata['source'][1]"),
    ],
    ids=["NUL in the result", "lone surrogate in the metadata"],
)
def test_an_unstorable_tool_output_becomes_an_error_result_saying_where_and_what_to_do(
    tool_, expected
):
    call = ToolCall(
        id="c1", name=tool_.name, arguments={"path": "a.zip"} if tool_ is read_bytes else {}
    )
    state, llm = run_one_call([tool_], call)

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert f"the output of tool {tool_.name!r} holds {expected}" in execution.error
    assert "base64" in execution.error
    assert execution.result == f"Error: {execution.error}"
    assert execution.metadata == {}
    assert llm.requests[1].messages[-1].content == execution.result
    assert state.status is AgentStatus.COMPLETED
    assert state.answer() == "Done."


def test_an_exception_message_with_nul_or_a_lone_surrogate_is_escaped_in_the_error_result():
    state, llm = run_one_call(
        [nul_error], ToolCall(id="c1", name="nul_error", arguments={"reason": "x"})
    )

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.error == "Tool 'nul_error' raised RuntimeError: bad\\x00x\\ud800"
    assert llm.requests[1].messages[-1].content == f"Error: {execution.error}"
    assert state.status is AgentStatus.COMPLETED


# --- what a tool that raises leaves behind ---------------------------------------------------


def test_a_tool_that_raises_is_logged_with_its_traceback_and_the_model_gets_one_line(caplog):
    call = ToolCall(id="c1", name="explode", arguments={"reason": "no fuel"})
    with caplog.at_level(logging.WARNING, logger="agentledger.tools"):
        _, llm = run_one_call([explode], call)

    (record,) = [r for r in caplog.records if r.name == "agentledger.tools"]
    assert record.levelno == logging.WARNING
    first, logged = record.getMessage().split("\n", 1)
    assert first.startswith("Tool 'explode' raised ValueError: cannot do it: no fuel (run ")
    assert first.endswith("step 0, tool call c1)")
    assert logged.startswith("Traceback (most recent call last):")  # the whole traceback
    assert 'raise ValueError(f"cannot do it: {reason}")' in logged
    assert logged.endswith("ValueError: cannot do it: no fuel")
    sent = llm.requests[1].messages[-1].content
    assert sent == "Error: Tool 'explode' raised ValueError: cannot do it: no fuel"
    assert "Traceback" not in sent


def test_a_tool_that_raises_keeps_its_traceback_in_the_execution_metadata():
    state, _ = run_one_call(
        [explode], ToolCall(id="c1", name="explode", arguments={"reason": "no fuel"})
    )

    (execution,) = state.step_executions[0].step.tool_executions
    kept = execution.metadata[TRACEBACK_KEY]
    assert kept.startswith("Traceback (most recent call last):")
    assert f'File "{__file__}"' in kept and "in explode" in kept
    assert kept.endswith("ValueError: cannot do it: no fuel\n")
    assert execution.result == "Error: Tool 'explode' raised ValueError: cannot do it: no fuel"


@tool
def deep(depth: int) -> str:
    """Fails at the bottom of a recursion whose every level wraps the failure below it, so
    that the traceback holds a chain of ``depth`` exceptions."""
    if depth == 0:
        raise KeyError("the bottom")
    try:
        return deep.function(depth - 1)
    except LookupError as exc:
        raise IndexError(f"level {depth}") from exc


def test_a_long_traceback_is_cut_to_its_end_where_the_failure_is():
    state, llm = run_one_call([deep], ToolCall(id="c1", name="deep", arguments={"depth": 80}))

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.error == "Tool 'deep' raised IndexError: level 80"
    kept = execution.metadata[TRACEBACK_KEY]
    first, rest = kept.split("\n", 1)
    assert re.fullmatch(r"\.\.\. \(\d+ characters cut\)", first)
    assert len(rest) <= 8192  # the last 8 KB, from the start of a line
    assert rest.endswith("IndexError: level 80\n")  # the exception the tool raised, last
    assert "KeyError: 'the bottom'" not in kept  # the start of the chain is what was cut
    assert llm.requests[1].messages[-1].content == f"Error: {execution.error}"


def test_a_traceback_with_nul_or_a_lone_surrogate_is_logged_escaped(caplog):
    call = ToolCall(id="c1", name="nul_error", arguments={"reason": "x"})
    with caplog.at_level(logging.WARNING, logger="agentledger.tools"):
        run_one_call([nul_error], call)

    (record,) = [r for r in caplog.records if r.name == "agentledger.tools"]
    logged = record.getMessage()
    logged.encode("utf-8")  # what a log handler writes: it must encode
    assert "\x00" not in logged
    assert logged.endswith("RuntimeError: bad\\x00x\\ud800")
    assert record.exc_info is None


def test_a_traceback_with_nul_or_a_lone_surrogate_is_stored_escaped(tmp_path):
    llm = ScriptedLLM(
        [calls(ToolCall(id="c1", name="nul_error", arguments={"reason": "x"})), answer("Done.")]
    )
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        agent = AgentBuilder().with_llm(llm).with_tools([nul_error]).with_ledger(ledger).build()
        result = agent.run("Help me.")
        (step,) = [e for e in ledger.steps(result.run_id) if e.step.tool_executions]

    kept = step.step.tool_executions[0].metadata[TRACEBACK_KEY]
    assert kept.endswith("RuntimeError: bad\\x00x\\ud800\n")
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        (stored,) = db.execute("SELECT json_extract(metadata, '$.traceback') FROM tool_executions")
    assert stored == (kept,)


# --- the tool context -----------------------------------------------------------------------


def test_a_tool_receives_its_context_with_an_idempotency_key():
    contexts: list[ToolContext] = []

    @tool
    def remember(note: str, context: ToolContext) -> str:
        """Remember a note."""
        contexts.append(context)
        return "ok"

    llm = ScriptedLLM(
        [
            calls(ToolCall(id="first", name="remember", arguments={})),
            calls(ToolCall(id="second", name="remember", arguments={"note": "b"})),
            answer("Done."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([remember]).build()

    state = agent.execute(question())

    # the first call misses its argument: the tool never runs for it
    (context,) = contexts
    assert context.run_id == state.run_id
    assert context.conversation_id == state.conversation_id
    assert context.step_index == 1
    assert context.tool_call.id == "second"
    assert context.idempotency_key == f"{state.run_id}:1:second"
    assert context.state.step_count == 1
    assert "context" not in llm.requests[0].tools[0].parameters["properties"]


# --- parallel tools -------------------------------------------------------------------------


def test_parallel_tools_run_at_once_and_keep_the_order_of_the_calls():
    barrier = threading.Barrier(4, timeout=5)

    @tool
    def slow(n: int) -> str:
        """Sleeps, longer for earlier calls, after all four have started."""
        barrier.wait()
        time.sleep(0.01 * (4 - n))
        return f"result {n}"

    llm = ScriptedLLM(
        [
            calls(*(ToolCall(id=f"c{n}", name="slow", arguments={"n": n}) for n in range(4))),
            answer("Done."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([slow]).with_parallel_tools(4).build()

    started = time.monotonic()
    state = agent.execute(question())
    elapsed = time.monotonic() - started

    executions = state.step_executions[0].step.tool_executions
    assert [e.is_error for e in executions] == [False] * 4
    assert [e.tool_call_id for e in executions] == ["c0", "c1", "c2", "c3"]
    assert [e.result for e in executions] == [f"result {n}" for n in range(4)]
    tool_messages = [m for m in llm.requests[1].messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in tool_messages] == ["c0", "c1", "c2", "c3"]
    assert elapsed < 5


def test_without_parallel_tools_calls_run_one_after_the_other():
    running = 0
    most = 0
    lock = threading.Lock()

    @tool
    def slow(n: int) -> str:
        """Sleeps a little."""
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.005)
        with lock:
            running -= 1
        return str(n)

    llm = ScriptedLLM(
        [
            calls(*(ToolCall(id=f"c{n}", name="slow", arguments={"n": n}) for n in range(3))),
            answer("Done."),
        ]
    )
    AgentBuilder().with_llm(llm).with_tools([slow]).build().execute(question())

    assert most == 1


# --- a failing model ------------------------------------------------------------------------


def provider_down(request: InferenceRequest) -> InferenceResponse:
    raise ConnectionError("provider is down")


def test_a_model_call_that_raises_fails_the_run_and_keeps_the_buffer(add_tool):
    llm = ScriptedLLM([calls(ToolCall(id="c1", name="add", arguments={"a": 1})), provider_down])
    agent = AgentBuilder().with_llm(llm).with_tools([add_tool]).build()

    state = agent.execute(question())

    assert state.status is AgentStatus.FAILED
    assert state.stop_reason is StopReason.ERROR
    assert state.continuation_outcome.should_continue is False
    assert state.continuation_outcome.decided_by == "error"
    assert "ConnectionError" in state.error
    assert "provider is down" in state.error
    assert state.current_step.step_type is StepType.ERROR
    assert [m.role for m in state.execution_buffer()] == [Role.ASSISTANT, Role.TOOL]
    assert [m.role for m in state.messages()] == [Role.USER]
    assert state.answer() is None


def test_a_script_that_runs_out_fails_the_run_with_a_clear_error():
    llm = ScriptedLLM([])
    agent = AgentBuilder().with_llm(llm).build()

    state = agent.execute(question())

    assert state.status is AgentStatus.FAILED
    assert state.stop_reason is StopReason.ERROR
    assert "ScriptExhaustedError" in state.error
    assert state.step_count == 1


def test_a_scripted_llm_that_runs_out_raises_script_exhausted():
    llm = ScriptedLLM([answer("only one")])
    request = InferenceRequest(messages=Messages.from_string("hi"))

    assert llm.complete(request).content == "only one"
    assert llm.remaining == 0
    with pytest.raises(ScriptExhaustedError, match="1 scripted responses"):
        llm.complete(request)
    assert len(llm.requests) == 2


def test_a_failed_run_continues_where_it_stopped_with_a_working_model(add_tool):
    broken = ScriptedLLM([calls(ToolCall(id="c1", name="add", arguments={"a": 1})), provider_down])
    builder = AgentBuilder().with_tools([add_tool])
    failed = builder.with_llm(broken).build().execute(question())

    working = ScriptedLLM([calls(ToolCall(id="c2", name="add", arguments={"a": 2})), answer("3")])
    state = builder.with_llm(working).build().execute(failed)

    assert state.run_id == failed.run_id
    assert [e.step_index for e in state.step_executions] == [0, 1, 2, 3]
    assert state.step_executions[:2] == failed.step_executions
    resumed = working.requests[0].messages
    assert [m.role for m in resumed] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert resumed[2].tool_call_id == "c1"
    assert [m.tool_call_id for m in working.requests[1].messages if m.role is Role.TOOL] == [
        "c1",
        "c2",
    ]
    assert state.status is AgentStatus.COMPLETED
    assert state.stop_reason is StopReason.COMPLETED
    assert state.error is None
    assert state.execution_buffer().is_empty()
    assert [(m.role, m.content) for m in state.messages()] == [
        (Role.USER, "Help me."),
        (Role.ASSISTANT, "3"),
    ]


def test_a_model_failure_at_the_first_step_can_be_retried():
    failed = AgentBuilder().with_llm(ScriptedLLM([provider_down])).build().execute(question())

    state = AgentBuilder().with_llm(ScriptedLLM([answer("Hello.")])).build().execute(failed)

    assert state.run_id == failed.run_id
    assert [e.step_index for e in state.step_executions] == [0, 1]
    assert state.status is AgentStatus.COMPLETED
    assert state.answer() == "Hello."


def test_a_failed_final_response_step_is_retried_as_a_final_response_step(add_tool):
    broken = ScriptedLLM(
        [
            calls(ToolCall(id="c1", name="add", arguments={"a": 1})),
            calls(ToolCall(id="c2", name="add", arguments={"a": 2})),
            provider_down,
        ]
    )
    builder = AgentBuilder().with_tools([add_tool]).with_max_steps(2)
    failed = builder.with_llm(broken).build().execute(question())
    assert failed.status is AgentStatus.FAILED
    assert broken.requests[-1].tools == ()

    working = ScriptedLLM(
        [answer("1 and 2 make 3."), calls(ToolCall(id="c3", name="add", arguments={"a": 3}))]
    )
    state = builder.with_llm(working).build().execute(failed)

    assert len(working.requests) == 1
    assert working.requests[0].tools == ()
    assert working.requests[0].messages[-1].role is Role.USER
    assert state.run_id == failed.run_id
    assert state.current_step.step_type is StepType.FINAL_RESPONSE
    assert state.status is AgentStatus.STOPPED
    assert state.stop_reason is StopReason.STEPS_LIMIT
    assert state.continuation_outcome.decided_by == "steps_limit"
    assert state.answer() == "1 and 2 make 3."
    assert state.execution_buffer().is_empty()


def test_steps_are_timed_with_the_agents_clock(clock, add_tool):
    llm = ScriptedLLM([calls(ToolCall(id="c1", name="add", arguments={"a": 1})), answer("1")])
    agent = AgentBuilder().with_llm(llm).with_tools([add_tool]).with_clock(clock).build()

    state = agent.execute(question())

    moments: list[datetime] = [state.run_started_at]
    for execution in state.step_executions:
        step = execution.step
        moments += [step.started_at]
        moments += [t for e in step.tool_executions for t in (e.started_at, e.finished_at)]
        moments += [step.finished_at]
    assert moments == sorted(moments)
    assert len(set(moments)) == len(moments)
    assert all(clock.start <= m < clock.now for m in moments)

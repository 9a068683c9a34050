"""Interrupted turns lose nothing: what a streaming run has shown is made durable as its partial
output, and a cancel (``interrupt_run``), or the abandon of a run whose process died, commits it
to the conversation as one answer flagged ``interrupted``; a resumed run replaces it. On SQLite
and PostgreSQL, through the recorder and checked with SQL on the database itself."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from agentledger import (
    AgentStatus,
    InferenceResponse,
    Message,
    Role,
    ScriptedLLM,
    StopReason,
    ToolCall,
)
from agentledger._recording import (
    InMemoryRecorder,
    Recorder,
    RunResult,
    interrupted_step,
    interruption_notice,
)
from agentledger._values import AgentStep, StepType
from agentledger.errors import LeaseLostError, NotFoundError, UnstorableTextError, UsageError
from agentledger.ledger import Ledger
from agentledger.ledger.migrate import head
from support import forked
from support.cli import flat, invoke, ok
from support.crash_child import connect, rows, scalar
from support.interrupted import (
    QUESTION,
    SHOWN,
    agent_on,
    begin,
    play,
    step,
    stream_shown,
    tool_step_then_answer,
)
from support.invariants import violations

LATE = ToolCall(id="call_late", name="get_weather", arguments={"city": "Porto"})


def conversation(url: str, conversation_id: str) -> list[tuple[str, str, bool]]:
    with connect(url) as conn:
        found = rows(
            conn,
            "SELECT role, content, interrupted FROM conversation_messages "
            "WHERE conversation_id = :id ORDER BY seq",
            id=conversation_id,
        )
    return [(role, content, bool(flag)) for role, content, flag in found]


def run_columns(url: str, run_id: str) -> dict[str, Any]:
    with connect(url) as conn:
        row = conn.execute(
            text(
                "SELECT status, stop_reason, partial_output, partial_step_index, step_count "
                "FROM agent_runs WHERE id = :id"
            ),
            {"id": run_id},
        )
        return dict(row.mappings().one())


def buffer_rows(url: str, run_id: str) -> int:
    with connect(url) as conn:
        return int(
            scalar(conn, "SELECT COUNT(*) FROM execution_buffer_rows WHERE run_id = :id", id=run_id)
        )


def lease_holder(url: str, conversation_id: str) -> str | None:
    with connect(url) as conn:
        holder = scalar(
            conn, "SELECT lease_holder FROM conversations WHERE id = :id", id=conversation_id
        )
    return None if holder is None else str(holder)


def streamed_then_cancelled(recorder: Recorder) -> tuple[str, RunResult]:
    """A run that recorded a tool step, streamed part of its answer, and was cancelled before
    the tool call its model then made had started: (its conversation, its result)."""
    agent = agent_on(recorder, tool_step_then_answer())
    state = step(agent, recorder, begin(agent, recorder))
    stream_shown(recorder, state)
    assert state.run_id is not None
    at = state.step_executions[-1].finished_at
    message = Message(role=Role.ASSISTANT, content=SHOWN[-1], tool_calls=(LATE,), created_at=at)
    answered = AgentStep(
        step_type=StepType.TOOL_USE, assistant_message=message, started_at=at, finished_at=at
    )
    in_flight = interrupted_step(
        1, answered=answered, shown=SHOWN[-1], began=at, started={}, returned={}, at=at
    )
    result = recorder.interrupt_run(state.run_id, partial_text=SHOWN[-1], step=in_flight)
    return state.conversation_id, result


# --- a cancel -------------------------------------------------------------------------------------


def test_partial_output_is_flushed_to_the_run_row_and_replaced_at_each_flush(db_url):
    with Ledger.open(db_url) as ledger:
        agent = agent_on(ledger, tool_step_then_answer())
        state = step(agent, ledger.recorder, begin(agent, ledger.recorder))
        assert state.run_id is not None
        ledger.recorder.record_partial_output(state.run_id, 1, SHOWN[0])
        assert run_columns(db_url, state.run_id)["partial_output"] == SHOWN[0]
        ledger.recorder.record_partial_output(state.run_id, 1, SHOWN[1])
        columns = run_columns(db_url, state.run_id)
        assert (columns["status"], columns["partial_output"], columns["partial_step_index"]) == (
            "running",
            SHOWN[1],
            1,
        )
        # Nothing of it reaches the conversation while the run goes on.
        assert conversation(db_url, state.conversation_id) == [("user", QUESTION, False)]


def test_a_cancelled_run_commits_exactly_what_was_shown_as_its_one_interrupted_answer(db_url):
    with Ledger.open(db_url) as ledger:
        conversation_id, result = streamed_then_cancelled(ledger.recorder)
        assert ledger.verify() == []
        answer = ledger.history(conversation_id)[-1]

    assert (result.status, result.stop_reason, result.answer) == (
        AgentStatus.INTERRUPTED,
        StopReason.CANCELLED,
        SHOWN[-1],
    )
    assert conversation(db_url, conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", SHOWN[-1], True),
    ]
    columns = run_columns(db_url, result.run_id)
    assert columns == {
        "status": "interrupted",
        "stop_reason": "cancelled",
        "partial_output": None,
        "partial_step_index": None,
        "step_count": 2,
    }
    assert buffer_rows(db_url, result.run_id) == 0
    assert lease_holder(db_url, conversation_id) is None
    # The answer is a plain answer (a model is sent no call in it); the call of the step in
    # flight is in the trace, the step flagged interrupted, the call answered "interrupted".
    assert answer.interrupted and answer.tool_calls == ()
    with Ledger.open(db_url) as ledger:
        cut = ledger.steps(result.run_id)[-1]
        trace = ledger.trace_messages(result.run_id)
    assert (cut.step_index, cut.step.interrupted) == (1, True)
    (call,) = cut.step.tool_executions
    assert (call.tool_call, call.is_error) == (LATE, True)
    assert call.result == interruption_notice(started=False)
    assert [m.tool_call_id for m in trace if m.role is Role.TOOL][-1] == LATE.id
    assert violations(db_url) == []


def test_a_run_cancelled_before_anything_was_shown_keeps_its_user_message_only(db_url):
    with Ledger.open(db_url) as ledger:
        agent = agent_on(ledger, tool_step_then_answer())
        state = begin(agent, ledger.recorder)
        assert state.run_id is not None
        result = ledger.recorder.interrupt_run(state.run_id, partial_text="")
        assert ledger.verify() == []

    assert (result.status, result.stop_reason, result.answer) == (
        AgentStatus.INTERRUPTED,
        StopReason.CANCELLED,
        None,
    )
    assert conversation(db_url, state.conversation_id) == [("user", QUESTION, False)]
    assert run_columns(db_url, state.run_id)["status"] == "interrupted"
    assert lease_holder(db_url, state.conversation_id) is None
    assert violations(db_url) == []


def test_the_next_run_sees_the_interrupted_answer_so_the_model_can_go_on(db_url):
    with Ledger.open(db_url) as ledger:
        conversation_id, _ = streamed_then_cancelled(ledger.recorder)
        llm = ScriptedLLM([InferenceResponse(content="... seven hills.")])
        follow_up = agent_on(ledger, llm).run("go on", conversation_id)
        history = ledger.history(conversation_id)
        context = ledger.model_context(conversation_id)
        loaded = ledger.recorder.load_conversation(conversation_id).messages()

    assert follow_up.status is AgentStatus.COMPLETED
    sent = [(m.role, m.content) for m in llm.requests[0].messages if m.role != "system"]
    assert sent == [("user", QUESTION), ("assistant", SHOWN[-1]), ("user", "go on")]
    for messages in (history, context, loaded):
        assert [(m.content, m.interrupted) for m in messages if m.role == "assistant"] == [
            (SHOWN[-1], True),
            ("... seven hills.", False),
        ]
    assert violations(db_url) == []


def test_partial_output_is_fenced_by_the_lease_of_the_run(db_url):
    with Ledger.open(db_url) as first, Ledger.open(db_url) as second:
        agent = agent_on(first, tool_step_then_answer())
        state = step(agent, first.recorder, begin(agent, first.recorder))
        assert state.run_id is not None
        second.recorder.claim_run(state.run_id, stale_after=0)  # as a recovering process would
        with pytest.raises(LeaseLostError, match="lost its lease"):
            first.recorder.record_partial_output(state.run_id, 1, SHOWN[0])
        assert run_columns(db_url, state.run_id)["partial_output"] is None
        with pytest.raises(UsageError, match="not begun or claimed through this ledger handle"):
            second.recorder.record_partial_output("no-such-run", 0, SHOWN[0])


@pytest.mark.parametrize(
    "bad", ["nul \x00 in it", "lone \ud800 surrogate"], ids=["nul", "surrogate"]
)
def test_streamed_text_that_cannot_be_stored_is_refused_with_nothing_written(db_url, bad):
    with Ledger.open(db_url) as ledger:
        agent = agent_on(ledger, tool_step_then_answer())
        state = step(agent, ledger.recorder, begin(agent, ledger.recorder))
        assert state.run_id is not None
        ledger.recorder.record_partial_output(state.run_id, 1, SHOWN[0])
        with pytest.raises(UnstorableTextError, match=r"the streamed text holds .*nothing was"):
            ledger.recorder.record_partial_output(state.run_id, 1, bad)
        with pytest.raises(UnstorableTextError, match="the streamed text holds"):
            ledger.recorder.interrupt_run(state.run_id, partial_text=bad)
        # Nothing changed: the run still runs, holds its conversation, and keeps what it had.
        columns = run_columns(db_url, state.run_id)
        assert (columns["status"], columns["partial_output"]) == ("running", SHOWN[0])
        assert lease_holder(db_url, state.conversation_id) is not None
        result = ledger.recorder.interrupt_run(state.run_id, partial_text=SHOWN[0])
    assert result.answer == SHOWN[0]
    assert violations(db_url) == []


# --- recovery -------------------------------------------------------------------------------------


def stale_streaming_run(url: str) -> tuple[str, str]:
    """A run that recorded a tool step and flushed part of its answer through a handle then
    closed, as if its process died: (conversation, run)."""
    with Ledger.open(url) as ledger:
        agent = agent_on(ledger, tool_step_then_answer())
        state = step(agent, ledger.recorder, begin(agent, ledger.recorder))
        stream_shown(ledger.recorder, state)
    assert state.run_id is not None
    return state.conversation_id, state.run_id


def test_abandoning_a_stale_run_commits_its_partial_output_flagged_interrupted(db_url):
    conversation_id, run_id = stale_streaming_run(db_url)
    before = ok("--db", db_url, "show", conversation_id)

    with Ledger.open(db_url) as ledger:
        abandoned = ledger.recover(stale_after=0)
        assert [(r.id, r.status) for r in abandoned] == [(run_id, "interrupted")]
        assert ledger.recorder.run_result(run_id).answer == SHOWN[-1]
        assert ledger.conversation(conversation_id).version == 1
        assert ledger.verify() == []

    assert conversation(db_url, conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", SHOWN[-1], True),
    ]
    columns = run_columns(db_url, run_id)
    assert (columns["status"], columns["partial_output"]) == ("interrupted", None)
    assert buffer_rows(db_url, run_id) == 0
    assert violations(db_url) == []
    assert "(interrupted)" not in before
    shown = flat(ok("--db", db_url, "show", conversation_id))
    assert "assistant (interrupted)" in shown and SHOWN[-1] in shown
    assert "user (interrupted)" not in shown
    as_json = ok("--db", db_url, "show", conversation_id, "--json").splitlines()
    assert [('"interrupted": true' in line) for line in as_json] == [False, True]


def test_resuming_a_stale_run_redoes_the_step_and_its_answer_replaces_the_partial_output(db_url):
    conversation_id, run_id = stale_streaming_run(db_url)

    with Ledger.open(db_url) as ledger:
        agent = agent_on(ledger, [InferenceResponse(content="Lisbon is lovely.")])
        result = agent.resume(run_id, stale_after=0)
        assert ledger.verify() == []

    assert (result.status, result.answer) == (AgentStatus.COMPLETED, "Lisbon is lovely.")
    assert conversation(db_url, conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", "Lisbon is lovely.", False),
    ]
    columns = run_columns(db_url, run_id)
    assert (columns["partial_output"], columns["step_count"]) == (None, 2)
    assert violations(db_url) == []


def test_a_process_killed_while_streaming_leaves_its_flushed_text_for_recovery(db_url, tmp_path):
    child = forked.run(play, {"url": db_url}, tmp_path, "streamer")
    assert child.returncode == -9, child.describe()
    assert child.result is not None
    conversation_id, run_id = child.result["conversation_id"], child.result["run_id"]
    assert run_columns(db_url, run_id)["partial_output"] == SHOWN[-1]

    dry = flat(ok("--db", db_url, "recover", "--stale-after", "0", "--dry-run"))
    assert f"(1 step, {len(SHOWN[-1])} characters shown kept)" in dry
    assert conversation(db_url, conversation_id) == [("user", QUESTION, False)]
    output = flat(ok("--db", db_url, "recover", "--stale-after", "0"))
    assert f"abandoned: run {run_id[:8]}" in output and "characters shown kept" in output
    with Ledger.open(db_url) as ledger:
        assert ledger.recover(stale_after=0) == []
        assert ledger.verify() == []
    assert conversation(db_url, conversation_id) == [
        ("user", QUESTION, False),
        ("assistant", SHOWN[-1], True),
    ]
    assert violations(db_url) == []


# --- verification ---------------------------------------------------------------------------------


def test_verify_finds_a_second_answer_beside_an_interrupted_one_and_a_stray_flag(db_url):
    with Ledger.open(db_url) as ledger:
        conversation_id, result = streamed_then_cancelled(ledger.recorder)
        done = agent_on(ledger, [InferenceResponse(content="Done.")]).run("again", conversation_id)
        with connect(db_url) as conn, conn.begin():
            conn.execute(
                text(
                    "INSERT INTO conversation_messages (id, conversation_id, section, seq, role, "
                    "content, run_id, created_at, in_context, interrupted) VALUES ('extra', :c, "
                    "'messages', 4, 'assistant', 'More.', :r, :t, :yes, :no)"
                ),
                {
                    "c": conversation_id,
                    "r": result.run_id,
                    "t": "2026-01-01 00:00:00",
                    "yes": True,
                    "no": False,
                },
            )
            conn.execute(
                text("UPDATE conversation_messages SET interrupted = :yes WHERE content = 'Done.'"),
                {"yes": True},
            )
        problems = ledger.verify()

    assert any(f"run {result.run_id} has 2 assistant messages" in p for p in problems), problems
    assert any(f"of run {done.run_id} (completed)" in p for p in problems), problems


def test_verify_finds_an_interrupted_step_that_is_not_its_interrupted_runs_last(db_url):
    with Ledger.open(db_url) as ledger:
        conversation_id, _ = streamed_then_cancelled(ledger.recorder)
        assert ledger.verify() == []
        done = agent_on(ledger, [InferenceResponse(content="Done.")]).run("again", conversation_id)
        with connect(db_url) as conn, conn.begin():
            conn.execute(  # a flag the ledger never writes, on a row left unsealed
                text(
                    "UPDATE step_executions SET interrupted = :yes, checksum = NULL "
                    "WHERE run_id = :r"
                ),
                {"yes": True, "r": done.run_id},
            )
        problems = ledger.verify()

    assert problems == [
        f"step 0 of run {done.run_id} (completed, 1 steps) is flagged interrupted: only the "
        "last step of an interrupted run is"
    ]


# --- the in-memory recorder -----------------------------------------------------------------------


def outcome(recorder: Recorder, conversation_id: str, result: RunResult) -> Any:
    messages = recorder.load_conversation(conversation_id).messages()
    return (
        [(m.role, m.content, m.interrupted, m.metadata) for m in messages],
        (result.status, result.stop_reason, result.answer, result.usage, result.state.step_count),
        [
            (
                e.step_index,
                e.step.interrupted,
                [(t.tool_call, t.result) for t in e.step.tool_executions],
            )
            for e in result.state.step_executions
        ],
        recorder.run_result(result.run_id).answer,
    )


def test_the_in_memory_recorder_interrupts_a_run_as_the_ledger_does(tmp_path):
    memory = InMemoryRecorder()
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        in_ledger = outcome(ledger.recorder, *streamed_then_cancelled(ledger.recorder))
    in_memory = outcome(memory, *streamed_then_cancelled(memory))

    assert in_memory == in_ledger
    assert in_memory[0][-1][:3] == ("assistant", SHOWN[-1], True)


def test_the_in_memory_recorder_keeps_partial_output_only_while_the_step_streams():
    memory = InMemoryRecorder()
    agent = agent_on(memory, tool_step_then_answer())
    state = begin(agent, memory)
    assert state.run_id is not None
    memory.record_partial_output(state.run_id, 0, "Looking")
    assert memory.partial_output(state.run_id) == (0, "Looking")
    step(agent, memory, state)
    assert memory.partial_output(state.run_id) is None
    with pytest.raises(UnstorableTextError):
        memory.record_partial_output(state.run_id, 0, "\x00")
    assert memory.partial_output(state.run_id) is None
    memory.interrupt_run(state.run_id, partial_text="")
    with pytest.raises(NotFoundError, match="no running run"):
        memory.record_partial_output(state.run_id, 1, "late")


# --- migrations -----------------------------------------------------------------------------------


def test_a_ledger_holding_an_interrupted_answer_is_not_downgraded_and_is_left_untouched(db_url):
    with Ledger.open(db_url) as ledger:
        streamed_then_cancelled(ledger.recorder)

    result = invoke("--db", db_url, "db", "downgrade", "0005")

    assert result.exit_code == 1
    assert "cannot downgrade below revision 0006" in result.output
    assert "1 interrupted answer(s), 1 cancelled run(s)" in flat(result.output)
    assert "Nothing was changed" in result.output
    with Ledger.open(db_url, migrate=False) as ledger:
        assert ledger.verify() == []
    with connect(db_url) as conn:
        assert scalar(conn, "SELECT version_num FROM agentledger_version") == head()

"""The statements the ledger compiles once and sends as SQL text are seen as SQLAlchemy's own:
logged by ``echo`` and the ``sqlalchemy.engine`` logger, their errors passed to
``handle_error``."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import event, exc

from agentledger import (
    AgentBuilder,
    AgentState,
    InferenceResponse,
    Ledger,
    ScriptedLLM,
    ToolCall,
    tool,
)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return "22C, sunny"


def run_once(ledger: Ledger) -> None:
    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})]
            ),
            InferenceResponse(content="Sunny and 22C."),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([get_weather]).with_ledger(ledger).build()
    agent.run("Weather in Paris?")


def test_the_engine_logger_shows_every_statement_of_a_run(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Ledger.open(db_url) as ledger:
        run_once(ledger)  # the ledger now keeps a connection open (SQLite)
        sent: list[str] = []
        event.listen(
            ledger.engine, "before_cursor_execute", lambda _c, _cur, sql, *_: sent.append(sql)
        )
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
        run_once(ledger)
    logged = [record.getMessage() for record in caplog.records]
    assert sent
    assert [sql for sql in sent if sql not in logged] == []
    # ... with their parameters: the run's user message among them
    assert any("Weather in Paris?" in m for m in logged if m not in sent)


def test_echo_shows_the_compiled_statements(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with Ledger.open(db_url) as ledger:
        run_once(ledger)
        ledger.engine.echo = True  # as create_engine(echo=True), on the ledger's engine
        try:
            run_once(ledger)
        finally:
            ledger.engine.echo = False
    logged = [record.getMessage() for record in caplog.records]
    assert any(message.startswith("INSERT INTO step_executions") for message in logged)
    assert any(  # the fence of a step: the lease's holder, read
        message.startswith("SELECT conversations.id") and "lease_holder" in message
        for message in logged
    )


def test_a_failing_compiled_statement_goes_through_handle_error(db_url: str) -> None:
    with Ledger.open(db_url) as ledger:
        recorder = ledger.recorder
        first = recorder.load_conversation(None)
        begun = first.model_copy(update={"run_id": "run-1", "status": "running"})
        recorder.begin_run(begun, user_message=None, agent_name="agent")
        seen: list[Any] = []
        event.listen(ledger.engine, "handle_error", seen.append)
        # A second run with the same id, on another conversation: its row cannot be inserted.
        again = AgentState.empty().model_copy(update={"run_id": "run-1", "status": "running"})
        with pytest.raises(exc.IntegrityError):
            recorder.begin_run(again, user_message=None, agent_name="agent")
    (context,) = seen
    assert context.statement.startswith("INSERT INTO agent_runs")
    assert not context.is_disconnect
    assert isinstance(context.sqlalchemy_exception, exc.IntegrityError)


def test_a_failing_statement_nobody_watches_raises_sqlalchemys_error_all_the_same(
    db_url: str,
) -> None:
    """With no logging and no listener, a statement goes on the driver's cursor; its error
    comes out as from ``execute``."""
    with Ledger.open(db_url) as ledger:
        recorder = ledger.recorder
        first = recorder.load_conversation(None)
        begun = first.model_copy(update={"run_id": "run-1", "status": "running"})
        recorder.begin_run(begun, user_message=None, agent_name="agent")
        again = AgentState.empty().model_copy(update={"run_id": "run-1", "status": "running"})
        with pytest.raises(exc.IntegrityError) as raised:
            recorder.begin_run(again, user_message=None, agent_name="agent")
    assert str(raised.value.statement).startswith("INSERT INTO agent_runs")

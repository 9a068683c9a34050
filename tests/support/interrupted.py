"""Runs driven through the recorder by hand, as the streaming loop drives them: begun, stepped,
their streamed text flushed as partial output; and a child process killed (SIGKILL) right
after a flush, for :mod:`test_interrupted`."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentledger import (
    Agent,
    AgentBuilder,
    AgentState,
    InferenceResponse,
    Message,
    ScriptedLLM,
    ToolCall,
    tool,
)
from agentledger._recording import Recorder
from agentledger.ledger import Ledger

QUESTION = "Tell me about Lisbon."
SHOWN = ["Lisbon is the capital", "Lisbon is the capital of Portugal, built on seven"]
"""What the caller was shown at two flushes of the streamed answer (each the whole text so far)."""
WEATHER = ToolCall(id="call_w", name="get_weather", arguments={"city": "Lisbon"})


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"22C and sunny in {city}"


def agent_on(
    recorder: Recorder | Ledger, responses: Sequence[InferenceResponse] | ScriptedLLM
) -> Agent:
    llm = responses if isinstance(responses, ScriptedLLM) else ScriptedLLM(list(responses))
    return (
        AgentBuilder()
        .with_llm(llm)
        .with_name("streamer")
        .with_tools([get_weather])
        .with_ledger(recorder)
        .build()
    )


def tool_step_then_answer(answer: str = "Lisbon is lovely.") -> list[InferenceResponse]:
    return [
        InferenceResponse(content="Looking it up.", tool_calls=(WEATHER,)),
        InferenceResponse(content=answer),
    ]


def begin(
    agent: Agent, recorder: Recorder, text: str = QUESTION, conversation_id: str | None = None
) -> AgentState:
    """A run begun on the conversation (a new one by default), as ``Agent.run`` begins it."""
    state = recorder.load_conversation(conversation_id)
    user = Message.user(text)
    state = agent.begin(state.with_messages(state.messages().append(user)))
    recorder.begin_run(state, user_message=user, agent_name=agent.name)
    return state


def step(agent: Agent, recorder: Recorder, state: AgentState) -> AgentState:
    """One step of the run, recorded."""
    after = agent.step(state)
    assert after.run_id is not None
    recorder.record_step(after.run_id, after.current_execution, after.filed_since(state))
    return after


def stream_shown(recorder: Recorder, state: AgentState, shown: Sequence[str] = SHOWN) -> None:
    """Flush each text of ``shown`` as the partial output of the run's next step."""
    assert state.run_id is not None
    for text in shown:
        recorder.record_partial_output(state.run_id, state.step_count, text)


def play(spec: dict[str, Any]) -> None:
    """In a child: begin a run, record a tool step, flush the partial output of the answer
    being streamed, write down the ids, then die by SIGKILL mid-stream."""
    ledger = Ledger.open(spec["url"])
    agent = agent_on(ledger, tool_step_then_answer())
    state = step(agent, ledger.recorder, begin(agent, ledger.recorder))
    stream_shown(ledger.recorder, state)
    ids = {"conversation_id": state.conversation_id, "run_id": state.run_id}
    Path(spec["result_file"]).write_text(json.dumps(ids))
    os.kill(os.getpid(), signal.SIGKILL)

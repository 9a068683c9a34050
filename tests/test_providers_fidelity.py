"""What goes back to a provider is what came from it: interleaved thinking in its order, failed
tool results flagged as errors. Checked on the bodies the loopback server received, through a
run recorded in a real ledger (SQLite and PostgreSQL) and resumed from it."""

from __future__ import annotations

import json
from typing import Any

from agentledger import AgentBuilder, AgentStatus, tool
from agentledger._core import FunctionTool
from agentledger.ledger import Ledger
from agentledger.llm import AnthropicMessages, RetryPolicy
from support.fake_provider import (
    FakeProvider,
    Reply,
    anthropic_error,
    anthropic_message,
    anthropic_text,
    anthropic_thinking,
    anthropic_tool_use,
)
from support.ledger import Database

NO_RETRIES = RetryPolicy(max_retries=0)


def _agent(llm: AnthropicMessages, ledger: Ledger, *tools: FunctionTool) -> Any:
    return AgentBuilder().with_llm(llm).with_tools(tools).with_ledger(ledger).build()


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def test_interleaved_thinking_goes_back_in_its_order_within_the_run_and_after_a_resume(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, weather_tool: FunctionTool
) -> None:
    t1 = anthropic_thinking("Paris first.", signature="sig-one==")
    t2 = anthropic_thinking("Then London.", signature="sig-two==")
    use1 = anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_1")
    use2 = anthropic_tool_use("get_weather", {"city": "London"}, "toolu_2")
    fake_provider.push(
        Reply(anthropic_message(t1, use1, t2, use2)),
        Reply(anthropic_error("Overloaded, try later"), status=400),
    )
    with AnthropicMessages(
        "claude-sonnet-4-5", base_url=fake_provider.url, retry=NO_RETRIES
    ) as llm:
        failed = _agent(llm, ledger, weather_tool).run("Weather in Paris and London?")
    assert failed.status is AgentStatus.FAILED

    fake_provider.push(Reply(anthropic_message(anthropic_text("22C in both."))))
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url) as llm:
        resumed = _agent(llm, ledger, weather_tool).resume(failed.run_id)
    assert resumed.answer == "22C in both."

    in_run, after_resume = fake_provider.bodies()[1:]
    for body in (in_run, after_resume):
        assert body["messages"][1] == {"role": "assistant", "content": [t1, use1, t2, use2]}
        results = body["messages"][2]["content"]
        assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2"]
    step = db.row(
        "SELECT metadata FROM step_executions WHERE run_id = :r AND step_index = 0",
        r=failed.run_id,
    )
    metadata = _json(step["metadata"])
    assert metadata["thinking_blocks"] == [t1, t2]
    assert metadata["block_order"] == ["thinking", "tool_use", "thinking", "tool_use"]


@tool
def flaky_lookup(city: str) -> str:
    """Look a city up (always fails)."""
    raise RuntimeError(f"no station in {city}")


def test_a_failed_tool_result_reaches_anthropic_flagged_is_error_also_after_a_resume(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, weather_tool: FunctionTool
) -> None:
    fake_provider.push(
        Reply(
            anthropic_message(
                anthropic_tool_use("flaky_lookup", {"city": "Oslo"}, "toolu_bad"),
                anthropic_tool_use("get_weather", {"city": "Paris"}, "toolu_good"),
            )
        ),
        Reply(anthropic_error("Overloaded, try later"), status=400),
    )
    tools = (flaky_lookup, weather_tool)
    with AnthropicMessages(
        "claude-sonnet-4-5", base_url=fake_provider.url, retry=NO_RETRIES
    ) as llm:
        failed = _agent(llm, ledger, *tools).run("Weather in Oslo and Paris?")
    fake_provider.push(Reply(anthropic_message(anthropic_text("Only Paris: 22C."))))
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url) as llm:
        _agent(llm, ledger, *tools).resume(failed.run_id)

    for body in fake_provider.bodies()[1:]:
        bad, good = body["messages"][2]["content"]
        assert bad["tool_use_id"] == "toolu_bad"
        assert bad["is_error"] is True
        assert "no station in Oslo" in bad["content"]
        assert good == {
            "type": "tool_result",
            "tool_use_id": "toolu_good",
            "content": "22C and sunny in Paris",
        }
    assert db.column(
        "SELECT is_error FROM tool_executions WHERE run_id = :r ORDER BY tool_call_id",
        r=failed.run_id,
    ) in ([True, False], [1, 0])

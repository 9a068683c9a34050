"""Tokens as the providers count them: OpenAI's cache writes, Anthropic's thinking tokens and its
one-hour cache writes (priced at twice the input price), read into ``Usage``, priced, and
recorded in the ledger's usage columns (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import date
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from agentledger import AgentBuilder, Message, Messages, Usage
from agentledger.cli import cli
from agentledger.ledger import Ledger, migrate
from agentledger.llm import (
    AnthropicMessages,
    InferenceRequest,
    OpenAIChat,
    Price,
    PriceTable,
)
from support.fake_provider import (
    FakeProvider,
    Reply,
    anthropic_message,
    anthropic_text,
    openai_completion,
)
from support.ledger import Database

REQUEST = InferenceRequest(messages=Messages.of(Message.user("Hi")))
PRICES = PriceTable(
    version="test",
    as_of=date(2030, 1, 1),
    models={
        "claude-sonnet-4-5": Price(input=2.0, output=10.0, cache_read=0.5, cache_write=2.5),
        "gpt-4o-mini": Price(input=2.0, output=10.0, cache_read=0.5),
    },
)
"""Round prices ($ per million tokens), so costs can be worked out by hand."""


def answering(body: dict[str, Any]) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, json=body))


def anthropic_with_usage(**usage: Any) -> dict[str, Any]:
    message = anthropic_message(anthropic_text("Hello"))
    message["usage"] = usage
    return message


def test_openai_reads_cache_write_tokens() -> None:
    body = openai_completion("Hello")
    body["usage"] = {
        "prompt_tokens": 1000,
        "completion_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 200, "cache_write_tokens": 300},
    }
    llm = OpenAIChat("gpt-4o-mini", base_url="http://llm.test", transport=answering(body))
    response = llm.complete(REQUEST)
    assert response.usage == Usage(
        input_tokens=1000, output_tokens=50, cache_read_tokens=200, cache_write_tokens=300
    )


def test_anthropic_reads_thinking_tokens_as_reasoning_tokens() -> None:
    body = anthropic_with_usage(
        input_tokens=10, output_tokens=120, output_tokens_details={"thinking_tokens": 90}
    )
    llm = AnthropicMessages(
        "claude-sonnet-4-5", base_url="http://llm.test", transport=answering(body)
    )
    assert llm.complete(REQUEST).usage.reasoning_tokens == 90


ONE_HOUR_USAGE = {
    "input_tokens": 100,
    "output_tokens": 1000,
    "cache_creation_input_tokens": 3000,
    "cache_read_input_tokens": 4000,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
}
ONE_HOUR_COST = (100 * 2.0 + 4000 * 0.5 + 1000 * 2.5 + 2000 * 4.0 + 1000 * 10.0) / 1_000_000
"""Uncached input at 2.0, reads at 0.5, five-minute writes at 2.5, one-hour writes at twice
the input price (4.0), output at 10.0."""


def test_anthropic_one_hour_cache_writes_are_counted_and_priced_at_twice_the_input() -> None:
    body = anthropic_with_usage(**ONE_HOUR_USAGE)
    llm = AnthropicMessages(
        "claude-sonnet-4-5", base_url="http://llm.test", transport=answering(body), prices=PRICES
    )
    response = llm.complete(REQUEST)
    assert response.usage == Usage(
        input_tokens=7100,
        output_tokens=1000,
        cache_read_tokens=4000,
        cache_write_tokens=3000,
        cache_write_1h_tokens=2000,
    )
    assert response.cost_usd == pytest.approx(ONE_HOUR_COST)


def test_a_price_may_name_its_own_one_hour_write_price() -> None:
    usage = Usage(input_tokens=1000, cache_write_tokens=1000, cache_write_1h_tokens=400)
    price = Price(input=2.0, output=10.0, cache_write=2.5, cache_write_1h=3.0)
    assert price.cost(usage) == pytest.approx((600 * 2.5 + 400 * 3.0) / 1_000_000)
    assert (usage + usage).cache_write_1h_tokens == 800


def test_one_hour_cache_writes_are_recorded_in_the_ledger(
    fake_provider: FakeProvider, ledger: Ledger, db: Database
) -> None:
    body = anthropic_with_usage(**ONE_HOUR_USAGE)
    fake_provider.push(Reply(body))
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url, prices=PRICES) as llm:
        agent = AgentBuilder().with_llm(llm).with_ledger(ledger).build()
        result = agent.run("Hi")

    step = db.row(
        "SELECT cache_write_tokens, cache_write_1h_tokens, cost_usd FROM step_executions "
        "WHERE run_id = :r",
        r=result.run_id,
    )
    assert step["cache_write_tokens"] == 3000
    assert step["cache_write_1h_tokens"] == 2000
    assert step["cost_usd"] == pytest.approx(ONE_HOUR_COST)
    run = db.row(
        "SELECT cache_write_tokens, cache_write_1h_tokens FROM agent_runs WHERE id = :r",
        r=result.run_id,
    )
    assert run == {"cache_write_tokens": 3000, "cache_write_1h_tokens": 2000}
    assert ledger.run(result.run_id).usage.cache_write_1h_tokens == 2000
    assert ledger.steps(result.run_id)[0].step.usage.cache_write_1h_tokens == 2000


def test_a_ledger_holding_one_hour_cache_writes_is_not_downgraded_below_0007(
    fake_provider: FakeProvider, ledger: Ledger, db: Database, db_url: str
) -> None:
    fake_provider.push(Reply(anthropic_with_usage(**ONE_HOUR_USAGE)))
    with AnthropicMessages("claude-sonnet-4-5", base_url=fake_provider.url, prices=PRICES) as llm:
        AgentBuilder().with_llm(llm).with_ledger(ledger).build().run("Hi")

    result = CliRunner().invoke(cli, ["--db", db_url, "db", "downgrade", "0006"])

    assert result.exit_code == 1
    assert "cannot downgrade below revision 0007" in result.output
    assert "1 in agent_runs, 1 in step_executions" in result.output
    assert "Nothing was changed" in result.output
    assert db.scalar("SELECT version_num FROM agentledger_version") == migrate.head()
    assert db.scalar("SELECT SUM(cache_write_1h_tokens) FROM step_executions") == 2000

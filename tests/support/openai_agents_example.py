import asyncio
import sqlite3
from pathlib import Path

import httpx
from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from openai import AsyncOpenAI

from agentledger import Ledger
from agentledger.integrations.openai_agents import LedgerSession

# A stand-in for the network, so this example runs offline: httpx's MockTransport answers as
# the Chat Completions API does. Against the real service, leave `http_client` out.
answers = [
    {
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"content": "Sunny and 22C."},
    {"content": "Still sunny."},
]


def chat_completions(request: httpx.Request) -> httpx.Response:
    message = {"role": "assistant", **answers.pop(0)}
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
        },
    )


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return "22C, sunny"


client = AsyncOpenAI(
    api_key="sk-example",
    http_client=httpx.AsyncClient(transport=httpx.MockTransport(chat_completions)),
)
agent = Agent(
    name="weather",
    tools=[get_weather],
    model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
)
quiet = RunConfig(tracing_disabled=True)  # this example sends no traces to OpenAI

Path("agents-sdk.db").unlink(missing_ok=True)  # this example starts from an empty ledger
ledger = Ledger.open("agents-sdk.db")  # or "postgresql://..."
session = LedgerSession("user-42", ledger)  # instead of SQLiteSession("user-42", ...)


async def two_turns() -> list[str]:
    first = await Runner.run(
        agent, "Weather in Paris?", session=session, hooks=session.hooks, run_config=quiet
    )
    second = await Runner.run(
        agent, "And now?", session=session, hooks=session.hooks, run_config=quiet
    )
    return [first.final_output, second.final_output]


assert asyncio.run(two_turns()) == ["Sunny and 22C.", "Still sunny."]

# What the next turn will be sent: the conversation, questions and answers only.
items = asyncio.run(session.get_items())
assert [item["role"] for item in items] == ["user", "assistant", "user", "assistant"]
ledger.close()

# In SQL: the session's id is its conversation's; the trace is on the runs' steps and tools.
db = sqlite3.connect("agents-sdk.db")
assert db.execute(
    "SELECT role, content FROM conversation_messages WHERE conversation_id = 'user-42'"
).fetchall() == [
    ("user", "Weather in Paris?"),
    ("assistant", "Sunny and 22C."),
    ("user", "And now?"),
    ("assistant", "Still sunny."),
]
assert db.execute("SELECT tool_name, result FROM tool_executions").fetchall() == [
    ("get_weather", "22C, sunny")
]
assert db.execute("SELECT sum(input_tokens) FROM step_executions").fetchone() == (3000,)
db.close()

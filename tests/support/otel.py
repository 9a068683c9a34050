"""A run with tools and a subagent, for the OpenTelemetry tests: the lead agent calls a tool
and spawns a researcher, which calls a tool of its own, with scripted models whose usage and
finish reasons differ from step to step."""

from __future__ import annotations

from typing import Any

from agentledger import (
    AgentBuilder,
    InferenceResponse,
    ScriptedLLM,
    SubagentSpec,
    ToolCall,
    Usage,
    tool,
)
from agentledger.ledger import Ledger

QUESTION = "What is the weather in Paris, and what does the archive say about it?"
TASK = "Look up Paris in the archive."
CHILD_ANSWER = "The archive says Paris is the capital of France."
ANSWER = "It is sunny in Paris, the capital of France."


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the archive."""
    return f"{topic}: the capital of France"


@tool
def broken(city: str) -> str:
    """A tool that fails."""
    raise ValueError(f"no station in {city}")


def response(
    content: str = "",
    *calls: ToolCall,
    tokens: tuple[int, int, int, int] = (100, 20, 0, 0),
    model: str = "scripted-1",
) -> InferenceResponse:
    inputs, outputs, cache_read, cache_write = tokens
    return InferenceResponse(
        content=content,
        tool_calls=calls,
        usage=Usage(
            input_tokens=inputs,
            output_tokens=outputs,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        ),
        model=model,
        finish_reason="tool_calls" if calls else "stop",
    )


class OpenAIScripted(ScriptedLLM):
    """A scripted model that says it is OpenAI's, as ``OpenAIChat`` does."""

    provider = "OpenAI"


LOOKUP = ToolCall(id="c1", name="lookup", arguments={"topic": "Paris"})


def researcher() -> SubagentSpec:
    child = ScriptedLLM(
        [
            response(
                "",
                ToolCall(id="c1", name="lookup", arguments={"topic": "Paris"}),
                model="scripted-mini",
            ),
            response(CHILD_ANSWER, tokens=(80, 10, 40, 0), model="scripted-mini"),
        ],
        model="scripted-mini",
    )
    return SubagentSpec(
        name="researcher",
        description="Looks topics up in the archive.",
        system_prompt="You research.",
        tools=(lookup,),
        llm=child,
    )


def lead_model() -> OpenAIScripted:
    return OpenAIScripted(
        [
            response(
                "",
                ToolCall(id="p1", name="weather", arguments={"city": "Paris"}),
                ToolCall(
                    id="p2",
                    name="spawn_subagent",
                    arguments={"subagent": "researcher", "task": TASK},
                ),
                tokens=(120, 30, 0, 64),
            ),
            response(ANSWER, tokens=(200, 25, 100, 0)),
        ],
        model="scripted-1",
    )


def lead(ledger: Ledger | None = None) -> AgentBuilder:
    """The lead agent (named ``lead``), recorded in ``ledger`` when one is given."""
    builder = (
        AgentBuilder()
        .with_name("lead")
        .with_llm(lead_model())
        .with_tools([weather])
        .with_subagents([researcher()])
    )
    return builder.with_ledger(ledger) if ledger is not None else builder


def run_span_attributes(name: str, row: dict[str, Any]) -> dict[str, Any]:
    """The attributes of the run span of ``name`` (``lead`` or its subagent) whose
    ``agent_runs`` row is ``row``, live or exported alike."""
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.conversation.id": row["conversation_id"],
        "gen_ai.response.model": row["model"],
        "gen_ai.usage.input_tokens": row["input_tokens"],
        "gen_ai.usage.output_tokens": row["output_tokens"],
        "gen_ai.usage.cache_read.input_tokens": row["cache_read_tokens"],
        "gen_ai.usage.cache_creation.input_tokens": row["cache_write_tokens"],
        "agentledger.run_id": row["id"],
        "agentledger.root_run_id": row["root_run_id"],
        "agentledger.depth": 0 if name == "lead" else 1,
        "agentledger.status": row["status"],
        "agentledger.stop_reason": row["stop_reason"],
        "agentledger.step_count": row["step_count"],
        **({"agentledger.parent_run_id": row["parent_run_id"]} if name != "lead" else {}),
    }


def runs_by_agent(db: Any) -> dict[str, dict[str, Any]]:
    """The ``agent_runs`` rows of ``db`` (a test database), by agent name."""
    return {r["agent_name"]: r for r in db.rows("SELECT * FROM agent_runs")}

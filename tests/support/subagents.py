"""Helpers for ``test_subagents.py``: one scripted model for a whole tree of agents, the
responses its scripts are made of, a few tools, and SQL straight on the ledger's database
(never through the library)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, create_engine, text

from agentledger import Message, Role, ToolCall, Usage, tool
from agentledger._loop import DEFAULT_FINAL_INSTRUCTION
from agentledger.llm import InferenceRequest, InferenceResponse

Item = InferenceResponse | Callable[[InferenceRequest], InferenceResponse]

SPAWN = "spawn_subagent"
FINAL_PREFIX = DEFAULT_FINAL_INSTRUCTION.split("{", 1)[0]
TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def prompt(name: str) -> str:
    """The system prompt of the agent ``name``: what the router tells agents apart by."""
    return f"You are the {name} agent."


# --- responses --------------------------------------------------------------------------------


def usage(input_tokens: int = 0, output_tokens: int = 0, **more: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, **more)


def spawn(
    *calls: tuple[str, str], usage: Usage | None = None, cost_usd: float | None = None
) -> InferenceResponse:
    """A response calling ``spawn_subagent`` once per ``(subagent, task)``."""
    return InferenceResponse(
        tool_calls=[
            ToolCall(id=f"spawn_{n}", name=SPAWN, arguments={"subagent": who, "task": task})
            for n, (who, task) in enumerate(calls)
        ],
        usage=usage or Usage(),
        cost_usd=cost_usd,
        finish_reason="tool_calls",
    )


def call(
    name: str, call_id: str = "call_0", *, usage: Usage | None = None, **arguments: Any
) -> InferenceResponse:
    """A response calling one tool."""
    return InferenceResponse(
        tool_calls=[ToolCall(id=call_id, name=name, arguments=arguments)],
        usage=usage or Usage(),
        finish_reason="tool_calls",
    )


def answer(
    content: str, *, usage: Usage | None = None, cost_usd: float | None = None
) -> InferenceResponse:
    return InferenceResponse(
        content=content, usage=usage or Usage(), cost_usd=cost_usd, finish_reason="stop"
    )


def fails(error: Exception) -> Callable[[InferenceRequest], InferenceResponse]:
    def fail(_request: InferenceRequest) -> InferenceResponse:
        raise error

    return fail


# --- reading requests ---------------------------------------------------------------------------


def is_final_request(request: InferenceRequest) -> bool:
    """The final-response step: no tools offered, the limit instruction last."""
    last = request.messages.last()
    return (
        not request.tools
        and last is not None
        and last.role is Role.USER
        and last.content.startswith(FINAL_PREFIX)
    )


def step_of(request: InferenceRequest) -> int:
    """The index of the step asking: one per tool-calling assistant message of the run so far
    (the conversation holds no tool traces, so every such message is this run's)."""
    return sum(1 for m in request.messages if m.tool_calls)


def task_of(request: InferenceRequest) -> str:
    """The first user message: a subagent's task."""
    return next(m.content for m in request.messages if m.role is Role.USER)


def tool_messages(request: InferenceRequest) -> list[Message]:
    return [m for m in request.messages if m.role is Role.TOOL]


@dataclass(frozen=True)
class Script:
    """An agent's responses step by step: the n-th step of a run gets ``steps[n]``; the
    final-response step (after a limit) gets ``final``."""

    steps: Sequence[Item]
    final: Item = field(default_factory=lambda: answer("FINAL: what I have so far"))

    def __call__(self, request: InferenceRequest) -> InferenceResponse:
        if is_final_request(request):
            item = self.final
        else:
            index = step_of(request)
            if index >= len(self.steps):
                raise AssertionError(f"the script has no step {index}")
            item = self.steps[index]
        return item if isinstance(item, InferenceResponse) else item(request)


@dataclass(frozen=True)
class Exchange:
    agent: str
    request: InferenceRequest
    response: InferenceResponse | None


class Router:
    """One model for a whole tree of agents: a request goes to the script of the agent whose
    system prompt it opens with. Every exchange is kept, in the order they happened. Safe to
    share between threads (parallel spawns)."""

    def __init__(self, scripts: dict[str, Callable[[InferenceRequest], InferenceResponse]]):
        self.scripts = {prompt(name): (name, script) for name, script in scripts.items()}
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    def complete(self, request: InferenceRequest) -> InferenceResponse:
        system = request.system_prompt()
        if system not in self.scripts:
            raise AssertionError(f"no script for the system prompt {system!r}")
        name, script = self.scripts[system]
        try:
            response = script(request)
        except BaseException:
            with self._lock:
                self.exchanges.append(Exchange(name, request, None))
            raise
        with self._lock:
            self.exchanges.append(Exchange(name, request, response))
        return response

    def requests(self, agent: str) -> list[InferenceRequest]:
        with self._lock:
            return [e.request for e in self.exchanges if e.agent == agent]

    def responses(self, agent: str) -> list[InferenceResponse]:
        with self._lock:
            return [e.response for e in self.exchanges if e.agent == agent and e.response]


# --- tools ------------------------------------------------------------------------------------

SECRET = "SECRET-LOOKUP-RESULT"


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the archive."""
    return f"{SECRET} about {topic}"


@tool
def nap(seconds: float) -> str:
    """Wait, then say so."""
    time.sleep(seconds)
    return f"slept {seconds}s"


# --- SQL --------------------------------------------------------------------------------------


def sqlalchemy_url(url: str) -> str:
    """The URL SQLAlchemy needs: psycopg 3 named explicitly for PostgreSQL."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


class Database:
    """SQL on the ledger's database through an engine of its own."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(sqlalchemy_url(url))

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(text(sql), params).mappings()]

    def row(self, sql: str, **params: Any) -> dict[str, Any]:
        rows = self.rows(sql, **params)
        assert len(rows) == 1, f"expected one row from {sql!r}, got {rows}"
        return rows[0]

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def run(self, run_id: str) -> dict[str, Any]:
        return _decoded(self.row("SELECT * FROM agent_runs WHERE id = :r", r=run_id))

    def runs(self) -> list[dict[str, Any]]:
        rows = self.rows("SELECT * FROM agent_runs ORDER BY depth, started_at, id")
        return [_decoded(row) for row in rows]

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        return self.row("SELECT * FROM conversations WHERE id = :c", c=conversation_id)

    def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT * FROM conversation_messages WHERE conversation_id = :c ORDER BY seq",
            c=conversation_id,
        )

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT * FROM step_executions WHERE run_id = :r ORDER BY step_index", r=run_id
        )

    def tool_rows(self, run_id: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT * FROM tool_executions WHERE run_id = :r ORDER BY step_index, position",
            r=run_id,
        )

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A run row with its JSON columns decoded (SQLite hands raw SQL the JSON text)."""
    for column in ("budget", "metadata"):
        if isinstance(row[column], str):
            row[column] = json.loads(row[column])
    return row

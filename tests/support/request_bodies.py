"""Every request body the HTTP providers send, captured through ``httpx.MockTransport``: each
form of request (system prompt, tools plain and strict, a history of tool calls and results,
kept thinking and reasoning, every setting that reaches the body, prompt caching, interrupted
answers) sent whole and streamed, and the bodies of real runs of an ``Agent`` on a ledger
(several steps of tool calls, a failing tool, a second turn, a run stopped by its step limit
and asked for a final answer, a ReAct run), so what the loop itself sends is in it too.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from agentledger import (
    AgentBuilder,
    Message,
    Messages,
    ModelSettings,
    ReActDriver,
    ToolCall,
    ToolSchema,
    tool,
)
from agentledger._recording import interrupted_answer
from agentledger.ledger import Ledger
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceRequest,
    OpenAIChat,
    OpenAIResponses,
)
from support.fake_provider import (
    anthropic_message,
    anthropic_stream,
    anthropic_text,
    anthropic_thinking,
    anthropic_tool_use,
    openai_completion,
    openai_stream,
    openai_tool_call,
    responses_function_call,
    responses_reasoning,
    responses_response,
    responses_stream,
    responses_text,
)
from support.tool_schemas import ADD, WEATHER

PARAM_TYPES = {
    ("OpenAIChat", False): "openai.types.chat.completion_create_params."
    "CompletionCreateParamsNonStreaming",
    ("OpenAIChat", True): "openai.types.chat.completion_create_params."
    "CompletionCreateParamsStreaming",
    ("OpenAIResponses", False): "openai.types.responses.response_create_params."
    "ResponseCreateParamsNonStreaming",
    ("OpenAIResponses", True): "openai.types.responses.response_create_params."
    "ResponseCreateParamsStreaming",
    ("AnthropicMessages", False): "anthropic.types.message_create_params."
    "MessageCreateParamsNonStreaming",
    ("AnthropicMessages", True): "anthropic.types.message_create_params."
    "MessageCreateParamsStreaming",
}
"""The SDK param type each provider's body is checked against, whole and streamed."""

PROVIDERS = ("OpenAIChat", "OpenAIResponses", "AnthropicMessages")


@dataclass(frozen=True)
class Body:
    """One request body a provider sent, and what made it."""

    provider: str
    case: str
    streaming: bool
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.provider}: {self.case} ({'streamed' if self.streaming else 'whole'})"

    @property
    def param_type(self) -> str:
        return PARAM_TYPES[self.provider, self.streaming]


# -- the answers a scripted server gives, in each wire format -----------------------------------


@dataclass(frozen=True)
class Answer:
    """What the model answers to one request: text, tool calls, and the reasoning a reasoning
    model returns with them (thinking blocks, reasoning items)."""

    text: str = ""
    calls: Sequence[tuple[str, dict[str, Any]]] = ()
    reasoning: bool = False


_ids = itertools.count(1)
DONE = Answer("Done.")


def _openai(answer: Answer) -> dict[str, Any]:
    calls = [openai_tool_call(n, a, f"call_{next(_ids)}") for n, a in answer.calls]
    return openai_completion(answer.text or None, calls)


def _responses(answer: Answer) -> dict[str, Any]:
    items = [responses_reasoning("Looking it up.")] if answer.reasoning else []
    items += [responses_text(answer.text)] if answer.text else []
    items += [responses_function_call(n, a, f"call_{next(_ids)}") for n, a in answer.calls]
    return responses_response(*items)


def _anthropic(answer: Answer) -> dict[str, Any]:
    """With reasoning, thinking first and again before each further tool call (interleaved
    thinking), and a redacted block."""
    blocks = [anthropic_thinking("Let me see.")] if answer.reasoning else []
    blocks += [anthropic_text(answer.text)] if answer.text else []
    for number, (name, arguments) in enumerate(answer.calls):
        if answer.reasoning and number:
            blocks.append(anthropic_thinking(f"Now {name} again."))
        blocks.append(anthropic_tool_use(name, arguments, f"toolu_{next(_ids)}"))
    if answer.reasoning:
        blocks.append({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
    return anthropic_message(*blocks)


@dataclass(frozen=True)
class Wire:
    """How to make one provider and speak its wire format."""

    cls: type[HttpProvider]
    model: str
    whole: Callable[[Answer], dict[str, Any]]
    streamed: Callable[[dict[str, Any]], list[str]]


WIRES = {
    "OpenAIChat": Wire(OpenAIChat, "gpt-4o-mini", _openai, openai_stream),
    "OpenAIResponses": Wire(OpenAIResponses, "gpt-5-mini", _responses, responses_stream),
    "AnthropicMessages": Wire(AnthropicMessages, "claude-sonnet-4-5", _anthropic, anthropic_stream),
}


class Server:
    """An ``httpx.MockTransport`` handler that keeps every request body and answers each with
    the next scripted answer (``DONE`` once the script is out), streamed when asked so."""

    def __init__(self, wire: Wire, script: Sequence[Answer] = ()) -> None:
        self.wire = wire
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        answer = self.wire.whole(self.script.pop(0) if self.script else DONE)
        if not body.get("stream"):
            return httpx.Response(200, json=answer)
        events = "".join(self.wire.streamed(answer))
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})


def provider(name: str, server: Server, **options: Any) -> HttpProvider:
    options.setdefault("base_url", "http://llm.test/v1")
    transport = httpx.MockTransport(server)
    return WIRES[name].cls(WIRES[name].model, transport=transport, **options)


# -- requests, one per form a body can take ----------------------------------------------------


class Forecast(BaseModel):
    city: str
    celsius: float
    summary: str | None = None


FORECAST_SCHEMA = {
    "title": "Forecast",
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}
STRICT_ADD = ADD.model_copy(update={"strict": True})
TOOLS = (WEATHER, STRICT_ADD)
SYSTEM = Message.system("You answer questions about the weather.")
QUESTION = Message.user("How warm are Paris and London together?")
PARIS = ToolCall(id="call_paris", name="get_weather", arguments={"city": "Paris"})
LONDON = ToolCall(id="call_london", name="get_weather", arguments={"city": "London"})

THINKING_METADATA: dict[str, Any] = {
    "thinking_blocks": [
        {"type": "thinking", "thinking": "Paris first.", "signature": "EqQBCgIYAhIM1"},
        {"type": "thinking", "thinking": "Then London.", "signature": "EqQBCgIYAhIM2"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "thinking", "thinking": "Cut sh"},
    ],
    "block_order": [
        "thinking",
        "tool_use",
        "thinking",
        "tool_use",
        "redacted_thinking",
        "thinking",
    ],
}
"""An assistant message's thinking as ``AnthropicMessages`` keeps it: interleaved with its
tool calls, a redacted block, and a block a cut stream left without its signature (which is
not sent back)."""
REASONING_METADATA: dict[str, Any] = {
    "reasoning_items": [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Paris, then London."}],
            "encrypted_content": "gAAAAABo-enc",
        },
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": None},
    ]
}
"""An assistant message's reasoning items as ``OpenAIResponses`` keeps them (the second one,
cut before it was whole, is not sent back)."""


def _history() -> list[Message]:
    """A user question, an answer with two tool calls (thinking and reasoning kept as each
    provider keeps them), one result that failed, the answer, and a follow-up question."""
    metadata = THINKING_METADATA | REASONING_METADATA
    calls = Message(
        role="assistant", content="Looking both up.", tool_calls=(PARIS, LONDON), metadata=metadata
    )
    failed = Message.tool("Error: the weather service is down", tool_call_id="call_london")
    failed = failed.model_copy(update={"metadata": {"is_error": True}, "name": "get_weather"})
    asker = Message.user("And tomorrow?").model_copy(update={"name": "alice"})
    return [
        QUESTION,
        calls,
        Message.tool("22C", tool_call_id="call_paris", name="get_weather"),
        failed,
        Message.assistant("Paris has 22C; London's weather is unavailable."),
        asker,
    ]


def _interrupted() -> list[Message]:
    """The answer a cancelled run committed (the text shown, flagged interrupted; its tool
    calls are in the run's trace, not here), sent as a plain answer; a cancel before any text
    commits none."""
    shown = interrupted_answer("Paris has 22")
    assert shown is not None and interrupted_answer("") is None
    return [QUESTION, shown, Message.user("Go on.")]


def _request(*messages: Message, tools: Sequence[ToolSchema] = (), **settings: Any) -> Any:
    return InferenceRequest(
        messages=Messages.of(*messages), tools=tuple(tools), settings=ModelSettings(**settings)
    )


SAMPLING = {"temperature": 0.2, "max_output_tokens": 300}
"""Newer Claude models take ``temperature`` or ``top_p``, not both: ``top_p`` has a case of its
own."""


def requests(name: str) -> dict[str, InferenceRequest]:
    """The requests every provider is sent, by case name (what one provider cannot take is
    left out of its cases: the Responses API has no stop sequences)."""
    cases = {
        "user text": _request(QUESTION),
        "system prompt": _request(SYSTEM, QUESTION),
        "tools, plain and strict": _request(SYSTEM, QUESTION, tools=TOOLS),
        "history of tool calls and results": _request(SYSTEM, *_history(), tools=TOOLS),
        "history without tools offered": _request(SYSTEM, *_history()),
        "interrupted answers": _request(SYSTEM, *_interrupted(), tools=TOOLS),
        "final instruction after tool results": _request(
            SYSTEM, *_history()[:4], Message.user("Answer now, without tools.")
        ),
        "sampling settings": _request(SYSTEM, QUESTION, **SAMPLING),
        "top_p": _request(QUESTION, top_p=0.9),
        "stop sequences": _request(QUESTION, stop_sequences=("END", "STOP")),
        "timeout": _request(QUESTION, timeout=5.0),
        "response format: a pydantic model": _request(QUESTION, response_format=Forecast),
        "response format: a JSON schema": _request(QUESTION, response_format=FORECAST_SCHEMA),
        "response format with tools": _request(
            QUESTION, tools=TOOLS, response_format=Forecast, tool_choice="auto"
        ),
    }
    for choice in ("auto", "required", "none", "get_weather"):
        for parallel in (None, False, True):
            cases[f"tool_choice={choice}, parallel_tool_calls={parallel}"] = _request(
                QUESTION, tools=TOOLS, tool_choice=choice, parallel_tool_calls=parallel
            )
    cases["parallel_tool_calls=False alone"] = _request(
        QUESTION, tools=TOOLS, parallel_tool_calls=False
    )
    cases["settings without tools"] = _request(QUESTION, tool_choice="required")
    if name == "OpenAIChat":
        cases["reasoning effort and a seed (extra)"] = _request(
            QUESTION, extra={"reasoning_effort": "low", "seed": 7}
        )
    if name == "OpenAIResponses":
        del cases["stop sequences"]
        cases["reasoning summaries asked (extra)"] = _request(
            QUESTION, extra={"reasoning": {"effort": "low", "summary": "auto"}}
        )
    if name == "AnthropicMessages":
        cases["thinking enabled (extra)"] = _request(
            SYSTEM,
            *_history(),
            tools=TOOLS,
            max_output_tokens=4096,
            extra={"thinking": {"type": "enabled", "budget_tokens": 2048}},
        )
    return cases


def _options(name: str) -> dict[str, dict[str, Any]]:
    """The provider's options that change its bodies, by label."""
    if name == "AnthropicMessages":
        return {
            "cache 5m": {"cache": "5m"},
            "cache 1h": {"cache": "1h"},
            "no cache": {"cache": None},
        }
    if name == "OpenAIChat":
        return {
            "at OpenAI": {"base_url": None, "api_key": "sk-test"},
            "local server": {"base_url": "http://localhost:11434/v1"},
        }
    return {"": {}}


def request_bodies(name: str) -> Iterator[Body]:
    """The bodies ``name`` sends for each request, with each of its options, whole and
    streamed."""
    for label, options in _options(name).items():
        server = Server(WIRES[name])
        with provider(name, server, **options) as llm:
            for case, request in requests(name).items():
                llm.complete(request)
                for _ in llm.stream(request):
                    pass
                whole, streamed = server.bodies[-2:]
                title = f"{case} [{label}]" if label else case
                yield Body(name, title, False, whole)
                yield Body(name, title, True, streamed)


# -- bodies of real runs -----------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    if city == "Atlantis":
        raise LookupError(f"no weather station in {city}")
    return f"22C in {city}"


@tool(strict=True)
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


RUN_SCRIPT = (
    Answer(
        "Looking it up.",
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Atlantis"})],
        reasoning=True,
    ),
    Answer(calls=[("add", {"a": 22, "b": 22})], reasoning=True),
    Answer("Paris has 22C; Atlantis has no station."),
    Answer(calls=[("get_weather", {"city": "London"})]),
    Answer("London has 22C too."),
    Answer("Paris and London have 22C each; Atlantis has no station."),
    Answer("Still 22C."),
)
"""A first run of three steps (two parallel calls, one failing; a strict tool), a second turn
of two steps on the same conversation, the summary of its oldest messages (``compact``), and
a third turn that starts from that summary."""

REACT_SCRIPT = (
    Answer(
        json.dumps(
            {"thought": "Look.", "action": {"tool": "get_weather", "arguments": {"city": "Paris"}}}
        )
    ),
    Answer(json.dumps({"thought": "Known.", "final_answer": "22C in Paris."})),
)


def run_bodies(name: str, ledger_path: Path) -> Iterator[Body]:
    """What the loop sends through ``name``: a tool-using conversation of two turns run whole
    and streamed, a run stopped by its step limit that asks for a final answer without tools,
    and a ReAct run (no tools offered; observations as user messages)."""
    with Ledger.open(f"sqlite:///{ledger_path}") as ledger:
        for streaming in (False, True):
            for case, bodies in _runs(name, ledger, streaming):
                for number, body in enumerate(bodies):
                    # A ReAct step is never streamed: its text is a decision, not an answer.
                    yield Body(name, f"{case}, request {number}", body.get("stream") is True, body)


def _runs(name: str, ledger: Ledger, streaming: bool) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    def agent(server: Server, **options: Any) -> Any:
        builder = (
            AgentBuilder()
            .with_llm(provider(name, server))
            .with_tools([get_weather, add])
            .with_system_prompt("You answer questions about the weather.")
            .with_model_settings(ModelSettings(temperature=0.2, max_output_tokens=1024))
            .with_ledger(ledger)
        )
        for method, argument in options.items():
            builder = getattr(builder, method)(argument)
        return builder.build()

    def run(built: Any, text: str, conversation_id: str | None = None) -> Any:
        if not streaming:
            return built.run(text, conversation_id)
        stream = built.stream(text, conversation_id)
        for _ in stream:
            pass
        return stream.result

    server = Server(WIRES[name], RUN_SCRIPT)
    tools_agent = agent(server, with_context_budget=100_000)
    first = run(tools_agent, "How warm are Paris and Atlantis together?")
    run(tools_agent, "And London?", first.conversation_id)
    assert tools_agent.compact(first.conversation_id, force=True) is not None
    run(tools_agent, "And now?", first.conversation_id)
    yield "a run of tool calls, a second turn, a summary, a third turn", server.bodies

    server = Server(WIRES[name], [Answer(calls=[("get_weather", {"city": "Paris"})])] * 2)
    run(agent(server, with_max_steps=2), "Weather in Paris?")
    yield "a run stopped by its step limit, asked for a final answer", server.bodies

    react = Server(WIRES[name], REACT_SCRIPT)
    run(agent(react, with_driver=ReActDriver(provider(name, react))), "Weather in Paris?")
    yield "a ReAct run", react.bodies


def all_bodies(ledger_dir: Path) -> list[Body]:
    """The whole catalog, every provider."""
    found: list[Body] = []
    for name in PROVIDERS:
        found += request_bodies(name)
        found += run_bodies(name, ledger_dir / f"{name}.db")
    return found

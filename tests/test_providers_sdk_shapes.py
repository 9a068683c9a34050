"""Every response shape the official SDKs' types describe, read by the HTTP providers: the
responses are built with ``anthropic`` and ``openai``'s own pydantic models (imported for their
types only, nothing is sent with them), dumped as the APIs send them, served through httpx's
MockTransport, and the parsed response checked field by field; streamed as the SDKs' own
stream event models, they assemble into the same response, their text deltas joined being
its content. Anthropic's ``pause_turn`` is continued within the call, and server tool blocks
go back as they came."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import pytest
from anthropic import types as anthropic_types
from openai.types import chat as chat_types
from openai.types import responses as responses_types
from openai.types.completion_usage import (
    CompletionTokensDetails,
    CompletionUsage,
    PromptTokensDetails,
)
from pydantic import BaseModel

from agentledger import Message, Messages, Role, ToolCall, Usage
from agentledger.errors import ProviderResponseError, ProviderStreamCutError
from agentledger.llm import (
    AnthropicMessages,
    HttpProvider,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    OpenAIChat,
    OpenAIResponses,
    RetryPolicy,
)

A = anthropic_types
R = responses_types
ANTHROPIC_MODEL = "claude-sonnet-4-5-20250929"
OPENAI_MODEL = "gpt-5-mini-2025-08-07"
Answer = BaseModel | dict[str, Any] | str


# -- the network seam ------------------------------------------------------------------------


class Wire:
    """Answers each request with the next scripted answer (a JSON body, or the text of a
    stream of server-sent events) and keeps the request bodies."""

    def __init__(self, *answers: Answer) -> None:
        self.answers: deque[Answer] = deque(answers)
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        answer = self.answers.popleft()
        if isinstance(answer, str):
            return httpx.Response(200, text=answer, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=wire(answer))


def wire(answer: BaseModel | dict[str, Any], *, exclude_unset: bool = True) -> dict[str, Any]:
    """A body as the API sends it: the SDK model dumped to JSON."""
    if isinstance(answer, dict):
        return answer
    return answer.model_dump(mode="json", exclude_unset=exclude_unset, by_alias=True)


def sse(events: Iterable[BaseModel | dict[str, Any]], *, named: bool) -> str:
    """The SDK's stream event models as the text of a ``text/event-stream``."""
    lines = []
    for event in events:
        data = wire(event)
        name = f"event: {data['type']}\n" if named else ""
        lines.append(f"{name}data: {json.dumps(data)}\n\n")
    return "".join(lines) + ("" if named else "data: [DONE]\n\n")


def provider(kind: type[HttpProvider], wire_: Wire, **options: Any) -> HttpProvider:
    model = ANTHROPIC_MODEL if kind is AnthropicMessages else OPENAI_MODEL
    return kind(
        model,
        api_key="sk-test-shapes-0000",
        transport=httpx.MockTransport(wire_),
        retry=RetryPolicy(max_retries=0),
        **options,
    )


def ask(*messages: Message) -> InferenceRequest:
    return InferenceRequest(messages=Messages.of(*(messages or (Message.user("Hi"),))))


def streamed(llm: HttpProvider, request: InferenceRequest) -> tuple[str, InferenceResponse]:
    text, final = "", None
    for item in llm.stream(request):
        if isinstance(item, InferenceDelta):
            text += item.text
        else:
            final = item
    assert final is not None
    return text, final


def astreamed(llm: HttpProvider, request: InferenceRequest) -> tuple[str, InferenceResponse]:
    async def run() -> tuple[str, InferenceResponse]:
        text, final = "", None
        async for item in llm.astream(request):
            if isinstance(item, InferenceDelta):
                text += item.text
            else:
                final = item
        assert final is not None
        return text, final

    return asyncio.run(run())


def chunks(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def expect(response: InferenceResponse, **fields: Any) -> None:
    """``response`` says each of ``fields``; ``metadata`` is compared whole."""
    for name, value in fields.items():
        assert getattr(response, name) == value, name


# -- Anthropic Messages ----------------------------------------------------------------------


def a_usage(**counts: Any) -> A.Usage:
    return A.Usage(input_tokens=counts.pop("input_tokens", 10), output_tokens=20, **counts)


def a_message(
    *content: BaseModel, stop_reason: str = "end_turn", usage: A.Usage | None = None, **extra: Any
) -> A.Message:
    return A.Message(
        id="msg_01SDK",
        type="message",
        role="assistant",
        model=ANTHROPIC_MODEL,
        content=list(content),
        stop_reason=stop_reason,
        usage=usage or a_usage(),
        **extra,
    )


CHAR_CITATION = A.CitationCharLocation(
    type="char_location",
    cited_text="Paris is the capital of France.",
    document_index=0,
    document_title="Atlas",
    start_char_index=0,
    end_char_index=31,
)
SEARCH_CITATION = A.CitationsWebSearchResultLocation(
    type="web_search_result_location",
    cited_text="2.1 million inhabitants",
    encrypted_index="Eo8BCioIAhgB",
    title="Paris - Wikipedia",
    url="https://en.wikipedia.org/wiki/Paris",
)
THINKING = A.ThinkingBlock(type="thinking", thinking="The user wants Paris.", signature="sig==")
REDACTED = A.RedactedThinkingBlock(type="redacted_thinking", data="EmwKAhgBEgy3va3pzix")
TOOL_USE = A.ToolUseBlock(type="tool_use", id="toolu_01", name="get_weather", input={"c": "P"})
SEARCH_USE = A.ServerToolUseBlock(
    type="server_tool_use", id="srvtoolu_01", name="web_search", input={"query": "Paris"}
)
SEARCH_RESULT = A.WebSearchToolResultBlock(
    type="web_search_tool_result",
    tool_use_id="srvtoolu_01",
    content=[
        A.WebSearchResultBlock(
            type="web_search_result",
            title="Paris - Wikipedia",
            url="https://en.wikipedia.org/wiki/Paris",
            encrypted_content="EqgfCioIARgBIiQ3",
            page_age="April 30, 2025",
        )
    ],
)
CODE_USE = A.ServerToolUseBlock(
    type="server_tool_use", id="srvtoolu_02", name="code_execution", input={"code": "print(2)"}
)
CODE_RESULT = A.CodeExecutionToolResultBlock(
    type="code_execution_tool_result",
    tool_use_id="srvtoolu_02",
    content=A.CodeExecutionResultBlock(
        type="code_execution_result", stdout="2\n", stderr="", return_code=0, content=[]
    ),
)
BASH_RESULT = A.BashCodeExecutionToolResultBlock(
    type="bash_code_execution_tool_result",
    tool_use_id="srvtoolu_03",
    content=A.BashCodeExecutionResultBlock(
        type="bash_code_execution_result", stdout="ok", stderr="", return_code=0, content=[]
    ),
)
EDITOR_RESULT = A.TextEditorCodeExecutionToolResultBlock(
    type="text_editor_code_execution_tool_result",
    tool_use_id="srvtoolu_04",
    content=A.TextEditorCodeExecutionViewResultBlock(
        type="text_editor_code_execution_view_result", content="x = 1", file_type="text"
    ),
)
FETCH_RESULT = A.WebFetchToolResultBlock.model_validate(
    {
        "type": "web_fetch_tool_result",
        "tool_use_id": "srvtoolu_05",
        "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"},
    }
)
SEARCH_TOOLS_RESULT = A.ToolSearchToolResultBlock.model_validate(
    {
        "type": "tool_search_tool_result",
        "tool_use_id": "srvtoolu_06",
        "content": {"type": "tool_search_tool_search_result", "tool_references": []},
    }
)
UPLOAD = A.ContainerUploadBlock(type="container_upload", file_id="file_011")


def text(value: str, *citations: BaseModel) -> A.TextBlock:
    if citations:
        return A.TextBlock(type="text", text=value, citations=list(citations))
    return A.TextBlock(type="text", text=value)


def dumped(*blocks: BaseModel) -> list[Any]:
    return [wire(b) for b in blocks]


SERVER_BLOCKS = (
    text("Let me look. "),
    SEARCH_USE,
    SEARCH_RESULT,
    text("Paris has 2.1 million people.", SEARCH_CITATION),
    CODE_USE,
    CODE_RESULT,
    BASH_RESULT,
    EDITOR_RESULT,
    FETCH_RESULT,
    SEARCH_TOOLS_RESULT,
    UPLOAD,
)

ANTHROPIC_SHAPES = [
    pytest.param(
        a_message(text("Paris is the capital.", CHAR_CITATION), text(" Lovely.")),
        {
            "content": "Paris is the capital. Lovely.",
            "metadata": {
                "response_id": "msg_01SDK",
                "kept_blocks": dumped(
                    text("Paris is the capital.", CHAR_CITATION), text(" Lovely.")
                ),
                "block_order": ["text", "text"],
            },
        },
        id="text-with-citations",
    ),
    pytest.param(
        a_message(text("One. "), text("Two. "), text("Three.")),
        {"content": "One. Two. Three.", "metadata": {"response_id": "msg_01SDK"}},
        id="several-text-blocks",
    ),
    pytest.param(
        a_message(
            THINKING,
            REDACTED,
            text("Checking."),
            TOOL_USE,
            stop_reason="tool_use",
            usage=A.Usage(
                input_tokens=10,
                output_tokens=80,
                output_tokens_details=A.OutputTokensDetails(thinking_tokens=30),
            ),
        ),
        {
            "content": "Checking.",
            "reasoning": "The user wants Paris.",
            "tool_calls": (ToolCall(id="toolu_01", name="get_weather", arguments={"c": "P"}),),
            "finish_reason": "tool_use",
            "usage": Usage(input_tokens=10, output_tokens=80, reasoning_tokens=30),
            "metadata": {
                "response_id": "msg_01SDK",
                "thinking_blocks": dumped(THINKING, REDACTED),
                "block_order": ["thinking", "redacted_thinking", "text", "tool_use"],
            },
        },
        id="thinking-redacted-thinking-tool-use",
    ),
    pytest.param(
        a_message(
            *SERVER_BLOCKS,
            usage=a_usage(
                server_tool_use=A.ServerToolUsage(web_search_requests=1, web_fetch_requests=1)
            ),
        ),
        {
            "content": "Let me look. Paris has 2.1 million people.",
            "tool_calls": (),
            "metadata": {
                "response_id": "msg_01SDK",
                "kept_blocks": dumped(*SERVER_BLOCKS),
                "block_order": [b.type for b in SERVER_BLOCKS],  # type: ignore[attr-defined]
            },
        },
        id="server-tool-blocks",
    ),
    pytest.param(
        a_message(
            text("Hi"),
            usage=A.Usage(
                input_tokens=10,
                output_tokens=20,
                cache_creation_input_tokens=100,
                cache_read_input_tokens=50,
                cache_creation=A.CacheCreation(
                    ephemeral_1h_input_tokens=60, ephemeral_5m_input_tokens=40
                ),
                service_tier="standard",
            ),
        ),
        {
            "usage": Usage(
                input_tokens=160,
                output_tokens=20,
                cache_read_tokens=50,
                cache_write_tokens=100,
                cache_write_1h_tokens=60,
            ),
        },
        id="usage-cache-creation-split",
    ),
    pytest.param(
        a_message(text("Cut"), stop_reason="max_tokens"),
        {"content": "Cut", "finish_reason": "max_tokens"},
        id="max-tokens",
    ),
    pytest.param(
        a_message(text("1, 2, "), stop_reason="stop_sequence", stop_sequence="3"),
        {"content": "1, 2, ", "finish_reason": "stop_sequence"},
        id="stop-sequence",
    ),
    pytest.param(
        a_message(stop_reason="refusal"),
        {"content": "", "finish_reason": "refusal", "metadata": {"response_id": "msg_01SDK"}},
        id="refusal-with-empty-content",
    ),
    pytest.param(
        a_message(text("Too long"), stop_reason="model_context_window_exceeded"),
        {"finish_reason": "model_context_window_exceeded"},
        id="context-window-exceeded",
    ),
]


@pytest.mark.parametrize("exclude_unset", [True, False], ids=["unset-left-out", "all-fields"])
@pytest.mark.parametrize(("message", "expected"), ANTHROPIC_SHAPES)
def test_anthropic_reads_every_message_shape_of_the_sdk(
    message: A.Message, expected: dict[str, Any], exclude_unset: bool
) -> None:
    body = wire(message, exclude_unset=exclude_unset)
    response = provider(AnthropicMessages, Wire(body)).complete(ask())

    if not exclude_unset:  # the blocks are kept as they came, nulls and all
        expected = {k: v for k, v in expected.items() if k != "metadata"}
    expect(response, model=ANTHROPIC_MODEL, **{"finish_reason": "end_turn", **expected})


def test_anthropic_keeps_a_block_type_it_does_not_know_and_sends_it_back() -> None:
    future = {"type": "hologram", "frames": [1, 2]}
    body = wire(a_message(text("Look: "), text("there.")))
    body["content"].insert(1, future)
    llm = provider(AnthropicMessages, wire_ := Wire(body, a_message(text("Done."))))

    response = llm.complete(ask())
    again = Message(role=Role.ASSISTANT, content=response.content, metadata=response.metadata)
    llm.complete(ask(Message.user("Hi"), again, Message.user("More?")))

    assert response.content == "Look: there."
    assert response.metadata["kept_blocks"] == body["content"]
    assert wire_.bodies[1]["messages"][1]["content"] == body["content"]


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
def test_anthropic_keeps_a_streamed_block_type_it_does_not_know(
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    future = {"type": "hologram", "frames": [1, 2]}
    message = a_message(text("Look: "), text("there."))
    events: list[BaseModel | dict[str, Any]] = [*a_events(message)]
    events[-2:-2] = [
        {"type": "content_block_start", "index": 2, "content_block": future},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "hologram_delta"}},
        {"type": "content_block_stop", "index": 2},
    ]
    body = wire(message)
    body["content"].append(future)

    text_, response = how(provider(AnthropicMessages, Wire(sse(events, named=True))), ask())

    assert response == provider(AnthropicMessages, Wire(body)).complete(ask())
    assert text_ == response.content == "Look: there."
    assert response.metadata["kept_blocks"] == body["content"]


def a_events(message: A.Message) -> list[BaseModel]:
    """The stream events the API sends for ``message``: its blocks started empty and filled
    by deltas (text in pieces, citations, thinking and its signature, tool input as JSON
    pieces); blocks without deltas start whole; the stop reason and output usage last."""
    usage = message.usage
    start = message.model_copy(update={"content": [], "stop_reason": None})
    events: list[BaseModel] = [A.RawMessageStartEvent(type="message_start", message=start)]
    for index, block in enumerate(message.content):
        events.extend(_a_block_events(index, block))
    delta_usage = A.MessageDeltaUsage(
        output_tokens=usage.output_tokens, server_tool_use=usage.server_tool_use
    )
    delta = {"stop_reason": message.stop_reason, "stop_sequence": message.stop_sequence}
    events.append(A.RawMessageDeltaEvent(type="message_delta", delta=delta, usage=delta_usage))
    events.append(A.RawMessageStopEvent(type="message_stop"))
    return events


def _a_block_events(index: int, block: BaseModel) -> list[BaseModel]:
    kind = block.type  # type: ignore[attr-defined]
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        first = A.TextBlock(type="text", text="")
        deltas = [{"type": "text_delta", "text": t} for t in chunks(block.text)]  # type: ignore[attr-defined]
        deltas += [{"type": "citations_delta", "citation": wire(c)} for c in block.citations or ()]  # type: ignore[attr-defined]
    elif kind == "thinking":
        first = A.ThinkingBlock(type="thinking", thinking="", signature="")
        deltas = [{"type": "thinking_delta", "thinking": t} for t in chunks(block.thinking)]  # type: ignore[attr-defined]
        deltas.append({"type": "signature_delta", "signature": block.signature})  # type: ignore[attr-defined]
    elif kind in ("tool_use", "server_tool_use"):
        first = block.model_copy(update={"input": {}})
        text_ = json.dumps(block.input)  # type: ignore[attr-defined]
        deltas = [{"type": "input_json_delta", "partial_json": t} for t in chunks(text_, 7)]
    else:
        first = block
    events: list[BaseModel] = [
        A.RawContentBlockStartEvent.model_validate(
            {"type": "content_block_start", "index": index, "content_block": wire(first)}
        )
    ]
    events += [
        A.RawContentBlockDeltaEvent.model_validate(
            {"type": "content_block_delta", "index": index, "delta": d}
        )
        for d in deltas
    ]
    return [*events, A.RawContentBlockStopEvent(type="content_block_stop", index=index)]


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
@pytest.mark.parametrize(("message", "expected"), ANTHROPIC_SHAPES)
def test_anthropic_assembles_every_shape_from_the_sdk_stream_events(
    message: A.Message,
    expected: dict[str, Any],
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    whole = provider(AnthropicMessages, Wire(message)).complete(ask())
    events = sse(a_events(message), named=True)

    text_, response = how(provider(AnthropicMessages, Wire(events)), ask())

    assert response == whole
    assert text_ == whole.content
    expect(response, **{"finish_reason": "end_turn", **expected})


# -- Anthropic: server tools go back, pause_turn is continued ----------------------------------


def test_anthropic_sends_server_tool_blocks_back_in_the_order_they_came_within_the_run() -> None:
    first = a_message(*SERVER_BLOCKS[:4], TOOL_USE, stop_reason="tool_use")
    wire_ = Wire(first, a_message(text("22C.")))
    llm = provider(AnthropicMessages, wire_)

    response = llm.complete(ask())
    assistant = Message(
        role=Role.ASSISTANT,
        content=response.content,
        tool_calls=response.tool_calls,
        metadata=response.metadata,
    )
    result = Message(role=Role.TOOL, content="22C", tool_call_id="toolu_01")
    llm.complete(ask(Message.user("Weather?"), assistant, result))

    assert wire_.bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": dumped(*SERVER_BLOCKS[:4], TOOL_USE),
    }


PAUSED = a_message(
    text("Searching. "),
    SEARCH_USE,
    SEARCH_RESULT,
    stop_reason="pause_turn",
    usage=A.Usage(
        input_tokens=100,
        output_tokens=10,
        cache_read_input_tokens=40,
        server_tool_use=A.ServerToolUsage(web_search_requests=1, web_fetch_requests=0),
    ),
)
RESUMED = a_message(
    text("Paris has 2.1 million people.", SEARCH_CITATION),
    usage=A.Usage(input_tokens=150, output_tokens=20, cache_read_input_tokens=60),
)
MERGED = {
    "content": "Searching. Paris has 2.1 million people.",
    "finish_reason": "end_turn",
    "usage": Usage(input_tokens=350, output_tokens=30, cache_read_tokens=100),
    "metadata": {
        "response_id": "msg_01SDK",
        "kept_blocks": dumped(*PAUSED.content, *RESUMED.content),
        "block_order": ["text", "server_tool_use", "web_search_tool_result", "text"],
    },
}


def _continued_with_the_paused_turn(wire_: Wire) -> None:
    first, then = wire_.bodies
    assert then["messages"] == [
        *first["messages"],
        {"role": "assistant", "content": dumped(*PAUSED.content)},
    ]
    assert {k: v for k, v in then.items() if k != "messages"} == {
        k: v for k, v in first.items() if k != "messages"
    }


def test_anthropic_continues_a_paused_turn_and_merges_the_answers() -> None:
    wire_ = Wire(PAUSED, RESUMED)

    response = provider(AnthropicMessages, wire_).complete(ask())

    expect(response, **MERGED)
    _continued_with_the_paused_turn(wire_)


def test_anthropic_continues_a_paused_turn_on_an_event_loop() -> None:
    wire_ = Wire(PAUSED, RESUMED)

    response = asyncio.run(provider(AnthropicMessages, wire_).acomplete(ask()))

    expect(response, **MERGED)
    _continued_with_the_paused_turn(wire_)


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
def test_anthropic_streams_on_across_a_paused_turn(
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    wire_ = Wire(sse(a_events(PAUSED), named=True), sse(a_events(RESUMED), named=True))

    text_, response = how(provider(AnthropicMessages, wire_), ask())

    expect(response, **MERGED)
    assert text_ == MERGED["content"]
    assert wire_.bodies[1]["stream"] is True
    _continued_with_the_paused_turn(wire_)


def test_a_stream_cut_after_a_paused_turn_keeps_the_text_shown_before_the_pause() -> None:
    cut = sse(a_events(RESUMED), named=True).split("event: message_delta")[0]
    wire_ = Wire(sse(a_events(PAUSED), named=True), cut)
    shown = ""

    with pytest.raises(ProviderStreamCutError) as raised:
        for item in provider(AnthropicMessages, wire_).stream(ask()):
            shown += item.text if isinstance(item, InferenceDelta) else ""

    assert shown == MERGED["content"]
    assert raised.value.partial is not None
    assert raised.value.partial.content == shown


def test_anthropic_fails_clearly_when_a_turn_pauses_more_often_than_allowed() -> None:
    llm = provider(AnthropicMessages, Wire(PAUSED, PAUSED, PAUSED))
    llm.max_continuations = 2

    with pytest.raises(ProviderResponseError, match="paused its answer 3 times") as raised:
        llm.complete(ask())

    assert "max_continuations" in str(raised.value)


# -- OpenAI Chat Completions -------------------------------------------------------------------


def c_usage(**details: Any) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=100,
        completion_tokens=40,
        total_tokens=140,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=details.get("cached", 0),
            audio_tokens=5,
            cache_write_tokens=details.get("written", 0),
        ),
        completion_tokens_details=CompletionTokensDetails(
            reasoning_tokens=details.get("reasoning", 0),
            audio_tokens=3,
            accepted_prediction_tokens=0,
            rejected_prediction_tokens=0,
        ),
    )


def completion(
    *, finish_reason: str = "stop", usage: CompletionUsage | None = None, **message: Any
) -> chat_types.ChatCompletion:
    return chat_types.ChatCompletion(
        id="chatcmpl-SDK",
        object="chat.completion",
        created=1_760_000_000,
        model=OPENAI_MODEL,
        choices=[
            chat_types.chat_completion.Choice(
                index=0,
                finish_reason=finish_reason,
                message=chat_types.ChatCompletionMessage(role="assistant", **message),
            )
        ],
        usage=usage or c_usage(),
    )


def function_call(call_id: str, name: str, arguments: str) -> Any:
    return chat_types.ChatCompletionMessageFunctionToolCall(
        id=call_id, type="function", function={"name": name, "arguments": arguments}
    )


CHAT_SHAPES = [
    pytest.param(
        completion(
            content="Hello there.",
            annotations=[
                {
                    "type": "url_citation",
                    "url_citation": {
                        "start_index": 0,
                        "end_index": 5,
                        "title": "Hello",
                        "url": "https://example.org/hello",
                    },
                }
            ],
            usage=c_usage(cached=60, written=20, reasoning=12),
        ),
        {
            "content": "Hello there.",
            "usage": Usage(
                input_tokens=100,
                output_tokens=40,
                cache_read_tokens=60,
                cache_write_tokens=20,
                reasoning_tokens=12,
            ),
        },
        id="content-and-usage-details",
    ),
    pytest.param(
        completion(content=None, refusal="I can't help with that."),
        {"content": "I can't help with that.", "finish_reason": "refusal"},
        id="refusal",
    ),
    pytest.param(
        completion(
            content=None,
            finish_reason="tool_calls",
            tool_calls=[
                function_call("call_1", "get_weather", '{"city": "Paris"}'),
                function_call("call_2", "add", '{"a": 2, "b": 3}'),
                function_call("call_3", "now", ""),
            ],
        ),
        {
            "content": "",
            "finish_reason": "tool_calls",
            "tool_calls": (
                ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
                ToolCall(id="call_2", name="add", arguments={"a": 2, "b": 3}),
                ToolCall(id="call_3", name="now", arguments={}),
            ),
        },
        id="several-tool-calls",
    ),
    pytest.param(
        completion(content="Cut sh", finish_reason="length"),
        {"content": "Cut sh", "finish_reason": "length"},
        id="length",
    ),
    pytest.param(
        completion(content="", finish_reason="content_filter"),
        {"content": "", "finish_reason": "content_filter"},
        id="content-filter",
    ),
]


CHAT_DEFAULTS: dict[str, Any] = {
    "finish_reason": "stop",
    "tool_calls": (),
    "reasoning": None,
    "metadata": {"response_id": "chatcmpl-SDK"},
    "usage": Usage(input_tokens=100, output_tokens=40),
}


@pytest.mark.parametrize("exclude_unset", [True, False], ids=["unset-left-out", "all-fields"])
@pytest.mark.parametrize(("body", "expected"), CHAT_SHAPES)
def test_openai_chat_reads_every_completion_shape_of_the_sdk(
    body: chat_types.ChatCompletion, expected: dict[str, Any], exclude_unset: bool
) -> None:
    llm = provider(OpenAIChat, Wire(wire(body, exclude_unset=exclude_unset)))

    response = llm.complete(ask())

    expect(response, model=OPENAI_MODEL, **CHAT_DEFAULTS | expected)


def test_openai_chat_refuses_a_custom_tool_call_clearly() -> None:
    body = completion(
        content=None,
        finish_reason="tool_calls",
        tool_calls=[
            chat_types.ChatCompletionMessageCustomToolCall(
                id="call_9", type="custom", custom={"name": "grammar", "input": "SELECT 1"}
            )
        ],
    )

    with pytest.raises(ProviderResponseError, match="custom tool 'grammar'") as raised:
        provider(OpenAIChat, Wire(body)).complete(ask())

    assert "function tool" in str(raised.value)


def c_chunks(body: chat_types.ChatCompletion) -> list[BaseModel]:
    """The chunks the API streams ``body`` in: the role, text or refusal in pieces, each tool
    call's id and name then its arguments in pieces, the finish reason, the usage alone."""
    choice, message = body.choices[0], body.choices[0].message
    deltas: list[dict[str, Any]] = [{"role": "assistant"}]
    deltas += [{"content": t} for t in chunks(message.content or "") if t]
    deltas += [{"refusal": t} for t in chunks(message.refusal or "") if t]
    for index, call in enumerate(message.tool_calls or ()):
        head = {"index": index, "id": call.id, "type": "function"}
        deltas.append({"tool_calls": [head | {"function": {"name": call.function.name}}]})  # type: ignore[union-attr]
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": t}}]}
            for t in chunks(call.function.arguments, 4)  # type: ignore[union-attr]
        ]
    events = [_chunk(body, [{"index": 0, "delta": d}]) for d in deltas]
    events.append(_chunk(body, [{"index": 0, "delta": {}, "finish_reason": choice.finish_reason}]))
    events.append(_chunk(body, [], usage=body.usage))
    return events


def _chunk(body: chat_types.ChatCompletion, choices: list[Any], **extra: Any) -> BaseModel:
    return chat_types.ChatCompletionChunk(
        id=body.id,
        object="chat.completion.chunk",
        created=body.created,
        model=body.model,
        choices=choices,
        **extra,
    )


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
@pytest.mark.parametrize(("body", "expected"), CHAT_SHAPES)
def test_openai_chat_assembles_every_shape_from_the_sdk_chunks(
    body: chat_types.ChatCompletion,
    expected: dict[str, Any],
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    whole = provider(OpenAIChat, Wire(body)).complete(ask())

    text_, response = how(provider(OpenAIChat, Wire(sse(c_chunks(body), named=False))), ask())

    assert response == whole
    assert text_ == whole.content
    expect(response, **CHAT_DEFAULTS | expected)


# -- OpenAI Responses --------------------------------------------------------------------------


def r_usage(cached: int = 0, written: int = 0, reasoning: int = 0) -> R.ResponseUsage:
    return R.ResponseUsage(
        input_tokens=100,
        output_tokens=40,
        total_tokens=140,
        input_tokens_details={"cached_tokens": cached, "cache_write_tokens": written},
        output_tokens_details={"reasoning_tokens": reasoning},
    )


def response(
    *output: BaseModel | dict[str, Any], status: str = "completed", **extra: Any
) -> R.Response:
    return R.Response.model_validate(
        {
            "id": "resp_SDK",
            "object": "response",
            "created_at": 1_760_000_000,
            "model": OPENAI_MODEL,
            "status": status,
            "output": [wire(i) for i in output],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": wire(r_usage(cached=30, written=15, reasoning=12)),
            **extra,
        }
    )


def out_text(value: str, *annotations: dict[str, Any]) -> R.ResponseOutputText:
    return R.ResponseOutputText(type="output_text", text=value, annotations=list(annotations))


def out_message(*parts: BaseModel, item_id: str = "msg_1") -> R.ResponseOutputMessage:
    return R.ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed", content=list(parts)
    )


URL_CITATION = {
    "type": "url_citation",
    "start_index": 0,
    "end_index": 5,
    "title": "Paris",
    "url": "https://en.wikipedia.org/wiki/Paris",
}
FILE_CITATION = {"type": "file_citation", "file_id": "file_1", "filename": "a.txt", "index": 3}
REASONING = R.ResponseReasoningItem(
    id="rs_1",
    type="reasoning",
    summary=[
        {"type": "summary_text", "text": "Look up Paris."},
        {"type": "summary_text", "text": "Then add."},
    ],
    encrypted_content="gAAAAAB-encrypted",
)
WEB_SEARCH = R.ResponseFunctionWebSearch(
    id="ws_1",
    type="web_search_call",
    status="completed",
    action={"type": "search", "query": "Paris population"},
)


def r_call(call_id: str, name: str, arguments: str) -> R.ResponseFunctionToolCall:
    return R.ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=arguments,
        status="completed",
    )


RESPONSES_SHAPES = [
    pytest.param(
        response(out_message(out_text("Paris ", URL_CITATION), out_text("is big.", FILE_CITATION))),
        {"content": "Paris is big."},
        id="several-output-text-parts-with-annotations",
    ),
    pytest.param(
        response(out_message(R.ResponseOutputRefusal(type="refusal", refusal="I can't."))),
        {"content": "I can't.", "finish_reason": "refusal"},
        id="refusal",
    ),
    pytest.param(
        response(
            REASONING,
            r_call("call_1", "get_weather", '{"city": "Paris"}'),
            r_call("call_2", "add", '{"a": 2}'),
        ),
        {
            "finish_reason": "tool_calls",
            "reasoning": "Look up Paris.\n\nThen add.",
            "tool_calls": (
                ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
                ToolCall(id="call_2", name="add", arguments={"a": 2}),
            ),
            "metadata": {"response_id": "resp_SDK", "reasoning_items": [wire(REASONING)]},
        },
        id="reasoning-and-function-calls",
    ),
    pytest.param(
        response(WEB_SEARCH, out_message(out_text("2.1 million.", URL_CITATION))),
        {"content": "2.1 million."},
        id="web-search-call",
    ),
    pytest.param(
        response(
            R.ResponseFileSearchToolCall(
                id="fs_1", type="file_search_call", status="completed", queries=["paris"]
            ),
            R.ResponseCodeInterpreterToolCall(
                id="ci_1",
                type="code_interpreter_call",
                status="completed",
                container_id="cntr_1",
                code="print(2)",
                outputs=[{"type": "logs", "logs": "2"}],
            ),
            R.response_output_item.ImageGenerationCall(
                id="ig_1", type="image_generation_call", status="completed", result="iVBOR"
            ),
            R.response_output_item.McpCall(
                id="mcp_1",
                type="mcp_call",
                name="lookup",
                server_label="atlas",
                arguments="{}",
                output="Paris",
            ),
            out_message(out_text("Done.")),
        ),
        {"content": "Done."},
        id="other-server-tool-calls",
    ),
    pytest.param(
        response(
            out_message(out_text("Cut sh")),
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
        {"content": "Cut sh", "finish_reason": "length"},
        id="incomplete-max-output-tokens",
    ),
    pytest.param(
        response(
            out_message(out_text("")),
            status="incomplete",
            incomplete_details={"reason": "content_filter"},
        ),
        {"content": "", "finish_reason": "content_filter"},
        id="incomplete-content-filter",
    ),
]


RESPONSES_DEFAULTS: dict[str, Any] = {
    "content": "",
    "finish_reason": "stop",
    "tool_calls": (),
    "reasoning": None,
    "metadata": {"response_id": "resp_SDK"},
    "usage": Usage(
        input_tokens=100,
        output_tokens=40,
        cache_read_tokens=30,
        cache_write_tokens=15,
        reasoning_tokens=12,
    ),
}


@pytest.mark.parametrize("exclude_unset", [True, False], ids=["unset-left-out", "all-fields"])
@pytest.mark.parametrize(("body", "expected"), RESPONSES_SHAPES)
def test_openai_responses_reads_every_response_shape_of_the_sdk(
    body: R.Response, expected: dict[str, Any], exclude_unset: bool
) -> None:
    llm = provider(OpenAIResponses, Wire(wire(body, exclude_unset=exclude_unset)))

    response_ = llm.complete(ask())

    defaults = dict(RESPONSES_DEFAULTS)
    if not exclude_unset:
        defaults.pop("metadata")
        expected = {k: v for k, v in expected.items() if k != "metadata"}
    expect(response_, model=OPENAI_MODEL, **defaults | expected)


def test_openai_responses_refuses_a_custom_tool_call_clearly() -> None:
    call = R.ResponseCustomToolCall(
        type="custom_tool_call", call_id="call_9", name="grammar", input="SELECT 1"
    )

    with pytest.raises(ProviderResponseError, match="custom tool 'grammar'"):
        provider(OpenAIResponses, Wire(response(call))).complete(ask())


def test_openai_responses_passes_over_an_output_item_type_it_does_not_know() -> None:
    body = wire(response(out_message(out_text("Hi."))))
    body["output"].insert(0, {"type": "hologram_call", "id": "hg_1"})

    response_ = provider(OpenAIResponses, Wire(body)).complete(ask())

    assert response_.content == "Hi."


def r_events(body: R.Response) -> list[BaseModel]:
    """The events the API streams ``body`` in: created, then each output item added, its
    text, refusal, summary and argument deltas, done; completed (or incomplete) last."""
    numbers = iter(range(10_000))
    head = body.model_copy(update={"status": "in_progress", "output": [], "usage": None})

    def event(kind: type[BaseModel], **fields: Any) -> BaseModel:
        return kind.model_validate({**fields, "sequence_number": next(numbers)})

    events = [event(R.ResponseCreatedEvent, type="response.created", response=wire(head))]
    for index, item in enumerate(body.output):
        events.append(
            event(
                R.ResponseOutputItemAddedEvent,
                type="response.output_item.added",
                output_index=index,
                item=_r_started(item),
            )
        )
        for fields in _r_deltas(item):
            where = {"output_index": index, "item_id": item.id or ""}  # type: ignore[union-attr]
            events.append(event(fields.pop("kind"), **where, **fields))
        events.append(
            event(
                R.ResponseOutputItemDoneEvent,
                type="response.output_item.done",
                output_index=index,
                item=wire(item),
            )
        )
    end = R.ResponseCompletedEvent if body.status == "completed" else R.ResponseIncompleteEvent
    events.append(event(end, type=f"response.{body.status}", response=wire(body)))
    return events


def _r_started(item: Any) -> dict[str, Any]:
    started = wire(item) | {"status": "in_progress"}
    if item.type == "message":
        return started | {"content": []}
    if item.type == "reasoning":
        return started | {"summary": []}
    if item.type == "function_call":
        return started | {"arguments": ""}
    return started


def _r_deltas(item: Any) -> list[dict[str, Any]]:
    if item.type == "message":
        return [
            delta
            for number, part in enumerate(item.content)
            for delta in _r_part_deltas(number, part)
        ]
    if item.type == "reasoning":
        return [
            {
                "kind": R.ResponseReasoningSummaryTextDeltaEvent,
                "type": "response.reasoning_summary_text.delta",
                "summary_index": number,
                "delta": piece,
            }
            for number, summary in enumerate(item.summary)
            for piece in chunks(summary.text)
        ]
    if item.type == "function_call":
        return [
            {
                "kind": R.ResponseFunctionCallArgumentsDeltaEvent,
                "type": "response.function_call_arguments.delta",
                "delta": piece,
            }
            for piece in chunks(item.arguments, 4)
        ]
    return []


def _r_part_deltas(number: int, part: Any) -> list[dict[str, Any]]:
    if part.type == "refusal":
        kind, name, value = R.ResponseRefusalDeltaEvent, "response.refusal.delta", part.refusal
    else:
        kind, name, value = R.ResponseTextDeltaEvent, "response.output_text.delta", part.text
    deltas = [
        {"kind": kind, "type": name, "content_index": number, "delta": piece}
        for piece in chunks(value)
        if piece
    ]
    if part.type == "output_text":
        for delta in deltas:
            delta["logprobs"] = []
        deltas += [
            {
                "kind": R.ResponseOutputTextAnnotationAddedEvent,
                "type": "response.output_text.annotation.added",
                "content_index": number,
                "annotation_index": i,
                "annotation": wire(annotation),
            }
            for i, annotation in enumerate(part.annotations)
        ]
    return deltas


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
@pytest.mark.parametrize(("body", "expected"), RESPONSES_SHAPES)
def test_openai_responses_assembles_every_shape_from_the_sdk_stream_events(
    body: R.Response,
    expected: dict[str, Any],
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    whole = provider(OpenAIResponses, Wire(body)).complete(ask())
    events = sse(r_events(body), named=True)

    text_, response_ = how(provider(OpenAIResponses, Wire(events)), ask())

    assert response_ == whole
    assert text_ == whole.content
    expect(response_, **RESPONSES_DEFAULTS | expected)


@pytest.mark.parametrize("how", [streamed, astreamed], ids=["stream", "astream"])
def test_openai_responses_refuses_a_streamed_custom_tool_call_clearly(
    how: Callable[[HttpProvider, InferenceRequest], tuple[str, InferenceResponse]],
) -> None:
    call = R.ResponseCustomToolCall(
        type="custom_tool_call", call_id="call_9", name="grammar", input="SELECT 1"
    )
    events = sse(r_events(response(call)), named=True)

    with pytest.raises(ProviderResponseError, match="custom tool 'grammar'"):
        how(provider(OpenAIResponses, Wire(events)), ask())

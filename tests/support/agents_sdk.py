"""The OpenAI Agents SDK's side of its session tests: a fake model (the SDK's ``Model``
interface answering from a script, no network), the items it answers with, and two tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import InputTokensDetails, OutputTokensDetails, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary


class FakeModel(Model):
    """The SDK's ``Model`` interface answering from a script, keeping what it was sent."""

    def __init__(self, name: str, outputs: list[list[Any]]) -> None:
        self.name = name
        self.outputs = outputs
        self.inputs: list[list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input)))
        return ModelResponse(output=self.outputs.pop(0), usage=model_usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


def model_usage() -> Usage:
    return Usage(
        requests=1,
        input_tokens=100,
        input_tokens_details=InputTokensDetails(cached_tokens=40, cache_write_tokens=0),
        output_tokens=20,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=5),
        total_tokens=120,
    )


def say(text: str, item_id: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed", content=content
    )


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
        call_id=call_id,
        id=f"fc_{call_id}",
        status="completed",
    )


def think(text: str, item_id: str) -> ResponseReasoningItem:
    summary = [Summary(type="summary_text", text=text)]
    return ResponseReasoningItem(id=item_id, type="reasoning", summary=summary)


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"

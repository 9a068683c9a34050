"""The attributes of the spans, from agentledger's values: the same functions for the spans a
run emits as it happens and for those exported afterwards from the ledger, so both say the
same. Pure code, no OpenTelemetry: attributes are a plain mapping here."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version

from pydantic import JsonValue

from ..._values import AgentStatus, Message, Role, StopReason, ToolCall, ToolExecution, Usage
from . import _semconv as sc

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = dict[str, AttributeValue]

_TRUE = {"true", "1", "yes", "on", "span_only", "span_and_event"}
"""Values of the opt-in that turn content capture on (the conventions' ``true``, and the
newer modes that put it on spans)."""


def capture_content_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`CAPTURE_CONTENT_ENV` asks for message contents on spans."""
    value = (os.environ if environ is None else environ).get(sc.CAPTURE_CONTENT_ENV, "")
    return value.strip().lower() in _TRUE


def library_version() -> str:
    """agentledger's version, for the instrumentation scope of the spans."""
    try:
        return version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0.0.0"


def kept(attributes: Mapping[str, AttributeValue | None]) -> Attributes:
    """``attributes`` without those that have no value (OpenTelemetry refuses ``None``)."""
    return {key: value for key, value in attributes.items() if value is not None}


def provider_name(llm: object) -> str | None:
    """The conventions' name of ``llm``'s provider, when it says which (``LLM.provider``)."""
    provider = getattr(type(llm), "provider", None)
    if not isinstance(provider, str):
        return None
    return sc.PROVIDERS.get(provider, provider.lower())


def usage_attributes(usage: Usage) -> Attributes:
    """Tokens, as the conventions count them: input tokens include the cached ones."""
    return {
        sc.INPUT_TOKENS: usage.input_tokens,
        sc.OUTPUT_TOKENS: usage.output_tokens,
        sc.CACHE_READ_TOKENS: usage.cache_read_tokens,
        sc.CACHE_CREATION_TOKENS: usage.cache_write_tokens,
    }


def run_start_attributes(
    *,
    run_id: str,
    agent_name: str,
    conversation_id: str,
    parent_run_id: str | None,
    root_run_id: str | None,
    depth: int,
) -> Attributes:
    """What an ``invoke_agent`` span knows when its run begins."""
    return kept(
        {
            sc.OPERATION_NAME: sc.INVOKE_AGENT,
            sc.AGENT_NAME: agent_name,
            sc.CONVERSATION_ID: conversation_id,
            sc.RUN_ID: run_id,
            sc.PARENT_RUN_ID: parent_run_id,
            sc.ROOT_RUN_ID: root_run_id or run_id,
            sc.DEPTH: depth,
        }
    )


def run_end_attributes(
    *,
    status: AgentStatus,
    stop_reason: StopReason | None,
    usage: Usage,
    cost_usd: float | None,
    model: str | None,
    step_count: int,
    error: str | None,
) -> Attributes:
    """What an ``invoke_agent`` span says once its run ended: its own steps' tokens (its
    subagents' are on their own spans), how it ended, and ``error.type`` when it failed."""
    return kept(
        {
            sc.RESPONSE_MODEL: model,
            **usage_attributes(usage),
            sc.STATUS: status.value,
            sc.STOP_REASON: stop_reason.value if stop_reason is not None else None,
            sc.STEP_COUNT: step_count,
            sc.COST_USD: cost_usd,
            sc.ERROR_TYPE: error_type(error) if run_failed(status, stop_reason) else None,
        }
    )


def run_failed(status: AgentStatus, stop_reason: StopReason | None) -> bool:
    """Whether a run that ended so is an error on its span."""
    return status is AgentStatus.FAILED or stop_reason is StopReason.ERROR


def chat_name(model: str | None) -> str:
    return f"{sc.CHAT} {model}" if model else sc.CHAT


def chat_start_attributes(
    *,
    conversation_id: str,
    run_id: str | None,
    step_index: int,
    request_model: str | None,
    provider: str | None,
) -> Attributes:
    """What a ``chat`` span knows when the model is asked."""
    return kept(
        {
            sc.OPERATION_NAME: sc.CHAT,
            sc.PROVIDER_NAME: provider,
            sc.REQUEST_MODEL: request_model,
            sc.CONVERSATION_ID: conversation_id,
            sc.RUN_ID: run_id,
            sc.STEP_INDEX: step_index,
        }
    )


def chat_end_attributes(
    *, usage: Usage, model: str | None, finish_reason: str | None, cost_usd: float | None
) -> Attributes:
    """What a ``chat`` span says once the model answered."""
    return kept(
        {
            sc.RESPONSE_MODEL: model,
            **usage_attributes(usage),
            sc.FINISH_REASONS: [finish_reason] if finish_reason else None,
            sc.COST_USD: cost_usd,
        }
    )


def tool_name(call: ToolCall) -> str:
    return f"{sc.EXECUTE_TOOL} {call.name}"


def tool_start_attributes(
    call: ToolCall, *, conversation_id: str, run_id: str | None, step_index: int
) -> Attributes:
    """What an ``execute_tool`` span knows when the tool starts."""
    return kept(
        {
            sc.OPERATION_NAME: sc.EXECUTE_TOOL,
            sc.TOOL_NAME: call.name,
            sc.TOOL_CALL_ID: call.id,
            sc.TOOL_TYPE: "function",
            sc.CONVERSATION_ID: conversation_id,
            sc.RUN_ID: run_id,
            sc.STEP_INDEX: step_index,
        }
    )


def tool_end_attributes(execution: ToolExecution, *, content: bool) -> Attributes:
    """What an ``execute_tool`` span says once the call ended: the subagent run it started,
    ``error.type`` for an error result, and (with ``content``) its arguments and result."""
    attributes: dict[str, AttributeValue | None] = {
        sc.TOOL_EXECUTION_ID: execution.id,
        sc.CHILD_RUN_ID: execution.child_run_id,
        sc.ERROR_TYPE: tool_error_type(execution) if execution.is_error else None,
    }
    if content:
        arguments = execution.arguments
        if arguments is None:
            arguments = dict(execution.tool_call.arguments)
        attributes[sc.TOOL_ARGUMENTS] = _json(arguments)
        attributes[sc.TOOL_RESULT] = execution.result
    return kept(attributes)


_RAISED = re.compile(r"^Tool '.*' raised ([A-Za-z_][\w.]*):")
_ERROR_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")


def tool_error_type(execution: ToolExecution) -> str:
    """The exception a failed tool raised, else ``tool_error`` (bad arguments, unknown tool,
    an error result the tool returned)."""
    found = _RAISED.match(execution.error or "")
    return found.group(1) if found else "tool_error"


def error_type(error: str | None) -> str:
    """The exception's name a recorded error begins with (``"ProviderServerError: ..."``),
    else :data:`OTHER_ERROR`."""
    found = _ERROR_PREFIX.match(error or "")
    return found.group(1) if found else sc.OTHER_ERROR


def content_attributes(
    inputs: Iterable[Message], output: Message | None, finish_reason: str | None
) -> Attributes:
    """The opt-in contents of a ``chat`` span, in the conventions' JSON: the system
    instructions, the input messages and the output message."""
    inputs = list(inputs)
    system = [m for m in inputs if m.role is Role.SYSTEM]
    attributes: dict[str, AttributeValue | None] = {
        sc.SYSTEM_INSTRUCTIONS: _json([_text(m.content) for m in system]) if system else None,
        sc.INPUT_MESSAGES: _json([message_json(m) for m in inputs if m.role is not Role.SYSTEM])
        if len(inputs) > len(system)
        else None,
    }
    if output is not None:
        answer = {**message_json(output), "finish_reason": finish_reason or "stop"}
        attributes[sc.OUTPUT_MESSAGES] = _json([answer])
    return kept(attributes)


def message_json(message: Message) -> dict[str, JsonValue]:
    """``message`` as the conventions' chat message: a role and its parts."""
    parts: list[JsonValue] = []
    if message.reasoning:
        parts.append({"type": "reasoning", "content": message.reasoning})
    if message.role is Role.TOOL:
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif message.content:
        parts.append(_text(message.content))
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": dict(c.arguments)}
        for c in message.tool_calls
    )
    shaped: dict[str, JsonValue] = {"role": message.role.value, "parts": parts}
    if message.name:
        shaped["name"] = message.name
    return shaped


def _text(content: str) -> dict[str, JsonValue]:
    return {"type": "text", "content": content}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

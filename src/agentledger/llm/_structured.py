"""What the providers share of structured output and forced tool calls: a response format as
a named strict JSON schema, the answer read back into it, and a ``tool_choice`` that names a
tool checked against the request's tools."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .._values import InferenceRequest, ResponseFormat, ToolSchema
from ..errors import ConfigurationError

TOOL_CHOICES = ("auto", "required", "none")
"""The ``tool_choice`` values that are modes, not tool names."""

_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class OutputSchema:
    """A response format as the APIs take it: a name (letters, digits, ``_`` and ``-``, at
    most 64) and a schema in strict form."""

    name: str
    schema: dict[str, Any]


def output_schema(response_format: ResponseFormat) -> OutputSchema:
    """A model class is named after itself; a JSON schema after its ``title``, or
    ``response``."""
    if isinstance(response_format, type):
        name, schema = response_format.__name__, response_format.model_json_schema()
    else:
        schema = dict(response_format)
        title = schema.get("title")
        name = title if isinstance(title, str) and title else "response"
    return OutputSchema(_NAME.sub("_", name)[:64], strict_schema(schema))


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as strict mode requires it (OpenAI's rules, which Anthropic's also meets):
    every object closed (``additionalProperties: false``) with all its properties required,
    throughout (properties, items, ``anyOf``, ``allOf``, ``$defs``). An optional field of a
    pydantic model becomes required but nullable (its schema already allows ``null``); a
    ``default: null`` is dropped, as strict mode takes no defaults."""
    strict: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            strict[key] = {k: _strict(v) for k, v in value.items()}
        elif key in ("anyOf", "allOf", "oneOf", "prefixItems") and isinstance(value, list):
            strict[key] = [_strict(v) for v in value]
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            strict[key] = _strict(value)
        elif not (key == "default" and value is None):
            strict[key] = value
    if strict.get("type") == "object" or "properties" in strict:
        properties = strict.get("properties") or {}
        strict["additionalProperties"] = False
        strict["required"] = list(properties)
    return strict


def _strict(value: object) -> object:
    return strict_schema(value) if isinstance(value, dict) else value


def strict_tool_parameters(tool: ToolSchema) -> dict[str, Any]:
    """A tool's parameters as sent: in strict form when the tool is strict."""
    return strict_schema(dict(tool.parameters)) if tool.strict else dict(tool.parameters)


def forced_tool(request: InferenceRequest) -> str | None:
    """The tool ``tool_choice`` names, when it names one; a name that is not among the
    request's tools is refused before anything is sent."""
    choice = request.settings.tool_choice
    if choice is None or choice in TOOL_CHOICES:
        return None
    offered = [t.name for t in request.tools]
    if choice not in offered:
        raise ConfigurationError(
            f"tool_choice={choice!r} names a tool this request does not offer "
            f"(it offers {', '.join(map(repr, offered)) or 'no tools'}): name one of its "
            f"tools, or use one of {', '.join(map(repr, TOOL_CHOICES))}."
        )
    return choice


def parsed_output(
    content: str, response_format: ResponseFormat | None
) -> BaseModel | dict[str, Any] | None:
    """The answer read back as ``response_format`` asked: an instance of its model class, or
    the JSON object; ``None`` when it does not read (a refusal, an answer cut short)."""
    if response_format is None or not content.strip():
        return None
    if isinstance(response_format, type):
        try:
            return response_format.model_validate_json(content)
        except ValidationError:
            return None
    try:
        value = json.loads(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

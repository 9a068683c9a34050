"""An MCP server's tool as an agentledger :class:`Tool`: its JSON schema shown to the model, the
model's arguments held to it before the call, and the server's answer turned into a result."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema
import mcp.types as types
from pydantic import BaseModel, ConfigDict, JsonValue, model_validator
from pydantic_core import PydanticCustomError

from ..._core import MCP_SERVER_KEY, MCP_TOOL_KEY, ToolContext, ToolOutput

STRUCTURED_KEY = "structured_content"
"""The metadata key keeping a result's structured content, when the server sends one."""


class Caller(Protocol):
    """What calls a tool on its server: its connection."""

    @property
    def name(self) -> str: ...

    def call(self, tool: MCPTool, arguments: dict[str, JsonValue]) -> ToolOutput: ...


@dataclass(frozen=True, eq=False)
class MCPTool:
    """One tool of one MCP server, called through that server's connection."""

    server_name: str
    description: str
    input_schema: Mapping[str, Any]
    arguments_model: type[BaseModel]
    connection: Caller

    @property
    def name(self) -> str:
        """The name the model calls it by: the server's, made acceptable to model APIs (1-64
        letters, digits, '_' or '-')."""
        return re.sub(r"[^A-Za-z0-9_-]", "_", self.server_name)[:64] or "tool"

    @property
    def metadata(self) -> dict[str, JsonValue]:
        return {MCP_SERVER_KEY: self.connection.name, MCP_TOOL_KEY: self.server_name}

    def invoke(self, arguments: BaseModel, context: ToolContext) -> ToolOutput:
        return self.connection.call(self, arguments.model_dump(mode="json"))


def arguments_model(tool_name: str, schema: dict[str, Any]) -> type[BaseModel]:
    """The arguments model of a tool whose input schema is ``schema``: its validator is built
    once, here (a schema the server got wrong is checked leniently, as an object)."""
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        validator = validator_class(schema)
    except jsonschema.SchemaError:
        validator = jsonschema.Draft202012Validator({"type": "object"})

    class Arguments(BaseModel):
        model_config = ConfigDict(extra="allow", frozen=True, title=f"{tool_name} arguments")

        @model_validator(mode="before")
        @classmethod
        def _held_to_schema(cls, data: Any) -> Any:
            problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
            if problems:
                raise PydanticCustomError(
                    "json_schema", "{problems}", {"problems": "; ".join(map(_problem, problems))}
                )
            return data

    return Arguments


def _problem(error: jsonschema.ValidationError) -> str:
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def tool_output(tool: MCPTool, result: types.CallToolResult) -> ToolOutput:
    """The server's answer as the tool's result: its text (other content named), its
    structured content kept in the metadata (and sent when there is no text), and an
    ``isError`` answer an error the model sees."""
    metadata = tool.metadata
    structured = result.structured_content
    if structured is not None:
        metadata[STRUCTURED_KEY] = json.loads(json.dumps(structured))
    text = "\n".join(_text(block) for block in result.content)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    if result.is_error:
        said = text or "the tool reported an error and said nothing more"
        return ToolOutput(content=f"Error: {said}", is_error=True, metadata=metadata)
    return ToolOutput(content=text, metadata=metadata)


def _text(block: object) -> str:
    """A content block as text: text as it is, anything else named with its type and size."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource {resource.uri} ({resource.mime_type or 'binary'}), not shown]"
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} ({block.mime_type}), {len(block.data)} base64 characters]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri}]"
    return f"[{type(block).__name__} content, not shown]"

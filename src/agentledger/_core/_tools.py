"""Tools: what a model may call, described by a JSON schema and validated before they run.

``@tool`` turns a typed Python function into a tool: the JSON schema of its arguments comes from
the signature (through pydantic), the description from the docstring, and each parameter's
description from an ``Args:`` section of the docstring or an ``Annotated[..., Field(...)]``.
Anything else with a ``name``, a ``description``, an ``arguments_model`` and an ``invoke``
method is a tool too (:class:`Tool`). A tool may also carry an ``input_schema`` (the JSON
schema the model is shown, when it is not the arguments model's own: an MCP server's tool) and
``metadata`` (kept on every execution of it, failed ones included).

Tools may also come from a :class:`ToolSource` (an MCP server): connected once per agent and
listed at the start of each run, since what such a source offers can change.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model

from .._values import AgentState, Spend, ToolCall, ToolSchema
from ..errors import ToolDefinitionError


class ToolOutput(BaseModel):
    """What a tool hands back, when it needs to say more than a plain return value.

    Tools usually return a value (a string is sent as it is, anything else JSON-encoded);
    returning a ``ToolOutput`` lets a tool mark its result as an error for the model, or link
    the run of a subagent it started.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    content: str
    is_error: bool = False
    child_run_id: str | None = None
    subtree: Spend | None = None
    """What the subagent run this tool started spent, its own subagents included."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Where a tool runs: the state before the step, the call, and the step's index.

    A function tool receives it when it declares a parameter annotated ``ToolContext``; that
    parameter is not part of the schema the model sees.
    """

    state: AgentState
    tool_call: ToolCall
    step_index: int
    in_flight: Spend | None = None
    """What the step that called this tool has spent so far (its inference), not yet in
    ``state``: part of what the run has used when a subagent's budget is worked out."""

    @property
    def run_id(self) -> str | None:
        return self.state.run_id

    @property
    def conversation_id(self) -> str:
        return self.state.conversation_id

    @property
    def idempotency_key(self) -> str:
        """``run_id:step_index:tool_call_id``, the same on every attempt at this call.

        A step is redone after a crash, so a tool may run more than once for one call; a tool
        with side effects can use this key to do them once.
        """
        return f"{self.run_id}:{self.step_index}:{self.tool_call.id}"


@runtime_checkable
class Tool(Protocol):
    """Anything the agent can offer a model as a tool."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def arguments_model(self) -> type[BaseModel]:
        """The pydantic model the model's arguments are validated against."""
        ...

    def invoke(self, arguments: BaseModel, context: ToolContext) -> object:
        """Run with validated arguments; return a value or a :class:`ToolOutput`."""
        ...


def tool_schema(tool: Tool) -> ToolSchema:
    """The JSON schema a model is shown for ``tool``; strict when the tool says so (a
    ``strict`` attribute, as ``@tool(strict=True)`` sets)."""
    given = getattr(tool, "input_schema", None)
    parameters = dict(given) if isinstance(given, Mapping) else tool_parameters(tool)
    parameters.pop("title", None)
    strict = getattr(tool, "strict", False) is True
    return ToolSchema(
        name=tool.name, description=tool.description, parameters=parameters, strict=strict
    )


def tool_parameters(tool: Tool) -> dict[str, Any]:
    """The JSON schema of ``tool``'s arguments model."""
    return tool.arguments_model.model_json_schema()


def tool_metadata(tool: Tool | None) -> dict[str, JsonValue]:
    """What ``tool`` asks to be kept on each of its executions (its ``metadata``: the MCP
    server it came from, say); empty for most tools."""
    given = getattr(tool, "metadata", None)
    return dict(given) if isinstance(given, Mapping) else {}


@dataclass(frozen=True)
class FunctionTool:
    """A tool backed by a Python function; made by :func:`tool`."""

    function: Callable[..., object]
    name: str
    description: str
    arguments_model: type[BaseModel]
    context_parameter: str | None = None
    strict: bool = False

    def invoke(self, arguments: BaseModel, context: ToolContext) -> object:
        kwargs = {name: getattr(arguments, name) for name in type(arguments).model_fields}
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        return self.function(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        """Call the underlying function directly, as if it were not a tool."""
        return self.function(*args, **kwargs)


@overload
def tool(function: Callable[..., object], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, strict: bool = False
) -> Callable[[Callable[..., object]], FunctionTool]: ...
def tool(
    function: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
) -> FunctionTool | Callable[[Callable[..., object]], FunctionTool]:
    """Turn a typed function into a tool: ``@tool`` or ``@tool(name=..., description=...,
    strict=True)``; a strict tool's arguments are held to its schema by the provider."""

    def decorate(fn: Callable[..., object]) -> FunctionTool:
        return function_tool(fn, name=name, description=description, strict=strict)

    return decorate if function is None else decorate(function)


def function_tool(
    function: Callable[..., object],
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
) -> FunctionTool:
    """The :class:`FunctionTool` for ``function``; what ``@tool`` does."""
    tool_name = function.__name__ if name is None else name
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise ToolDefinitionError(
            f"tool name {tool_name!r} is not accepted by model APIs: use 1-64 letters, "
            "digits, '_' or '-' (pass name=... to @tool)."
        )
    summary, parameter_docs = _parse_docstring(inspect.getdoc(function) or "")
    model, context_parameter = _arguments_model(function, tool_name, parameter_docs)
    return FunctionTool(
        function=function,
        name=tool_name,
        description=description or summary or tool_name,
        arguments_model=model,
        context_parameter=context_parameter,
        strict=strict,
    )


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*$")
_PARAM = re.compile(r"^\s+\*{0,2}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description before any section, and Google-style ``Args:`` descriptions."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    param_indent: int | None = None
    for line in doc.splitlines():
        header = _SECTION.match(line)
        if header:
            section, current, param_indent = header.group(1), None, None
        elif section is None:
            summary.append(line)
        elif section in _PARAMETER_SECTIONS:
            indent = len(line) - len(line.lstrip())
            match = _PARAM.match(line)
            if match and (param_indent is None or indent <= param_indent):
                param_indent, current = indent, match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


_PARAMETER_SECTIONS = frozenset({"Args", "Arguments", "Parameters"})


def _arguments_model(
    function: Callable[..., object], tool_name: str, docs: Mapping[str, str]
) -> tuple[type[BaseModel], str | None]:
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ToolDefinitionError(
            f"cannot resolve the type hints of {function.__qualname__}: {exc}. "
            "Import the types it names at module level."
        ) from exc
    fields: dict[str, Any] = {}
    context_parameter: str | None = None
    for parameter in inspect.signature(function).parameters.values():
        annotation = _parameter_annotation(function, parameter, hints)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        # A description in Annotated[..., Field(description=...)] stands unless the docstring
        # gives one.
        info = Field(default, description=docs[parameter.name]) if parameter.name in docs else None
        fields[parameter.name] = (annotation, info if info is not None else Field(default))
    model = create_model(_model_name(tool_name), __config__=ConfigDict(extra="forbid"), **fields)
    return model, context_parameter


def _parameter_annotation(
    function: Callable[..., object], parameter: inspect.Parameter, hints: Mapping[str, Any]
) -> Any:
    if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        raise ToolDefinitionError(
            f"{function.__qualname__} takes *{parameter.name}; a tool's arguments must be "
            "named parameters so that a JSON schema can describe them."
        )
    if parameter.name not in hints:
        raise ToolDefinitionError(
            f"parameter {parameter.name!r} of {function.__qualname__} has no type annotation; "
            "@tool builds the JSON schema the model sees from the annotations."
        )
    return hints[parameter.name]


def _model_name(tool_name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[_-]+", tool_name)) + "Arguments"


class ToolSet:
    """An immutable set of tools with unique names, in the order given."""

    __slots__ = ("_schemas", "_tools")

    def __init__(self, tools: Iterable[Tool | Callable[..., object]] = ()) -> None:
        by_name: dict[str, Tool] = {}
        for item in tools:
            resolved = item if isinstance(item, Tool) else function_tool(item)
            if resolved.name in by_name:
                raise ToolDefinitionError(
                    f"two tools are named {resolved.name!r}; a model calls tools by name, so "
                    "names must be unique (rename one with @tool(name=...))."
                )
            by_name[resolved.name] = resolved
        self._tools: Mapping[str, Tool] = by_name
        self._schemas = tuple(tool_schema(t) for t in by_name.values())  # built once, sent often

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def schemas(self) -> tuple[ToolSchema, ...]:
        return self._schemas

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"ToolSet({', '.join(self._tools)})"


EMPTY_TOOLS = ToolSet()


@runtime_checkable
class ToolConnection(Protocol):
    """A :class:`ToolSource` opened for one agent: what it offers now, and how to let it go."""

    def tools(self) -> Sequence[Tool]:
        """The source's tools under the names it gives them, listed (or reconnected) when the
        source is new, gone or says its list changed. A source that never listed its tools
        and cannot be reached raises :class:`~agentledger.ToolServerError` (the run does not
        begin); one that listed them before offers what it last listed, and says why in the
        log."""
        ...

    def close(self) -> None:
        """Let the source go (stop its process, end its session); idempotent."""
        ...


@runtime_checkable
class ToolSource(Protocol):
    """Where an agent's tools may come from besides its own (an MCP server): a description,
    opened once per agent (:meth:`connect` does no I/O; the first run does)."""

    @property
    def name(self) -> str:
        """The source's name: recorded with its tools' calls, and the prefix of a tool name
        another tool of the agent already has."""
        ...

    def connect(self) -> ToolConnection: ...


@dataclass(frozen=True)
class RenamedTool:
    """A source's tool offered under another name (prefixed by its source's name, because
    another tool has its own): the same tool otherwise."""

    tool: Tool
    name: str

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def arguments_model(self) -> type[BaseModel]:
        return self.tool.arguments_model

    @property
    def input_schema(self) -> object:
        return getattr(self.tool, "input_schema", None)

    @property
    def metadata(self) -> object:
        return getattr(self.tool, "metadata", None)

    def invoke(self, arguments: BaseModel, context: ToolContext) -> object:
        return self.tool.invoke(arguments, context)


def combined_tools(own: ToolSet, sources: Sequence[tuple[str, Sequence[Tool]]]) -> ToolSet:
    """The agent's own tools followed by each source's, a source's tool prefixed with its
    source's name (``git_status`` from ``"repo"`` becomes ``repo_git_status``) when another
    tool (the agent's own, or another source's) has the same name: names never collide."""
    counts: dict[str, int] = {}
    for _, listed in sources:
        for item in listed:
            counts[item.name] = counts.get(item.name, 0) + 1
    combined: list[Tool] = list(own)
    names = frozenset(own.names())
    for source, listed in sources:
        combined.extend(_unique(item, source, names, counts) for item in listed)
    return ToolSet(combined)


def _unique(item: Tool, source: str, own: Collection[str], counts: Mapping[str, int]) -> Tool:
    if item.name not in own and counts[item.name] < 2:
        return item
    return RenamedTool(item, f"{source}_{item.name}"[:64])  # as long as model APIs take

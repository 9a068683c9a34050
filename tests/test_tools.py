"""``@tool``: from a typed Python function to a schema a model can call."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import Field

from agentledger import (
    AgentBuilder,
    AgentState,
    Messages,
    Tool,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolSchema,
    UsageError,
    tool,
)
from agentledger._core import FunctionTool
from agentledger.llm import InferenceResponse, ScriptedLLM


def offered(*tools: object) -> tuple[ToolSchema, ...]:
    """The tool schemas an agent with ``tools`` offers the model."""
    llm = ScriptedLLM([InferenceResponse(content="ok")])
    agent = AgentBuilder().with_llm(llm).with_tools(tools).build()
    agent.execute(AgentState.empty().with_messages(Messages.from_string("hi")))
    return llm.requests[0].tools


def schema_of(function: object) -> ToolSchema:
    (schema,) = offered(function)
    return schema


@tool
def book_flight(
    origin: str,
    destination: str,
    passengers: int = 1,
    cabin: Literal["economy", "business"] = "economy",
    flexible: bool = False,
) -> str:
    """Book a flight between two airports.

    The booking is provisional until paid.

    Args:
        origin: IATA code of the departure airport.
        destination: IATA code of the arrival
            airport, on two lines.
        passengers: How many people fly.

    Returns:
        A booking reference.
    """
    return f"{origin}-{destination}"


def test_the_schema_marks_parameters_without_defaults_as_required():
    parameters = schema_of(book_flight).parameters

    assert parameters["type"] == "object"
    assert set(parameters["properties"]) == {
        "origin",
        "destination",
        "passengers",
        "cabin",
        "flexible",
    }
    assert sorted(parameters["required"]) == ["destination", "origin"]


@pytest.mark.parametrize(
    ("parameter", "expected"),
    [
        ("origin", {"type": "string"}),
        ("passengers", {"type": "integer", "default": 1}),
        ("cabin", {"enum": ["economy", "business"], "default": "economy"}),
        ("flexible", {"type": "boolean", "default": False}),
    ],
)
def test_the_schema_describes_each_parameter_type(parameter, expected):
    described = schema_of(book_flight).parameters["properties"][parameter]

    assert {key: described[key] for key in expected} == expected


def test_the_description_is_the_docstring_before_its_sections():
    description = schema_of(book_flight).description

    assert description.startswith("Book a flight between two airports.")
    assert "provisional" in description
    assert "Args" not in description
    assert "Returns" not in description
    assert "booking reference" not in description


@pytest.mark.parametrize(
    ("parameter", "description"),
    [
        ("origin", "IATA code of the departure airport."),
        ("destination", "IATA code of the arrival airport, on two lines."),
        ("passengers", "How many people fly."),
    ],
)
def test_parameter_descriptions_come_from_the_args_section(parameter, description):
    properties = schema_of(book_flight).parameters["properties"]

    assert properties[parameter]["description"] == description


def test_a_parameter_left_out_of_the_args_section_has_no_description():
    properties = schema_of(book_flight).parameters["properties"]

    assert "description" not in properties["flexible"]


def test_annotated_fields_give_descriptions_and_constraints():
    @tool
    def search(
        query: Annotated[str, Field(description="What to look for.")],
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> list[str]:
        """Search the catalogue."""
        return []

    properties = schema_of(search).parameters["properties"]

    assert properties["query"]["description"] == "What to look for."
    assert properties["limit"]["minimum"] == 1
    assert properties["limit"]["maximum"] == 50
    assert properties["limit"]["default"] == 10


def test_annotated_constraints_are_enforced_on_the_models_arguments():
    @tool
    def search(limit: Annotated[int, Field(ge=1, le=50)] = 10) -> str:
        """Search."""
        return str(limit)

    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=(ToolCall(id="c1", name="search", arguments={"limit": 0}),)
            ),
            InferenceResponse(content="done"),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([search]).build()

    state = agent.execute(AgentState.empty().with_messages(Messages.from_string("hi")))

    (execution,) = state.step_executions[0].step.tool_executions
    assert execution.is_error
    assert "limit" in execution.error


def test_name_and_description_can_be_given_to_the_decorator():
    @tool(name="lookup-city", description="Find a city by name.")
    def find(name: str) -> str:
        """Ignored docstring."""
        return name

    assert find.name == "lookup-city"
    assert find.description == "Find a city by name."
    schema = schema_of(find)
    assert schema.name == "lookup-city"
    assert schema.description == "Find a city by name."


def test_a_function_without_a_docstring_is_described_by_its_name():
    @tool
    def ping() -> str:
        return "pong"

    assert schema_of(ping).description
    assert schema_of(ping).parameters["properties"] == {}


def test_a_tool_context_parameter_is_left_out_of_the_schema():
    @tool
    def note(text: str, context: ToolContext, urgent: bool = False) -> str:
        """Take a note."""
        return context.idempotency_key

    parameters = schema_of(note).parameters

    assert set(parameters["properties"]) == {"text", "urgent"}
    assert parameters["required"] == ["text"]


def test_a_function_tool_is_still_callable_as_the_plain_function():
    assert isinstance(book_flight, FunctionTool)
    assert isinstance(book_flight, Tool)
    assert book_flight("CDG", "OSL") == "CDG-OSL"
    assert book_flight(origin="LIM", destination="CUZ", passengers=2) == "LIM-CUZ"


def test_a_plain_typed_function_works_as_a_tool():
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    llm = ScriptedLLM(
        [
            InferenceResponse(
                tool_calls=(ToolCall(id="c1", name="multiply", arguments={"a": 6, "b": 7}),)
            ),
            InferenceResponse(content="42"),
        ]
    )
    agent = AgentBuilder().with_llm(llm).with_tools([multiply]).build()

    state = agent.execute(AgentState.empty().with_messages(Messages.from_string("6*7?")))

    (schema,) = llm.requests[0].tools
    assert schema.name == "multiply"
    assert schema.description == "Multiply two integers."
    assert state.step_executions[0].step.tool_executions[0].result == "42"


def test_the_tools_are_offered_in_the_order_given(add_tool, weather_tool):
    assert [s.name for s in offered(weather_tool, book_flight, add_tool)] == [
        "get_weather",
        "book_flight",
        "add",
    ]


# --- functions that cannot be tools ---------------------------------------------------------


def no_annotation(city) -> str:  # type: ignore[no-untyped-def]
    return city


def star_args(*cities: str) -> str:
    return ""


def star_kwargs(**options: str) -> str:
    return ""


UNDESCRIBABLE = pytest.mark.parametrize(
    "function",
    [no_annotation, star_args, star_kwargs],
    ids=["parameter without annotation", "*args", "**kwargs"],
)


@UNDESCRIBABLE
def test_a_function_that_cannot_be_described_is_refused(function):
    with pytest.raises(ToolDefinitionError):
        tool(function)


@UNDESCRIBABLE
def test_a_plain_function_that_cannot_be_described_is_refused_by_the_builder(function):
    with pytest.raises(ToolDefinitionError):
        AgentBuilder().with_llm(ScriptedLLM([])).with_tools([function]).build()


@pytest.mark.parametrize(
    "name",
    ["has space", "dotted.name", "x" * 65, "naïve", "semi;colon"],
    ids=["space", "dot", "too long", "non-ascii", "punctuation"],
)
def test_a_name_model_apis_refuse_is_refused(name):
    with pytest.raises(ToolDefinitionError, match="name"):

        @tool(name=name)
        def anything(value: str) -> str:
            return value


@pytest.mark.parametrize("name", ["a", "get_weather", "get-weather", "X9", "x" * 64])
def test_names_model_apis_accept_are_accepted(name):
    @tool(name=name)
    def anything(value: str) -> str:
        return value

    assert anything.name == name


def test_two_tools_with_the_same_name_in_one_agent_are_refused(weather_tool):
    @tool(name="get_weather")
    def other_weather(city: str) -> str:
        """Another weather tool."""
        return city

    with pytest.raises(ToolDefinitionError, match="get_weather"):
        AgentBuilder().with_llm(ScriptedLLM([])).with_tools([weather_tool, other_weather]).build()


def test_tool_definition_errors_are_usage_errors():
    assert issubclass(ToolDefinitionError, UsageError)

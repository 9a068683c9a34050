"""The tool schemas the provider tests offer the model."""

from agentledger import ToolSchema

WEATHER = ToolSchema(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
"""One required argument."""
ADD = ToolSchema(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 0}},
        "required": ["a"],
    },
)
"""A required argument and one with a default."""

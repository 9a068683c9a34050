"""The names the spans use: the OpenTelemetry GenAI semantic conventions of semantic
conventions v1.44.0 (the ``gen_ai.*`` attribute registry, the agent, model and tool spans),
plus agentledger's own ids under ``agentledger.*``.

The GenAI conventions are still in development upstream: names are kept here, once, so that
following a later version is a change to this module alone.
"""

from __future__ import annotations

SEMCONV_VERSION = "1.44.0"
"""The semantic conventions the spans follow."""

SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The conventions' opt-in for message contents on spans."""

# Operations (gen_ai.operation.name) and the span names they give.
INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
OTHER_ERROR = "_OTHER"
"""The conventions' ``error.type`` when no better one is known."""

# agentledger's own: the rows a span comes from.
RUN_ID = "agentledger.run_id"
PARENT_RUN_ID = "agentledger.parent_run_id"
ROOT_RUN_ID = "agentledger.root_run_id"
DEPTH = "agentledger.depth"
STEP_ID = "agentledger.step_id"
STEP_INDEX = "agentledger.step_index"
STEP_COUNT = "agentledger.step_count"
TOOL_EXECUTION_ID = "agentledger.tool_execution_id"
CHILD_RUN_ID = "agentledger.child_run_id"
STATUS = "agentledger.status"
STOP_REASON = "agentledger.stop_reason"
COST_USD = "agentledger.cost_usd"

PROVIDERS = {"OpenAI": "openai", "Anthropic": "anthropic"}
"""Our providers' names (``LLM.provider``) as the conventions spell them."""

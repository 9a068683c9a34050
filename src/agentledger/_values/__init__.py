"""The values: immutable pydantic models that every other layer builds on, and nothing else.

Messages and the sectioned store, tool calls and tool schemas, the model's request and
response (and the ``LLM`` protocol), usage, the continuation's values, steps, the agent state
and compaction records; with the time-ordered ids and the rule for storable text. This package
imports pydantic and the error tree only.
"""

from ._compaction import Compaction, CompactionKind, CompactionStatus
from ._continuation import (
    ContinuationDecision,
    ContinuationOutcome,
    ExecutionBudget,
    StopReason,
    Verdict,
)
from ._events import (
    Event,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    StepRecorded,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from ._ids import SHORT_ID_LENGTH, Clock, new_id, short_ids, utc_now
from ._inference import (
    LLM,
    AsyncLLM,
    InferenceDelta,
    InferenceRequest,
    InferenceResponse,
    ModelSettings,
    ResponseFormat,
    StreamingLLM,
    StreamItem,
    ToolChoice,
    ToolSchema,
)
from ._messages import (
    EMPTY_MESSAGES,
    Message,
    MessageLike,
    Messages,
    MessageStore,
    Role,
    Section,
    ToolCall,
    ToolCalls,
)
from ._prices import Price, PriceTable
from ._state import AgentState, AgentStatus, FiledMessage
from ._steps import (
    MCP_SERVER_KEY,
    MCP_TOOL_KEY,
    REACT_METADATA_KEY,
    TOOL_ERROR_KEY,
    AgentStep,
    ContextMasking,
    StepExecution,
    StepType,
    ToolExecution,
    output_error,
    split_output,
)
from ._text import (
    STORABLE_TEXT_RULE,
    Unstorable,
    check_storable,
    find_unstorable,
    printable,
    terminal_text,
)
from ._times import moment, time_ago
from ._usage import UNPRICED, Spend, Usage, cost_text, money

__all__ = [
    "EMPTY_MESSAGES",
    "LLM",
    "MCP_SERVER_KEY",
    "MCP_TOOL_KEY",
    "REACT_METADATA_KEY",
    "SHORT_ID_LENGTH",
    "STORABLE_TEXT_RULE",
    "TOOL_ERROR_KEY",
    "UNPRICED",
    "AgentState",
    "AgentStatus",
    "AgentStep",
    "AsyncLLM",
    "Clock",
    "Compaction",
    "CompactionKind",
    "CompactionStatus",
    "ContextMasking",
    "ContinuationDecision",
    "ContinuationOutcome",
    "Event",
    "ExecutionBudget",
    "FiledMessage",
    "InferenceDelta",
    "InferenceRequest",
    "InferenceResponse",
    "Message",
    "MessageLike",
    "MessageStore",
    "Messages",
    "ModelSettings",
    "Price",
    "PriceTable",
    "ReasoningDelta",
    "ResponseFormat",
    "Role",
    "RunFinished",
    "RunStarted",
    "Section",
    "Spend",
    "StepExecution",
    "StepRecorded",
    "StepType",
    "StopReason",
    "StreamItem",
    "StreamingLLM",
    "TextDelta",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCalls",
    "ToolChoice",
    "ToolExecution",
    "ToolSchema",
    "Unstorable",
    "Usage",
    "Verdict",
    "check_storable",
    "cost_text",
    "find_unstorable",
    "moment",
    "money",
    "new_id",
    "output_error",
    "printable",
    "short_ids",
    "split_output",
    "terminal_text",
    "time_ago",
    "utc_now",
]

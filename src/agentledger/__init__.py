"""agentledger: an LLM agent loop whose memory is a relational ledger.

The conversation (user messages and final answers) and the execution trace (tool calls, tool
results, reasoning, errors) are kept apart. This module is the public door: everything listed
in ``__all__`` is public API and can be imported from here. ``import agentledger`` loads the
error tree only; every other name is loaded when first used, so a program pays for what it
uses: the values load pydantic, the SQL ledger SQLAlchemy, the HTTP providers httpx, analytics
DuckDB, and none of the last three is loaded by the agent itself (nor ``agentledger --help`` by
any of them).

The packages, from the bottom up: ``values`` (immutable values), ``core`` (pure code over
them), ``recording`` (the recorder interface), ``loop`` (the agent loop), ``drivers``, then
``builder`` and ``llm`` (providers) on top of the loop; ``ledger`` (SQL) records through the
recorder interface, ``analytics`` reads the ledger's tables, and ``cli`` sits on everything.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from .errors import (
    AgentLedgerError,
    AmbiguousIdError,
    CompactionError,
    ConfigurationError,
    ConversationBusyError,
    ExportError,
    LeaseLostError,
    LedgerBusyError,
    LedgerCorruptError,
    LedgerError,
    LedgerOpenError,
    LedgerPermissionError,
    LedgerReadOnlyError,
    LedgerUnavailableError,
    LLMError,
    MigrationError,
    NotFoundError,
    ProcessorError,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderStreamCutError,
    ProviderTimeoutError,
    RunError,
    SchemaVersionError,
    ScriptExhaustedError,
    ToolDefinitionError,
    ToolServerError,
    UnstorableTextError,
    UsageError,
)

if _TYPE_CHECKING:
    from .analytics import Analytics
    from .builder import (
        AgentBuilder,
    )
    from .core import (
        AppendStepMessages,
        AppendToolTraceToBuffer,
        CarryOver,
        ClearExecutionBuffer,
        ContextBudget,
        Criterion,
        FinishReasonCriterion,
        FunctionTool,
        StateProcessor,
        StopWhen,
        Tool,
        ToolContext,
        ToolOutput,
        ToolSet,
        estimate_tokens,
        stop_when,
        tool,
    )
    from .drivers import (
        ReActDriver,
        ToolCallingDriver,
    )
    from .ledger import Ledger
    from .llm import (
        AnthropicMessages,
        OpenAIChat,
        OpenAIResponses,
        Price,
        PriceTable,
        RetryPolicy,
        ScriptedLLM,
    )
    from .loop import (
        Agent,
        AgentConfig,
        Driver,
        FinalResponse,
        SpawnSubagentTool,
        StepRequest,
        SubagentPolicy,
        SubagentSpec,
        ToolExecutor,
    )
    from .recording import (
        InMemoryRecorder,
        Recorder,
        RunResult,
    )
    from .values import (
        LLM,
        AgentState,
        AgentStatus,
        AgentStep,
        AsyncLLM,
        Compaction,
        ContinuationDecision,
        ContinuationOutcome,
        ExecutionBudget,
        InferenceDelta,
        InferenceRequest,
        InferenceResponse,
        Message,
        Messages,
        MessageStore,
        ModelSettings,
        Role,
        Section,
        Spend,
        StepExecution,
        StepType,
        StopReason,
        StreamingLLM,
        StreamItem,
        ToolCall,
        ToolExecution,
        ToolSchema,
        Usage,
        Verdict,
    )

_LAZY = {
    "Agent": "agentledger.loop",
    "AgentBuilder": "agentledger.builder",
    "AgentConfig": "agentledger.loop",
    "AgentState": "agentledger.values",
    "AgentStatus": "agentledger.values",
    "AgentStep": "agentledger.values",
    "Analytics": "agentledger.analytics",
    "AnthropicMessages": "agentledger.llm",
    "AppendStepMessages": "agentledger.core",
    "AppendToolTraceToBuffer": "agentledger.core",
    "AsyncLLM": "agentledger.values",
    "CarryOver": "agentledger.core",
    "ClearExecutionBuffer": "agentledger.core",
    "Compaction": "agentledger.values",
    "ContextBudget": "agentledger.core",
    "ContinuationDecision": "agentledger.values",
    "ContinuationOutcome": "agentledger.values",
    "Criterion": "agentledger.core",
    "Driver": "agentledger.loop",
    "ExecutionBudget": "agentledger.values",
    "FinalResponse": "agentledger.loop",
    "FinishReasonCriterion": "agentledger.core",
    "FunctionTool": "agentledger.core",
    "InMemoryRecorder": "agentledger.recording",
    "InferenceDelta": "agentledger.values",
    "InferenceRequest": "agentledger.values",
    "InferenceResponse": "agentledger.values",
    "LLM": "agentledger.values",
    "Ledger": "agentledger.ledger",
    "Message": "agentledger.values",
    "MessageStore": "agentledger.values",
    "Messages": "agentledger.values",
    "ModelSettings": "agentledger.values",
    "OpenAIChat": "agentledger.llm",
    "OpenAIResponses": "agentledger.llm",
    "Price": "agentledger.llm",
    "PriceTable": "agentledger.llm",
    "ReActDriver": "agentledger.drivers",
    "Recorder": "agentledger.recording",
    "RetryPolicy": "agentledger.llm",
    "Role": "agentledger.values",
    "RunResult": "agentledger.recording",
    "ScriptedLLM": "agentledger.llm",
    "Section": "agentledger.values",
    "SpawnSubagentTool": "agentledger.loop",
    "Spend": "agentledger.values",
    "StateProcessor": "agentledger.core",
    "StepExecution": "agentledger.values",
    "StepRequest": "agentledger.loop",
    "StepType": "agentledger.values",
    "StopReason": "agentledger.values",
    "StopWhen": "agentledger.core",
    "StreamItem": "agentledger.values",
    "StreamingLLM": "agentledger.values",
    "SubagentPolicy": "agentledger.loop",
    "SubagentSpec": "agentledger.loop",
    "Tool": "agentledger.core",
    "ToolCall": "agentledger.values",
    "ToolCallingDriver": "agentledger.drivers",
    "ToolContext": "agentledger.core",
    "ToolExecution": "agentledger.values",
    "ToolExecutor": "agentledger.loop",
    "ToolOutput": "agentledger.core",
    "ToolSchema": "agentledger.values",
    "ToolSet": "agentledger.core",
    "Usage": "agentledger.values",
    "Verdict": "agentledger.values",
    "estimate_tokens": "agentledger.core",
    "stop_when": "agentledger.core",
    "tool": "agentledger.core",
}
"""Public names loaded when first used (``from agentledger import Ledger`` loads the ledger),
and the package that has each."""

__all__ = [
    "LLM",
    "Agent",
    "AgentBuilder",
    "AgentConfig",
    "AgentLedgerError",
    "AgentState",
    "AgentStatus",
    "AgentStep",
    "AmbiguousIdError",
    "Analytics",
    "AnthropicMessages",
    "AppendStepMessages",
    "AppendToolTraceToBuffer",
    "AsyncLLM",
    "CarryOver",
    "ClearExecutionBuffer",
    "Compaction",
    "CompactionError",
    "ConfigurationError",
    "ContextBudget",
    "ContinuationDecision",
    "ContinuationOutcome",
    "ConversationBusyError",
    "Criterion",
    "Driver",
    "ExecutionBudget",
    "ExportError",
    "FinalResponse",
    "FinishReasonCriterion",
    "FunctionTool",
    "InMemoryRecorder",
    "InferenceDelta",
    "InferenceRequest",
    "InferenceResponse",
    "LLMError",
    "LeaseLostError",
    "Ledger",
    "LedgerBusyError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerOpenError",
    "LedgerPermissionError",
    "LedgerReadOnlyError",
    "LedgerUnavailableError",
    "Message",
    "MessageStore",
    "Messages",
    "MigrationError",
    "ModelSettings",
    "NotFoundError",
    "OpenAIChat",
    "OpenAIResponses",
    "Price",
    "PriceTable",
    "ProcessorError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderResponseError",
    "ProviderServerError",
    "ProviderStreamCutError",
    "ProviderTimeoutError",
    "ReActDriver",
    "Recorder",
    "RetryPolicy",
    "Role",
    "RunError",
    "RunResult",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "Section",
    "SpawnSubagentTool",
    "Spend",
    "StateProcessor",
    "StepExecution",
    "StepRequest",
    "StepType",
    "StopReason",
    "StopWhen",
    "StreamItem",
    "StreamingLLM",
    "SubagentPolicy",
    "SubagentSpec",
    "Tool",
    "ToolCall",
    "ToolCallingDriver",
    "ToolContext",
    "ToolDefinitionError",
    "ToolExecution",
    "ToolExecutor",
    "ToolOutput",
    "ToolSchema",
    "ToolServerError",
    "ToolSet",
    "UnstorableTextError",
    "Usage",
    "UsageError",
    "Verdict",
    "__version__",
    "estimate_tokens",
    "stop_when",
    "tool",
]


def __getattr__(name: str) -> _Any:
    if name == "__version__":
        value: _Any = _version()
    elif name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0.0.0"

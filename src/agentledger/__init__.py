"""agentledger: an LLM agent loop whose memory is a relational ledger.

The conversation (user messages and final answers) and the execution trace (tool calls, tool
results, reasoning, errors) are kept apart. This module is the public door: everything listed
in ``__all__`` is public API.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from .agent import Agent, AgentConfig, FinalResponse
from .builder import AgentBuilder
from .context import CarryOver, Compaction, ContextBudget
from .continuation import (
    ContinuationDecision,
    ContinuationOutcome,
    ExecutionBudget,
    StopReason,
    Verdict,
)
from .criteria import Criterion, FinishReasonCriterion, StopWhen, stop_when
from .drivers import Driver, StepRequest, ToolCallingDriver
from .errors import (
    AgentLedgerError,
    CompactionError,
    ConfigurationError,
    ConversationBusyError,
    LeaseLostError,
    LedgerBusyError,
    LedgerCorruptError,
    LedgerError,
    LedgerOpenError,
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
    ProviderTimeoutError,
    RunError,
    SchemaVersionError,
    ScriptExhaustedError,
    ToolDefinitionError,
    UnstorableTextError,
    UsageError,
)
from .executor import ToolExecutor
from .messages import Message, Messages, MessageStore, Role, Section, ToolCall
from .processors import (
    AppendStepMessages,
    AppendToolTraceToBuffer,
    ClearExecutionBuffer,
    StateProcessor,
)
from .react import ReActDriver
from .recording import InMemoryRecorder, Recorder, RunResult
from .state import AgentState, AgentStatus
from .steps import AgentStep, StepExecution, StepType, ToolExecution
from .subagents import SpawnSubagentTool, SubagentPolicy, SubagentSpec
from .tools import FunctionTool, Tool, ToolContext, ToolOutput, ToolSchema, ToolSet, tool
from .usage import Spend, Usage

try:
    __version__ = _version("agentledger")
except _PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "Agent",
    "AgentBuilder",
    "AgentConfig",
    "AgentLedgerError",
    "AgentState",
    "AgentStatus",
    "AgentStep",
    "AppendStepMessages",
    "AppendToolTraceToBuffer",
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
    "FinalResponse",
    "FinishReasonCriterion",
    "FunctionTool",
    "InMemoryRecorder",
    "LLMError",
    "LeaseLostError",
    "LedgerBusyError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerOpenError",
    "LedgerUnavailableError",
    "Message",
    "MessageStore",
    "Messages",
    "MigrationError",
    "NotFoundError",
    "ProcessorError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderResponseError",
    "ProviderServerError",
    "ProviderTimeoutError",
    "ReActDriver",
    "Recorder",
    "Role",
    "RunError",
    "RunResult",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "Section",
    "SpawnSubagentTool",
    "Spend",
    "StateProcessor",
    "StepExecution",
    "StepRequest",
    "StepType",
    "StopReason",
    "StopWhen",
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
    "ToolSet",
    "UnstorableTextError",
    "Usage",
    "UsageError",
    "Verdict",
    "__version__",
    "stop_when",
    "tool",
]

"""The door: every name ``agentledger`` exports, and the one list of them.

Type checkers read this file; at run time ``agentledger/__init__.py`` reads the same lines to
load each name from its module when it is first used, and builds ``__all__`` from them.
"""

# The agent and how it is built
from ._builder import AgentBuilder as AgentBuilder
from ._core import ContextBudget as ContextBudget
from ._core import StateProcessor as StateProcessor

# Tools and what runs between steps
from ._core import Tool as Tool
from ._core import ToolContext as ToolContext
from ._core import ToolOutput as ToolOutput
from ._core import ToolSet as ToolSet
from ._core import estimate_tokens as estimate_tokens
from ._core import stop_when as stop_when
from ._core import tool as tool
from ._drivers import ReActDriver as ReActDriver
from ._drivers import ToolCallingDriver as ToolCallingDriver
from ._loop import Agent as Agent
from ._loop import AgentConfig as AgentConfig
from ._loop import AsyncRunStream as AsyncRunStream
from ._loop import Driver as Driver
from ._loop import RunStream as RunStream
from ._loop import StepRequest as StepRequest
from ._loop import SubagentPolicy as SubagentPolicy
from ._loop import SubagentSpec as SubagentSpec
from ._recording import AsyncTurn as AsyncTurn
from ._recording import InMemoryRecorder as InMemoryRecorder
from ._recording import Recorder as Recorder
from ._recording import RunResult as RunResult
from ._recording import Turn as Turn
from ._values import LLM as LLM

# The values a user constructs or reads
from ._values import AgentState as AgentState
from ._values import AgentStatus as AgentStatus
from ._values import AgentStep as AgentStep
from ._values import AsyncLLM as AsyncLLM
from ._values import ExecutionBudget as ExecutionBudget
from ._values import InferenceDelta as InferenceDelta
from ._values import InferenceRequest as InferenceRequest
from ._values import InferenceResponse as InferenceResponse
from ._values import Message as Message
from ._values import Messages as Messages
from ._values import ModelSettings as ModelSettings
from ._values import Role as Role
from ._values import StepType as StepType
from ._values import StopReason as StopReason
from ._values import StreamingLLM as StreamingLLM
from ._values import StreamItem as StreamItem
from ._values import ToolCall as ToolCall
from ._values import ToolSchema as ToolSchema
from ._values import Usage as Usage
from .analytics import Analytics as Analytics

# The errors a caller catches most (the whole tree is in agentledger.errors)
from .errors import AgentLedgerError as AgentLedgerError
from .errors import ConversationBusyError as ConversationBusyError
from .errors import LedgerError as LedgerError
from .errors import NotFoundError as NotFoundError
from .errors import ProviderError as ProviderError
from .errors import RunError as RunError
from .errors import ToolDefinitionError as ToolDefinitionError
from .errors import ToolServerError as ToolServerError
from .errors import UsageError as UsageError

# The ledger and its analytics
from .ledger import Ledger as Ledger

# The providers
from .llm import AnthropicMessages as AnthropicMessages
from .llm import OpenAIChat as OpenAIChat
from .llm import OpenAIResponses as OpenAIResponses
from .llm import Price as Price
from .llm import PriceTable as PriceTable
from .llm import RetryPolicy as RetryPolicy
from .llm import ScriptedLLM as ScriptedLLM

__version__: str

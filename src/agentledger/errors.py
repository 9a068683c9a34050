"""The one error root of agentledger, and its tree.

::

    AgentLedgerError                  everything agentledger raises on purpose
    ├── UsageError                    you used the library wrong: fix the calling code
    │   ├── ConfigurationError        an agent cannot be built as configured
    │   ├── ToolDefinitionError       a function cannot be turned into a tool
    │   └── NotFoundError             no conversation or run has that id
    ├── RunError                      a run could not go on: the state says how far it got
    │   ├── LLMError                  the model call failed
    │   │   └── ScriptExhaustedError  a ScriptedLLM was asked for more responses than it holds
    │   └── ProcessorError            a state processor broke the step contract
    └── LedgerError                   the ledger could not do what was asked
        ├── ConversationBusyError     another run holds the conversation's lease
        ├── LeaseLostError            another process took this run's conversation over
        ├── LedgerBusyError           the database stayed locked beyond the retries
        ├── SchemaVersionError        the database's schema is newer than this code
        └── LedgerOpenError           the database cannot be opened (corrupt, a directory, ...)

Errors raised while a run is in progress by the model or by a tool do not escape the loop:
a tool error becomes an error tool result the model sees, and a model error ends the run with
status ``failed`` (the state keeps its execution buffer, so the run can be continued). Every
message says what happened and what to do next.
"""

from __future__ import annotations


class AgentLedgerError(Exception):
    """Root of every error agentledger raises on purpose."""


class UsageError(AgentLedgerError):
    """The library was called in a way it does not support; the calling code must change."""


class ConfigurationError(UsageError):
    """An agent cannot be built or run as configured."""


class ToolDefinitionError(UsageError):
    """A Python function cannot be described to a model as a tool."""


class RunError(AgentLedgerError):
    """A run could not go on."""


class LLMError(RunError):
    """A call to the model failed."""


class ScriptExhaustedError(LLMError):
    """A :class:`~agentledger.llm.ScriptedLLM` ran out of scripted responses."""


class ProcessorError(RunError):
    """A state processor did not keep the processor contract."""


class NotFoundError(UsageError):
    """No conversation, run or step has the id given."""


class LedgerError(AgentLedgerError):
    """The ledger could not do what was asked."""


class ConversationBusyError(LedgerError):
    """A run is already in progress on the conversation (it holds the conversation's lease)."""


class LeaseLostError(LedgerError):
    """This run's lease on its conversation expired and another process took it over."""


class LedgerBusyError(LedgerError):
    """The database stayed locked by other writers beyond the configured retries."""


class SchemaVersionError(LedgerError):
    """The database was migrated by a newer agentledger than this one."""


class LedgerOpenError(LedgerError):
    """The database cannot be opened: not a database, corrupt, a directory, unreadable."""

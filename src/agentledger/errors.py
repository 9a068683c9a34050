"""The one error root of agentledger, and its tree.

::

    AgentLedgerError                  everything agentledger raises on purpose
    ├── UsageError                    you used the library wrong: fix the calling code
    │   ├── ConfigurationError        an agent cannot be built as configured
    │   ├── ToolDefinitionError       a function cannot be turned into a tool
    │   ├── NotFoundError             no conversation or run has that id
    │   │   └── AmbiguousIdError      the prefix given for an id begins more than one
    │   ├── UnstorableTextError       text with a NUL character or a lone surrogate
    │   └── ImportSourceError         a file to import is of another kind or version
    ├── RunError                      a run could not go on: the state says how far it got
    │   ├── LLMError                  the model call failed
    │   │   ├── ScriptExhaustedError  a ScriptedLLM was asked for more responses than it holds
    │   │   └── ProviderError         a model provider's HTTP API failed (after any retries)
    │   │       ├── ProviderConnectionError      the server could not be reached
    │   │       │   └── ProviderStreamCutError   a stream broke after text was shown
    │   │       ├── ProviderTimeoutError         the server did not answer in time
    │   │       ├── ProviderRateLimitError       429: too many requests
    │   │       ├── ProviderServerError          5xx: the provider failed
    │   │       ├── ProviderAuthenticationError  401/403: the API key was refused
    │   │       ├── ProviderRequestError         another 4xx: the request was refused
    │   │       └── ProviderResponseError        the answer could not be understood
    │   ├── ProcessorError            a state processor broke the step contract
    │   ├── CompactionError           a summary of the conversation could not be made
    │   └── ToolServerError           a tool server (MCP) never started: no run began
    ├── LedgerError                   the ledger could not do what was asked
    │   ├── ConversationBusyError     another run holds the conversation's lease
    │   ├── LeaseLostError            another process took this run's conversation over
    │   ├── LedgerBusyError           the database stayed locked beyond the retries
    │   ├── LedgerUnavailableError    the database failed or went away while recording
    │   ├── SchemaVersionError        the database's schema is newer than this code
    │   ├── MigrationError            a migration refused to run: it would lose data, or the
    │   │                             role may not change the schema
    │   ├── LedgerOpenError           the database cannot be opened (corrupt, a directory, ...)
    │   ├── LedgerReadOnlyError       a write to a ledger this handle may only read
    │   ├── LedgerPermissionError     the database refused this role (privileges, row-level
    │   │                             security)
    │   └── LedgerCorruptError        rows read back are damaged (checksum, undecodable value)
    └── ExportError                   an export could not be delivered (collector, file)

Errors raised while a run is in progress by the model or by a tool do not escape the loop
(except a ``LedgerError`` from a tool, such as a subagent's ledger failing: that fails the run):
a tool error becomes an error tool result the model sees, and a model error ends the run with
status ``failed`` (the state keeps its execution buffer, so the run can be continued). Every
message says what happened and what to do next.
"""

from __future__ import annotations

__all__ = [
    "AgentLedgerError",
    "AmbiguousIdError",
    "CompactionError",
    "ConfigurationError",
    "ConversationBusyError",
    "ExportError",
    "ImportSourceError",
    "LLMError",
    "LeaseLostError",
    "LedgerBusyError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerOpenError",
    "LedgerPermissionError",
    "LedgerReadOnlyError",
    "LedgerUnavailableError",
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
    "ProviderStreamCutError",
    "ProviderTimeoutError",
    "RunError",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "ToolDefinitionError",
    "ToolServerError",
    "UnstorableTextError",
    "UsageError",
]


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


class ProviderError(LLMError):
    """A model provider's HTTP API failed, after the retries its :class:`RetryPolicy` allows.

    ``provider`` names the API (``"OpenAI"``, ``"Anthropic"``), ``status_code`` is the HTTP
    status when there was a response, ``attempts`` how many requests were sent and
    ``retryable`` whether trying again later may succeed. ``type``, ``code`` and ``param`` are
    the fields of the error object the provider answered with (``"insufficient_quota"``,
    ``"context_length_exceeded"``, the parameter it refused), ``request_id`` the id the
    provider gave the request (its ``x-request-id`` or ``request-id`` header): quote it to the
    provider's support. Each is ``None`` when the provider did not say; those it said are in the
    message too. Messages never hold an API key.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        attempts: int = 1,
        retryable: bool = False,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.attempts = attempts
        self.retryable = retryable
        self.type = type
        self.code = code
        self.param = param
        self.request_id = request_id


class ProviderConnectionError(ProviderError):
    """The provider's server could not be reached (DNS, refused connection, TLS)."""


class ProviderStreamCutError(ProviderConnectionError):
    """A streamed response broke off after some of it had been yielded: not retried, since the
    caller has already shown that text. ``partial`` is the response as far as it came (its
    content and reasoning; tool calls only when they had arrived whole)."""

    def __init__(
        self, message: str, *, provider: str, partial: object = None, attempts: int = 1
    ) -> None:
        super().__init__(message, provider=provider, attempts=attempts, retryable=False)
        self.partial = partial


class ProviderTimeoutError(ProviderError):
    """The provider's server did not answer within the client's timeout."""


class ProviderRateLimitError(ProviderError):
    """The provider kept answering 429 Too Many Requests."""


class ProviderServerError(ProviderError):
    """The provider kept answering with a 5xx server error."""


class ProviderAuthenticationError(ProviderError):
    """The provider refused the API key (401) or its permissions (403)."""


class ProviderRequestError(ProviderError):
    """The provider refused the request itself (400, 404, 422, ...): retrying will not help."""


class ProviderResponseError(ProviderError):
    """The provider answered with a body this client cannot read."""


class ProcessorError(RunError):
    """A state processor did not keep the processor contract."""


class CompactionError(RunError):
    """Summarizing a conversation failed (the model call, or an empty summary). The
    conversation is exactly as it was: nothing left the model's context."""


class ToolServerError(RunError):
    """A tool server the agent was given (an MCP server) could not be started or reached when
    a run was to begin, and it never listed its tools to this agent. The run did not begin:
    nothing was written (the user's message neither: the caller still holds it), and the model
    was not asked. ``server`` is the server's name; ``stderr`` the end of what it wrote to its
    standard error (a stdio server), or None. The message says what to do.

    A server that listed its tools before and went away later does not raise this: calling its
    tools fails as tool errors the model sees, and the next run tries to reconnect.
    """

    def __init__(self, message: str, *, server: str, stderr: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.stderr = stderr


class NotFoundError(UsageError):
    """No conversation, run or step has the id given."""


class AmbiguousIdError(NotFoundError):
    """The prefix given for an id begins more than one id, so it names none of them.

    ``candidates`` holds the ids it begins, in full (the first ten, in id order); the message
    lists them. Give more characters of the one meant.
    """

    def __init__(self, message: str, *, candidates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.candidates = candidates


class UnstorableTextError(UsageError):
    """Text the ledger cannot store on every backend: a NUL character (PostgreSQL refuses it)
    or a lone surrogate (not encodable as UTF-8). The message says where the character is."""


class ImportSourceError(UsageError):
    """A file given to ``agentledger import`` is not one it reads: not a SQLite database, of
    another kind than asked, or of a version of its program that the importer does not know.
    The message names what was found in it."""


class LedgerError(AgentLedgerError):
    """The ledger could not do what was asked."""


class ConversationBusyError(LedgerError):
    """A run is already in progress on the conversation (it holds the conversation's lease)."""


class LeaseLostError(LedgerError):
    """This run's lease on its conversation expired and another process took it over."""


class LedgerBusyError(LedgerError):
    """The database stayed locked by other writers beyond the configured retries."""


class LedgerUnavailableError(LedgerError):
    """The database failed (went away, restarted, an I/O error) while a run was recorded.

    What was committed before stays; the run is left as of its last recorded step, and can be
    resumed (``Agent.resume``, ``agentledger recover``) once the database is back.
    """


class SchemaVersionError(LedgerError):
    """The database was migrated by a newer agentledger than this one."""


class MigrationError(LedgerError):
    """A migration refused to run, because it would lose data or because the database role may
    not change the schema (an application role: migrate as the role that owns the tables);
    nothing was changed."""


class LedgerOpenError(LedgerError):
    """The database cannot be opened: not a database, corrupt, a directory, unreadable."""


class LedgerReadOnlyError(LedgerError):
    """A write was asked of a ledger this handle may only read: one opened with
    ``read_only=True`` (``--read-only``), a SQLite file or directory this user may not write, or
    a database that refuses writes (a PostgreSQL standby, a read-only session). Nothing was
    written; the message says why the ledger is read-only and what to do."""


class LedgerPermissionError(LedgerError):
    """The database refused this role what was asked: a privilege it was not granted, or, on
    PostgreSQL, a row outside the tenant its transaction is scoped to (row-level security: an
    unscoped handle of the application role may write no row). The transaction was rolled
    back; the message says whether to scope the handle (``ledger.scoped(tenant_id=...)``) or
    which role to connect as."""


class LedgerCorruptError(LedgerError):
    """Rows read from the database are damaged: a row's checksum does not match its columns, or
    a value cannot be decoded. Nothing is returned from damaged rows; restore from a backup."""


class ExportError(AgentLedgerError):
    """An export could not be delivered: the collector could not be reached or refused the
    request, or the file could not be written. The message says where it stopped; an export
    can be run again."""

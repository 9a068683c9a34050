"""A compaction of a conversation's context, as the ledger records it (``context_compactions``):
observation masking within a run, or a summary between runs (see :mod:`agentledger._core`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._ids import new_id, utc_now
from ._usage import Usage


class CompactionKind(StrEnum):
    """What a compaction did; the values of ``context_compactions.kind``."""

    MASKING = "masking"
    """Old tool results of a run's execution buffer replaced by placeholders, before a step."""
    SUMMARY = "summary"
    """The oldest conversation messages replaced by a summary, between runs."""


class CompactionStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    """The summary could not be made: the conversation was left exactly as it was."""


class Compaction(BaseModel):
    """One compaction of a conversation's context, as ``context_compactions`` records it: what
    left the context (``messages``), the tokens before and after (their difference is what it
    saved), and for a summary, the model call that made it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str = Field(default_factory=new_id)
    conversation_id: str
    kind: CompactionKind
    status: CompactionStatus = CompactionStatus.COMPLETED
    messages: int = 0
    """Tool results masked, or messages (with the summary before) summarized."""
    tokens_before: int
    tokens_after: int
    run_id: str | None = None
    """Masking: the run whose step it was."""
    step_index: int | None = None
    first_seq: int | None = None
    """Summary: the positions (``seq``) of the first and last message it replaced."""
    last_seq: int | None = None
    summary_id: str | None = None
    """Summary: the id of the summary message."""
    model: str | None = None
    usage: Usage = Usage.model_construct()
    cost_usd: float | None = None
    error: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    duration_ms: float = 0.0
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after

"""What the ledger returns about conversations and runs: immutable values, not table rows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ..messages import Message
from ..usage import Spend, Usage


class ConversationRecord(BaseModel):
    """A row of ``conversations``."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str
    title: str | None = None
    parent_run_id: str | None = None
    version: int = 0
    lease_holder: str | None = None
    lease_run_id: str | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class RunRecord(BaseModel):
    """A row of ``agent_runs``. ``usage`` and ``cost_usd`` are the run's own steps."""

    model_config = ConfigDict(frozen=True)

    id: str
    conversation_id: str
    parent_run_id: str | None = None
    root_run_id: str
    depth: int = 0
    agent_name: str
    model: str | None = None
    status: str
    stop_reason: str | None = None
    error: str | None = None
    started_at: datetime
    finished_at: datetime | None = None
    heartbeat_at: datetime
    step_count: int = 0
    usage: Usage = Usage()
    cost_usd: float | None = None
    fully_priced: bool = True
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def duration_ms(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds() * 1000.0


class SearchHit(BaseModel):
    """A conversation message that matched a search."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    section: str
    seq: int
    run_id: str | None
    message: Message


class RunTree(BaseModel):
    """A run and the subagent runs below it, with what each spent.

    ``exclusive`` is the run's own steps; ``inclusive`` adds its whole subtree. Both are summed
    from the step rows, where usage is recorded once, so nothing is counted twice.
    """

    model_config = ConfigDict(frozen=True)

    run: RunRecord
    exclusive: Spend
    children: tuple[RunTree, ...] = ()

    @property
    def inclusive(self) -> Spend:
        total = self.exclusive
        for child in self.children:
            total = total + child.inclusive
        return total

    def walk(self) -> Iterator[RunTree]:
        """This node, then its descendants, depth first in the order they started."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, run_id: str) -> RunTree | None:
        return next((node for node in self.walk() if node.run.id == run_id), None)

"""Run trees: a run and the subagent runs below it, with what each spent, summed from the step
rows (where usage is recorded once)."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict

from .._values import Spend
from ._run_nodes import inclusive, walk
from .tables import AgentRun


class RunTree(BaseModel):
    """A run and the subagent runs below it, with what each spent.

    ``exclusive`` is the run's own steps; ``inclusive`` adds its whole subtree. Both are summed
    from the step rows, where usage is recorded once, so nothing is counted twice.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    run: AgentRun
    exclusive: Spend
    children: tuple[RunTree, ...] = ()

    @property
    def inclusive(self) -> Spend:
        return inclusive(self)

    def walk(self) -> Iterator[RunTree]:
        """This node, then its descendants, depth first in the order they started."""
        return walk(self)

    def find(self, run_id: str) -> RunTree | None:
        return next((node for node in self.walk() if node.run.id == run_id), None)

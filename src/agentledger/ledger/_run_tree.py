"""Run trees: a run and the subagent runs below it, with what each spent, summed from the step
rows (where usage is recorded once)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, select

from ..values import Spend
from ._rows import run_of, usage_of
from .checksums import check_row
from .tables import AgentRun, agent_runs, step_executions


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


def read_run_tree(conn: Connection, top: AgentRun) -> RunTree:
    """The tree below ``top`` (a run read from the ledger), every run of it read at once."""
    rows = (
        conn.execute(
            select(agent_runs)
            .where(agent_runs.c.root_run_id == top.root_run_id)
            .order_by(agent_runs.c.started_at, agent_runs.c.id)
        )
        .mappings()
        .all()
    )
    spends = _step_spends(conn, [r["id"] for r in rows])
    runs = [run_of(r) for r in rows]
    children: dict[str | None, list[AgentRun]] = {}
    for run in runs:
        children.setdefault(run.parent_run_id, []).append(run)

    def node(run: AgentRun, seen: frozenset[str]) -> RunTree:
        if run.id in seen:
            raise ValueError(f"run {run.id} is its own ancestor")
        kids = tuple(node(c, seen | {run.id}) for c in children.get(run.id, ()))
        return RunTree(run=run, exclusive=spends.get(run.id, Spend()), children=kids)

    found = next((r for r in runs if r.id == top.id), None)
    if found is None:
        raise ValueError(f"run {top.id} is not in the tree of its root {top.root_run_id}")
    return node(found, frozenset())


def _step_spends(conn: Connection, run_ids: Sequence[str]) -> dict[str, Spend]:
    """Each run's own spend, summed from its step rows (each checked against its checksum)."""
    s = step_executions.c
    spends: dict[str, Spend] = {}
    query = select(step_executions).where(s.run_id.in_(run_ids)).order_by(s.run_id, s.step_index)
    for row in conn.execute(query).mappings():
        check_row(step_executions, row)
        # A step called the model when it holds the model's message; one without a cost is
        # unpriced.
        step = Spend(
            usage=usage_of(row),
            cost_usd=row["cost_usd"],
            steps=1,
            fully_priced=row["message_id"] is None or row["cost_usd"] is not None,
        )
        run_id = row["run_id"]
        spends[run_id] = spends[run_id] + step if run_id in spends else step
    return spends

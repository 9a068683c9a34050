"""Run trees, read once for both readers: a run and the subagent runs below it, with what each
spent, summed from the step rows (where usage is recorded once). ``Ledger.run_tree`` makes
:class:`~agentledger.ledger.RunTree` nodes of them, :class:`~agentledger.ledger.LedgerReader`
its own; both sum and walk through the functions here."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from .._values import Spend
from ._columns import usage_of
from ._row_mapping import Row, built
from ._sql import Reads, select_rows
from .checksums import check_row


class Node(Protocol):
    """A node of a run tree: its run's own spend and its children."""

    @property
    def exclusive(self) -> Spend: ...

    @property
    def children(self) -> Sequence[Node]: ...


N = TypeVar("N")
T = TypeVar("T", bound=Node)

NOTHING = Spend.model_construct()
"""What a run without a step spent."""

_RUNS = select_rows("agent_runs") + "WHERE root_run_id = :root ORDER BY started_at, id"
_STEPS = (
    select_rows("step_executions", "s")
    + "JOIN agent_runs r ON r.id = s.run_id WHERE r.root_run_id = :root "
    "ORDER BY s.run_id, s.step_index"
)


def tree_rows(reads: Reads, root_run_id: str) -> tuple[list[dict[str, Any]], dict[str, Spend]]:
    """The rows of every run of the tree ``root_run_id``, in the order they started, and each
    run's own spend, summed from its step rows (each checked against its checksum)."""
    runs = reads.rows(_RUNS, {"root": root_run_id}, "agent_runs")
    spends: dict[str, Spend] = {}
    for row in reads.rows(_STEPS, {"root": root_run_id}, "step_executions"):
        check_row("step_executions", row)
        # A step called the model when it holds the model's message; one without a cost is
        # unpriced.
        step = built(
            Spend,
            row,
            usage=usage_of(row),
            cost_usd=row["cost_usd"],
            steps=1,
            fully_priced=row["message_id"] is None or row["cost_usd"] is not None,
        )
        run_id = row["run_id"]
        spends[run_id] = spends[run_id] + step if run_id in spends else step
    return runs, spends


def tree_of(
    rows: Sequence[Row], top_id: str, root_id: str, node: Callable[[Row, tuple[N, ...]], N]
) -> N:
    """The tree below the run ``top_id`` of the rows ``rows`` (every run of the tree
    ``root_id``, in the order they started), each run made a node by ``node`` (given its row
    and its children)."""
    children: dict[str | None, list[Row]] = {}
    for row in rows:
        children.setdefault(row["parent_run_id"], []).append(row)

    def build(row: Row, seen: frozenset[str]) -> N:
        if row["id"] in seen:
            raise ValueError(f"run {row['id']} is its own ancestor")
        kids = tuple(build(c, seen | {row["id"]}) for c in children.get(row["id"], ()))
        return node(row, kids)

    found = next((r for r in rows if r["id"] == top_id), None)
    if found is None:
        raise ValueError(f"run {top_id} is not in the tree of its root {root_id}")
    return build(found, frozenset())


def inclusive(node: Node) -> Spend:
    """What a node's run and its whole subtree spent."""
    total = node.exclusive
    for child in node.children:
        total = total + inclusive(child)
    return total


def walk(node: T) -> Iterator[T]:
    """``node``, then its descendants, depth first in the order they started."""
    yield node
    for child in node.children:
        yield from walk(child)  # type: ignore[misc]

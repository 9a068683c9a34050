"""A LangGraph graph on ``LedgerSaver`` killed mid-invocation (``support.graph_crash``): by
SIGKILL inside a node, inside a checkpoint's ``put`` before its COMMIT, and after its COMMIT
before ``put`` returned, on SQLite and PostgreSQL.

After the kill every checkpoint whose ``put`` returned is in the ledger and readable
(``get_tuple`` by its id, ``list`` of the thread), nothing newer than the last of them is there
unless its COMMIT happened, the ledger's invariants hold, and the graph, compiled again in
another process, resumes the thread from its latest checkpoint to the answer an unbroken run
gives, making no model step again that the checkpoint holds.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger.integrations.langgraph import LedgerSaver
from agentledger.ledger import Ledger
from support.databases import BACKENDS, fresh_database
from support.graph_crash import (
    FIRST_INVOCATION_PUTS,
    POINTS,
    TOOL_STEPS,
    build_graph,
    config,
    expected_messages,
    model_steps,
    read_acknowledged,
    run_killed,
)
from support.invariants import violations


@pytest.fixture
def killed_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database on the backend the test's parameters name."""
    with fresh_database(request.param, request, tmp_path) as url:
        yield url


@pytest.mark.parametrize(
    ("killed_url", "point"),
    [
        pytest.param(*backend.values, point, marks=backend.marks, id=f"{backend.id}-{point}")
        for backend in BACKENDS
        for point in POINTS
    ],
    indirect=["killed_url"],
)
def test_a_graph_killed_mid_invocation_keeps_every_checkpoint_put_returned_and_resumes(
    killed_url, point, tmp_path, reliability_report
):
    acknowledged_file = tmp_path / "acknowledged.jsonl"
    spec = {"url": killed_url, "point": point, "acknowledged": str(acknowledged_file)}
    finished = run_killed(spec, tmp_path, f"graph-{point}")
    assert finished.returncode == -signal.SIGKILL, finished.describe()
    acknowledged = read_acknowledged(acknowledged_file)
    assert len(acknowledged) >= FIRST_INVOCATION_PUTS  # the first invocation returned

    with Ledger.open(killed_url) as ledger:
        saver = LedgerSaver(ledger)
        for entry in acknowledged:
            named = {"configurable": {**config()["configurable"], **entry}}
            found = saver.get_tuple(named)
            assert found is not None, entry
            assert found.checkpoint["id"] == entry["checkpoint_id"]
            assert found.metadata["step"] >= -1
        listed = [t.checkpoint["id"] for t in saver.list(config())]
        ids = [entry["checkpoint_id"] for entry in acknowledged]
        assert set(ids) <= set(listed)
        latest = saver.get_tuple(config())
        assert latest is not None
        if point == "put-sent":  # the killed put's COMMIT never ran
            assert latest.checkpoint["id"] == ids[-1]
        if point == "put-committed":  # committed, though its put never returned
            assert latest.checkpoint["id"] > ids[-1] and len(listed) == len(ids) + 1
        assert violations(killed_url) == []

        resumed: list[tuple[int, int]] = []
        graph = build_graph(saver, lambda turn, step: resumed.append((turn, step)))
        held = graph.get_state(config()).values["messages"]
        assert len(held) < len(expected_messages())  # the killed invocation is unfinished
        graph.invoke(None, config())
        state = graph.get_state(config())
    assert state.next == ()
    # The second invocation is finished if any checkpoint of it was committed (killed before
    # its input's put, it left nothing to resume: nothing of it was acknowledged either).
    started = latest.checkpoint["id"] != ids[FIRST_INVOCATION_PUTS - 1]
    assert started or len(acknowledged) == FIRST_INVOCATION_PUTS
    expected = expected_messages() if started else expected_messages(1)
    assert [m.content for m in state.values["messages"]] == expected
    # From the latest checkpoint on: no model step it holds is made again.
    done = model_steps(held, 2)
    first = resumed[0][1] if resumed else TOOL_STEPS + 1
    assert first >= done and resumed == [(2, s) for s in range(first, TOOL_STEPS + 1)]
    assert resumed or not started
    ended = "the unbroken answer" if started else "the first answer (none of the second's put)"
    reliability_report(
        f"LangGraph killed ({point}): {len(acknowledged)} acknowledged checkpoints readable; "
        f"resumed to {ended}"
    )

"""A subagent whose ledger writes fail must not leave its run ``running`` under a completed
parent: the ledger's failure fails the parent's run too, so the whole tree can be resumed."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import event

from agentledger import AgentStatus
from agentledger.errors import LedgerUnavailableError
from agentledger.ledger import Ledger
from support.invariants import violations
from support.workload import build_agent


def test_a_subagent_cut_off_by_a_database_error_fails_its_parent_and_the_tree_resumes_whole(
    tmp_path, reliability_report
):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        agent = build_agent(ledger)  # "team ..." spawns two workers in one step
        runs: list[str] = []
        cut_off: set[str] = set()

        def track(_c: Any, _k: Any, statement: str, parameters: Any, *_: Any) -> None:
            if statement.startswith("INSERT INTO agent_runs"):
                columns = statement.split("(", 1)[1].split(")", 1)[0].split(", ")
                runs.append(parameters[columns.index("id")])

        def outage(_c: Any, _k: Any, statement: str, parameters: Any, *_: Any) -> None:
            if statement.startswith("INSERT INTO step_executions") and len(runs) > 1:
                cut_off.add(runs[1])  # the first subagent's run, from its first step on
            if any(p in cut_off for p in parameters or ()):
                raise sqlite3.OperationalError("disk I/O error")

        event.listen(ledger.engine, "after_cursor_execute", track)
        event.listen(ledger.engine, "before_cursor_execute", outage)
        with pytest.raises(LedgerUnavailableError, match="disk I/O error") as raised:
            agent.run("team of two")
        event.remove(ledger.engine, "before_cursor_execute", outage)
        assert "INSERT" not in str(raised.value)  # the database's message, not the SQL

        (root,) = [r for r in ledger.runs() if r.parent_run_id is None]
        assert root.status == "failed"  # its buffer kept: resumable
        resumed = agent.resume(root.id, stale_after=0)
        left = [run.id for run in ledger.stale_runs(stale_after=0)]
        statuses = {r.id: r.status for r in ledger.runs()}

    assert resumed.status is AgentStatus.COMPLETED
    assert "OperationalError" not in (resumed.answer or "")
    assert left == []
    assert set(statuses.values()) == {"completed"}, statuses
    assert violations(url) == []
    reliability_report(
        f"a subagent's writes failed (disk I/O error): the parent failed with "
        f"LedgerUnavailableError, resuming it finished the tree, {len(statuses)} runs completed"
    )

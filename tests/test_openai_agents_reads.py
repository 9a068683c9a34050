"""What ``LedgerSession`` costs the database: each ``add_items`` batch is one transaction (its
run begun, stepped and committed at once), and ``get_items`` reads a session in the same
transactions however many runs it has, in either view; and the two reads of the ledger it
builds its items from (``Ledger.runs_with_steps``, ``Ledger.speaking_runs``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentledger.integrations.openai_agents import LedgerSession
from agentledger.ledger import Ledger

SESSION = "user-9"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def turn(n: int) -> list[list[dict[str, Any]]]:
    """A turn as the SDK's ``Runner`` saves it: the user's message, a tool call with its
    output, the answer, each its own batch."""
    call_id = f"call-{n}"
    return [
        [{"role": "user", "content": f"question {n}"}],
        [
            {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call_id, "output": f"result {n}"},
        ],
        [{"role": "assistant", "content": f"answer {n}"}],
    ]


def add_turns(session: LedgerSession, first: int, last: int) -> None:
    for n in range(first, last):
        for batch in turn(n):
            run(session.add_items(batch))


def transactions_of(ledger: Ledger, work: Any) -> int:
    before = ledger.transactions
    work()
    return ledger.transactions - before


def test_each_batch_is_one_transaction(ledger):
    session = LedgerSession(SESSION, ledger)
    for batch in [*turn(0), *turn(1)]:  # the first creates the session's conversation
        assert transactions_of(ledger, lambda b=batch: run(session.add_items(b))) == 1
    assert len(ledger.runs(SESSION)) == 6
    assert ledger.verify() == []


@pytest.mark.parametrize("separate_trace", [True, False])
def test_get_items_reads_as_much_for_a_long_session_as_for_a_short_one(ledger, separate_trace):
    session = LedgerSession(SESSION, ledger, separate_trace=separate_trace)
    add_turns(session, 0, 2)
    short = transactions_of(ledger, lambda: run(session.get_items()))
    add_turns(session, 2, 8)
    long = transactions_of(ledger, lambda: run(session.get_items()))

    assert long == short
    assert len(run(session.get_items())) == (2 if separate_trace else 4) * 8


def test_runs_with_steps_gives_each_run_of_a_conversation_its_steps(ledger):
    add_turns(LedgerSession(SESSION, ledger), 0, 3)
    listed = ledger.runs_with_steps(SESSION)

    assert [run for run, _ in listed] == ledger.runs(SESSION)
    assert [steps for _, steps in listed] == [ledger.steps(r.id) for r in ledger.runs(SESSION)]
    assert [len(steps) for _, steps in listed] == [0, 1, 1] * 3  # the answer is a step too


def test_speaking_runs_leave_out_the_runs_that_only_recorded_steps(ledger):
    session = LedgerSession(SESSION, ledger)
    add_turns(session, 0, 2)
    run(session.pop_item())  # a run that says what it removed in its metadata, no step
    everything = ledger.runs(SESSION)

    speaking = ledger.speaking_runs(SESSION)
    # Each turn's tool call is a run of a step and no message; its question and its answer
    # are messages, and the pop is a run of neither.
    assert speaking == [r for n, r in enumerate(everything) if n % 3 != 1]
    assert [r.step_count for r in speaking] == [0, 1, 0, 1, 0]
    marked = ledger.speaking_runs(SESSION, metadata={"openai_agents_session": SESSION})
    assert marked == everything
    assert ledger.speaking_runs(SESSION, status="failed") == []

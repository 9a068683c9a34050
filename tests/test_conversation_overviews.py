"""``Ledger.conversation_overviews``: the listing of conversations the viewer shows, read in
pages that follow one another by ``(updated_at, id)``, on each backend; the same through
``LedgerReader``."""

from __future__ import annotations

from datetime import timedelta

from agentledger import Usage
from agentledger.ledger import Ledger, LedgerReader
from support.clocks import FakeClock


def pages(ledger: Ledger | LedgerReader, size: int, **wanted: object) -> list[list[str]]:
    """Every page of the listing, each as its conversations' ids, each page after the last."""
    found, after = [], None
    while True:
        page = ledger.conversation_overviews(limit=size, after=after, **wanted)
        if not page:
            return found
        found.append([o.id for o in page])
        after = (page[-1].updated_at, page[-1].id)


def test_pages_follow_one_another_by_time_then_id_when_conversations_share_a_time(db_url):
    still = FakeClock(tick=timedelta(0))  # every conversation updated at the same moment
    with Ledger.open(db_url) as ledger:
        at_once = ledger.with_clock(still)
        for n in range(5):
            at_once.create_conversation(conversation_id=f"c{n}")
        later = ledger.with_clock(FakeClock(start=still.start + timedelta(hours=1)))
        with later.turn(user="newest", conversation_id="c9") as turn:
            turn.answer("yes")

        assert pages(ledger, 2) == [["c9", "c4"], ["c3", "c2"], ["c1", "c0"]]


def test_an_overview_says_turns_cost_with_subagents_and_the_last_runs_status(db_url):
    with Ledger.open(db_url) as ledger:
        with ledger.turn(user="first", agent_name="lead", model="gpt-4o") as turn:
            turn.answer("one", usage=Usage(input_tokens=1000))
        with ledger.turn(user="second", conversation_id=turn.conversation_id) as again:
            again.fail("it broke")
        (overview,) = ledger.conversation_overviews()
        first_cost = ledger.run(turn.run_id).cost_usd

    assert (overview.first_message, overview.turns) == ("first", 2)
    assert (overview.agent_name, overview.status, overview.recorded_by) == (
        "agent",
        "failed",
        "turn",
    )
    assert overview.last_run_id == again.run_id
    assert first_cost is not None and overview.cost_usd == first_cost  # the failed one cost 0
    assert overview.fully_priced


def test_the_reader_lists_what_the_ledger_lists(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger.open(path) as ledger:
        for n in range(3):
            with ledger.turn(user=f"question {n}", agent_name=f"agent{n}") as turn:
                turn.answer("answer")
        expected = ledger.conversation_overviews(agent_name="agent1")
        listed = [[o.id] for o in ledger.conversation_overviews()]
    with LedgerReader.open(path) as reader:
        assert reader.conversation_overviews(agent_name="agent1") == expected
        assert pages(reader, 1) == listed
    assert [o.agent_name for o in expected] == ["agent1"]


def test_the_latest_turns_are_read_window_by_window_back_to_the_first(db_url):
    with Ledger.open(db_url) as ledger:
        conversation_id = None
        for n in range(5):
            with ledger.turn(user=f"question {n}", conversation_id=conversation_id) as turn:
                if n == 2:
                    turn.shown("cut ")
                    turn.interrupt()
                else:
                    turn.answer(f"answer {n}")
            conversation_id = turn.conversation_id
        whole = ledger.turns(conversation_id)
        windows, before = [], None
        while True:
            window = ledger.latest_turns(conversation_id, last=2, before_seq=before)
            windows.insert(0, window.turns)
            if window.first_seq == 0:
                break
            before = window.first_seq
        wanted = {t.run_id for t in windows[-1] if t.run_id is not None}
        some = ledger.runs_with_steps(conversation_id, run_ids=wanted)
        every = ledger.runs_with_steps(conversation_id)

    assert [len(w) for w in windows] == [1, 2, 2]
    assert [t for w in windows for t in w] == whole
    assert [m.content for m in windows[1][1].messages] == ["question 2", "cut "]
    assert some == [(run, steps) for run, steps in every if run.id in wanted]
    assert len(some) == 2

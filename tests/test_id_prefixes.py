"""Ids a person can type: ``Ledger.run`` and ``Ledger.conversation`` (and every read that takes
an id) find a run or a conversation by its id or by a unique prefix of it, at least
``SHORT_ID_LENGTH`` characters long; an ambiguous prefix is an error listing the ids it begins.
``short_ids`` gives each id its shortest unique prefix, among every id of its kind in the
ledger. On both backends, with ids chosen so that the prefixes they share are known."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from agentledger import AgentStatus, Message, NotFoundError, Role
from agentledger._values import SHORT_ID_LENGTH, new_id, short_ids
from agentledger.analytics import Analytics
from agentledger.errors import AmbiguousIdError
from agentledger.ledger import Ledger
from support.postgres import PostgresServer

RUNS = ("0abcdef0-1111-aaaa", "0abcdef0-1122-bbbb", "0abcdef0-2222-cccc", "9fedcba9-0000-dddd")
"""Run ids: three share their first 8 characters, two of them their first 11."""
CONVERSATIONS = tuple(f"c{run}" for run in RUNS)


def begin_run(ledger: Ledger, run_id: str, conversation_id: str) -> None:
    """A run with the id ``run_id`` begun on a new conversation ``conversation_id``, through the
    recorder (as an agent begins one)."""
    ledger.create_conversation(conversation_id=conversation_id, title=f"about {run_id}")
    state = ledger.recorder.load_conversation(conversation_id)
    user = Message(role=Role.USER, content=f"question of {run_id}")
    state = state.with_messages(state.messages().append(user)).model_copy(
        update={"run_id": run_id, "status": AgentStatus.RUNNING}
    )
    ledger.recorder.begin_run(state, user_message=user, agent_name="prefixes")


@pytest.fixture
def ledger(db_url: str) -> Iterator[Ledger]:
    with Ledger.open(db_url) as opened:
        for run_id, conversation_id in zip(RUNS, CONVERSATIONS, strict=True):
            begin_run(opened, run_id, conversation_id)
        yield opened


# --- the shortest unique prefix (a pure function) -------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "known", "expected"),
    [
        (["0abcdef0-1111"], [], ["0abcdef0"]),
        (["0abcdef0-1111"], ["0abcdef0-1122"], ["0abcdef0-111"]),
        (["0abcdef0-1111", "0abcdef0-1122"], [], ["0abcdef0-111", "0abcdef0-112"]),
        (["0abcdef0-2222"], ["0abcdef0-1111", "9fedcba9-0000"], ["0abcdef0-2"]),
        (["short"], ["shorter"], ["short"]),  # an id another begins with is shown whole
        (["0abcdef0-1111"], ["0abcdef0-1111"], ["0abcdef0"]),  # itself among the known
        (["0ABCDEF0-1111"], ["0abcdef0-1111"], ["0ABCDEF0"]),  # case counts
    ],
)
def test_short_ids_cut_each_id_to_the_shortest_prefix_no_other_id_begins_with(ids, known, expected):
    assert list(short_ids(ids, known).values()) == expected


# --- finding runs and conversations by a prefix ---------------------------------------------------


@pytest.mark.parametrize(
    ("given", "run_id"),
    [
        ("0abcdef0-1111-aaaa", "0abcdef0-1111-aaaa"),  # the whole id
        ("0abcdef0-111", "0abcdef0-1111-aaaa"),
        ("0abcdef0-2", "0abcdef0-2222-cccc"),
        ("9fedcba9", "9fedcba9-0000-dddd"),  # 8 characters are enough when unique
    ],
)
def test_a_run_and_a_conversation_are_found_by_their_id_or_a_unique_prefix(ledger, given, run_id):
    assert ledger.run(given).id == run_id
    assert ledger.conversation(f"c{given}").id == f"c{run_id}"


def test_an_ambiguous_prefix_is_an_error_listing_every_id_it_begins_in_full(ledger):
    with pytest.raises(AmbiguousIdError) as raised:
        ledger.run("0abcdef0")
    assert raised.value.candidates == RUNS[:3]
    message = str(raised.value)
    assert all(run_id in message for run_id in RUNS[:3]) and RUNS[3] not in message
    assert "3 runs" in message and "more characters" in message
    assert isinstance(raised.value, NotFoundError)  # no one run has that id

    with pytest.raises(AmbiguousIdError) as raised:
        ledger.conversation("c0abcdef0-11")
    assert raised.value.candidates == CONVERSATIONS[:2]


def test_an_ambiguous_prefix_lists_the_first_ten_ids_it_begins_and_says_there_are_more(ledger):
    many = [f"manymany-{n:02}" for n in range(12)]
    for conversation_id in many:
        ledger.create_conversation(conversation_id=conversation_id)
    with pytest.raises(AmbiguousIdError) as raised:
        ledger.conversation("manymany")
    assert raised.value.candidates == tuple(many[:10])
    assert "more than 10 conversations; the first 10" in str(raised.value)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("0abcdef1", "no run id begins with it"),
        ("9fedcba", "a prefix needs at least 8 characters"),  # unique, but too short
        ("0ABCDEF0-2", "no run id begins with it"),  # ids are compared case for case
        ("0abcdef0-2222-cccc-and-more", "no run id begins with it"),
    ],
)
def test_a_prefix_that_begins_no_id_or_is_too_short_is_not_found(ledger, given, says):
    with pytest.raises(NotFoundError) as raised:
        ledger.run(given)
    assert not isinstance(raised.value, AmbiguousIdError)
    assert f"no run {given!r} in this ledger ({says}; see `agentledger runs`)" == str(raised.value)


def test_an_exact_id_wins_over_the_longer_ids_it_begins(ledger):
    ledger.create_conversation(conversation_id="exactid0")
    ledger.create_conversation(conversation_id="exactid0-longer")
    assert ledger.conversation("exactid0").id == "exactid0"
    assert ledger.short_ids(["exactid0"], of="conversation") == {"exactid0": "exactid0"}


def test_characters_sql_patterns_give_a_meaning_are_plain_characters_in_a_prefix(ledger):
    ledger.create_conversation(conversation_id="100%_off-sale-1")
    ledger.create_conversation(conversation_id="100xxoff-sale-2")
    assert ledger.conversation("100%_off").id == "100%_off-sale-1"
    with pytest.raises(NotFoundError):
        ledger.conversation("100%%off")


def test_every_read_that_takes_an_id_takes_a_unique_prefix(ledger):
    run_prefix, conversation_prefix = "0abcdef0-2", "c0abcdef0-2"
    run_id, conversation_id = RUNS[2], CONVERSATIONS[2]
    assert [m.content for m in ledger.messages(conversation_prefix)] == [f"question of {run_id}"]
    assert ledger.history(conversation_prefix) == ledger.history(conversation_id)
    assert ledger.model_context(conversation_prefix) == ledger.model_context(conversation_id)
    assert ledger.compactions(conversation_prefix) == []
    assert [r.id for r in ledger.runs(conversation_prefix)] == [run_id]
    assert [
        h.conversation_id for h in ledger.search("question", conversation_id=conversation_prefix)
    ] == [conversation_id]
    assert ledger.run_tree(run_prefix).run.id == run_id
    assert ledger.steps(run_prefix) == ()
    assert ledger.tool_executions(run_prefix) == ()
    assert len(ledger.trace_messages(run_prefix)) == 0
    assert len(ledger.buffer(run_prefix)) == 0


def test_search_in_an_unknown_conversation_is_not_found(ledger):
    with pytest.raises(NotFoundError, match="no conversation 'nope'"):
        ledger.search("question", conversation_id="nope")


# --- the prefixes a listing shows -----------------------------------------------------------------


def test_short_ids_are_unique_among_every_id_of_their_kind_in_the_ledger(ledger):
    # Asked for one id, its prefix still tells it apart from the ids not asked about.
    assert ledger.short_ids([RUNS[0]], of="run") == {RUNS[0]: "0abcdef0-111"}
    shown = ledger.short_ids(RUNS, of="run")
    assert shown == {
        RUNS[0]: "0abcdef0-111",
        RUNS[1]: "0abcdef0-112",
        RUNS[2]: "0abcdef0-2",
        RUNS[3]: "9fedcba9",
    }
    assert all(ledger.run(prefix).id == run_id for run_id, prefix in shown.items())
    conversations = ledger.short_ids(CONVERSATIONS, of="conversation")
    assert all(ledger.conversation(p).id == c for c, p in conversations.items())


def test_ids_that_share_a_prefix_up_to_a_character_near_the_surrogates_are_told_apart(ledger):
    """A prefix is a range of ids up to the character after its last one: after U+D7FF comes
    U+E000 (no text holds a surrogate), after U+10FFFF nothing."""
    made = ["abcdefg\ud7ff-1", "abcdefg\ud7ff-2", "abcdefg\ue000-3", "abcdefg\U0010ffff-4"]
    for conversation_id in made:
        ledger.create_conversation(conversation_id=conversation_id)
    shown = ledger.short_ids(made, of="conversation")
    assert list(shown.values()) == [
        "abcdefg\ud7ff-1",
        "abcdefg\ud7ff-2",
        *(i[:8] for i in made[2:]),
    ]
    assert [ledger.conversation(prefix).id for prefix in shown.values()] == made
    with pytest.raises(AmbiguousIdError) as raised:
        ledger.conversation("abcdefg\ud7ff")
    assert raised.value.candidates == tuple(made[:2])


def test_a_prefix_is_compared_character_for_character_whatever_the_databases_collation(
    pg_server: PostgresServer,
) -> None:
    """A language's collation orders "abcdefga-2" between "abcdefgA" and "abcdefgB" (case
    counts after the letters): there, a prefix is no range of the primary key's order."""
    from psycopg import sql

    name = f"agentledger_icu_{uuid.uuid4().hex[:12]}"
    with pg_server.connect() as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
            ).format(sql.Identifier(name))
        )
    url = pg_server.url(name)
    try:
        with Ledger.open(url) as ledger:
            made = ["abcdefgA-1", "abcdefga-2", "abcdefg,-3", "abcdefg--4"]
            for conversation_id in made:
                ledger.create_conversation(conversation_id=conversation_id)
            shown = ledger.short_ids(made, of="conversation")
            assert list(shown.values()) == [i[:8] for i in made]
            assert [ledger.conversation(prefix).id for prefix in shown.values()] == made
    finally:
        pg_server.drop_database(url)


def test_analytics_shortens_ids_as_the_ledger_does(ledger, db_url):
    with Analytics.open(db_url) as analytics:
        assert analytics.short_ids(RUNS, of="run") == ledger.short_ids(RUNS, of="run")
        assert analytics.short_ids(CONVERSATIONS[:1], of="conversation") == ledger.short_ids(
            CONVERSATIONS[:1], of="conversation"
        )


def test_the_short_ids_of_time_ordered_ids_find_them_again(ledger):
    """Ids made a few microseconds apart (UUIDv7) share long beginnings."""
    made = [new_id() for _ in range(3)]
    for run_id in made:
        begin_run(ledger, run_id, f"c-{run_id}")
    shown = ledger.short_ids(made, of="run")
    for run_id, prefix in shown.items():
        assert len(prefix) >= SHORT_ID_LENGTH and run_id.startswith(prefix)
        assert ledger.run(prefix).id == run_id

"""Google ADK's session-service contract, asserted the same way against ADK's own
``InMemorySessionService`` (the reference) and ``LedgerSessionService`` on SQLite and
PostgreSQL: a difference from the reference is a failing test. The behaviours are those ADK's
shared session-service tests check, written here as tests of our own; then an ADK ``Runner``
drives an agent with a scripted model through each service."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from agentledger.errors import LedgerCorruptError
from agentledger.integrations.adk import LedgerSessionService
from agentledger.ledger import Ledger
from support.databases import fresh_database
from support.ledger import Database

T = TypeVar("T")

SERVICES = [
    pytest.param("in_memory", id="in_memory"),
    pytest.param("sqlite", id="ledger-sqlite"),
    pytest.param("postgresql", id="ledger-postgresql", marks=pytest.mark.postgresql),
]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


@pytest.fixture(params=SERVICES)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseSessionService]:
    if request.param == "in_memory":
        yield InMemorySessionService()
        return
    with fresh_database(request.param, request, tmp_path) as url, Ledger.open(url) as ledger:
        yield LedgerSessionService(ledger)


def event(
    text: str = "hi", *, at: float | None = None, delta: dict[str, Any] | None = None, **more: Any
) -> Event:
    return Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
        timestamp=time.time() if at is None else at,
        **more,
    )


def test_an_unknown_session_is_none(service: BaseSessionService) -> None:
    assert run(service.get_session(app_name="a", user_id="u", session_id="nope")) is None


def test_a_created_session_reads_back_equal_and_is_gone_once_deleted(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u", state={"k": 1})
        assert (made.app_name, made.user_id, made.state) == ("a", "u", {"k": 1})
        assert made.id and made.last_update_time <= time.time()
        got = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        assert got == made
        await service.delete_session(app_name="a", user_id="u", session_id=made.id)
        assert await service.get_session(app_name="a", user_id="u", session_id=made.id) is None

    run(scenario())


def test_an_id_taken_is_refused_and_the_same_id_of_another_user_is_another_session(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        first = await service.create_session(app_name="a", user_id="u1", session_id="s")
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="a", user_id="u1", session_id="s")
        await service.create_session(app_name="a", user_id="u2", session_id="s")
        await service.append_event(first, event())
        other = await service.get_session(app_name="a", user_id="u2", session_id="s")
        assert other is not None and other.events == []

    run(scenario())


def test_a_padded_session_id_is_the_id_without_its_spaces(service: BaseSessionService) -> None:
    """As ADK's services strip a session id given with spaces around it: it creates, reads,
    refuses again and deletes the session of the stripped id."""

    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u", session_id="  s1 ")
        assert made.id == "s1"
        got = await service.get_session(app_name="a", user_id="u", session_id=" s1\t")
        assert got is not None and got.id == "s1"
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="a", user_id="u", session_id="s1 ")
        assert [s.id for s in (await service.list_sessions(app_name="a")).sessions] == ["s1"]
        await service.delete_session(app_name="a", user_id="u", session_id=" s1")
        assert await service.get_session(app_name="a", user_id="u", session_id="s1") is None

    run(scenario())


def test_sessions_are_listed_by_user_or_all_least_recently_updated_first(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        base = time.time()
        made = {}
        for n, (user, sid) in enumerate([("u1", "a"), ("u1", "b"), ("u2", "c")]):
            made[sid] = await service.create_session(
                app_name="app", user_id=user, session_id=sid, state={"n": n}
            )
        await service.append_event(made["a"], event(at=base + 10))
        mine = await service.list_sessions(app_name="app", user_id="u1")
        assert [s.id for s in mine.sessions] == ["b", "a"]
        assert all(s.events == [] for s in mine.sessions)
        everyone = await service.list_sessions(app_name="app", user_id=None)
        assert {s.id: s.state for s in everyone.sessions} == {
            "a": {"n": 0},
            "b": {"n": 1},
            "c": {"n": 2},
        }
        assert (await service.list_sessions(app_name="other")).sessions == []

    run(scenario())


def test_state_is_shared_by_the_app_by_the_user_and_kept_by_the_session(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        one = await service.create_session(
            app_name="a", user_id="u1", state={"app:flag": False, "user:name": "Ann", "own": 1}
        )
        await service.append_event(
            one, event(delta={"app:cfg": {"x": 1}, "user:lang": None, "own": {"y": 2}})
        )
        await service.append_event(one, event(delta={"app:cfg": {"z": 3}}))
        same_user = await service.create_session(app_name="a", user_id="u1")
        other_user = await service.create_session(app_name="a", user_id="u2")
        assert same_user.state == {
            "app:flag": False,
            "app:cfg": {"z": 3},
            "user:name": "Ann",
            "user:lang": None,
        }
        assert other_user.state == {"app:flag": False, "app:cfg": {"z": 3}}
        again = await service.get_session(app_name="a", user_id="u1", session_id=one.id)
        assert again is not None and again.state == one.state
        assert again.state["own"] == {"y": 2}
        assert await service.get_user_state(app_name="a", user_id="u1") == {
            "name": "Ann",
            "lang": None,
        }
        assert await service.get_user_state(app_name="a", user_id="u3") == {}

    run(scenario())


def test_temp_keys_stay_on_the_callers_session_and_are_never_stored(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u", state={"temp:t": 0})
        assert "temp:t" not in made.state
        appended = await service.append_event(made, event(delta={"temp:k": 1, "kept": 2}))
        assert made.state["temp:k"] == 1
        assert appended.actions.state_delta == {"kept": 2}
        got = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        assert got is not None and got.state == {"kept": 2}
        assert got.events[0].actions.state_delta == {"kept": 2}

    run(scenario())


def test_events_come_back_in_order_filtered_by_the_config(service: BaseSessionService) -> None:
    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u")
        base = time.time()
        for i in range(5):
            await service.append_event(made, event(f"m{i}", at=base + i))
        assert made.last_update_time == base + 4

        async def texts(**config: Any) -> list[str]:
            got = await service.get_session(
                app_name="a", user_id="u", session_id=made.id, config=GetSessionConfig(**config)
            )
            assert got is not None
            return [e.content.parts[0].text or "" for e in got.events if e.content]

        assert await texts() == ["m0", "m1", "m2", "m3", "m4"]
        assert await texts(num_recent_events=0) == []
        assert await texts(num_recent_events=3) == ["m2", "m3", "m4"]
        assert await texts(after_timestamp=base + 3) == ["m3", "m4"]
        assert await texts(after_timestamp=base + 100) == []
        assert await texts(num_recent_events=3, after_timestamp=base + 3) == ["m3", "m4"]

    run(scenario())


def test_events_of_one_instant_keep_the_order_they_were_appended_in(
    service: BaseSessionService,
) -> None:
    """Events stamped with the same time come back as appended, whichever filter picks them:
    the newest ``num_recent_events`` are the last appended, and ``after_timestamp`` takes
    every event of its own instant."""

    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u")
        base = time.time()
        for text, at in [("z", base), ("y", base + 1), ("x", base + 1), ("w", base + 1)]:
            await service.append_event(made, event(text, at=at))

        async def texts(**config: Any) -> list[str]:
            got = await service.get_session(
                app_name="a", user_id="u", session_id=made.id, config=GetSessionConfig(**config)
            )
            assert got is not None
            return [e.content.parts[0].text or "" for e in got.events if e.content]

        assert await texts() == ["z", "y", "x", "w"]
        assert await texts(num_recent_events=2) == ["x", "w"]
        assert await texts(after_timestamp=base + 1) == ["y", "x", "w"]

    run(scenario())


def test_an_event_with_every_field_reads_back_equal(service: BaseSessionService) -> None:
    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u")
        call = types.Part.from_function_call(name="lookup", args={"q": "x"})
        full = Event(
            invocation_id="inv",
            author="agent",
            content=types.Content(
                role="model", parts=[call, types.Part.from_bytes(data=b"\x00\x01", mime_type="a/b")]
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=7, candidates_token_count=3, total_token_count=10
            ),
            actions=EventActions(transfer_to_agent="other", escalate=True, artifact_delta={"f": 1}),
            long_running_tool_ids={"t1"},
            turn_complete=True,
            error_code="E",
            error_message="m",
            custom_metadata={"k": [1, 2]},
        )
        await service.append_event(made, full)
        assert await service.get_session(app_name="a", user_id="u", session_id=made.id) == made

    run(scenario())


def test_an_event_for_an_unknown_session_is_refused_and_a_partial_one_is_not_kept(
    service: BaseSessionService,
) -> None:
    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u")
        await service.append_event(made, event(partial=True))
        assert made.events == []
        got = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        assert got is not None and got.events == []
        await service.delete_session(app_name="a", user_id="u", session_id=made.id)
        with pytest.raises(SessionNotFoundError):
            await service.append_event(made, event())

    run(scenario())


class ScriptedLlm(BaseLlm):
    """Calls ``lookup`` until three results follow the last user text, then answers."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        results = 0
        for content in llm_request.contents:
            for part in content.parts or []:
                if part.text and content.role == "user":
                    results = 0
                results += part.function_response is not None
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=2, total_token_count=12
        )
        if results < 3:
            part = types.Part.from_function_call(name="lookup", args={"n": results})
        else:
            part = types.Part(text="done")
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def lookup(n: int) -> str:
    """Look something up."""
    return f"found {n}"


def two_turns(service: BaseSessionService) -> tuple[Session, list[Event]]:
    """Two turns of a Runner over ``service`` (3 tool calls, then an answer, each): the
    session read back and the events the runner gave."""
    agent = LlmAgent(name="helper", model=ScriptedLlm(), tools=[lookup], instruction="help")
    runner = Runner(app_name="app", agent=agent, session_service=service)

    async def scenario() -> tuple[Session, list[Event]]:
        made = await service.create_session(app_name="app", user_id="u")
        given = []
        for text in ("first", "second"):
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for each in runner.run_async(
                user_id="u", session_id=made.id, new_message=message
            ):
                given.append(each)
        got = await service.get_session(app_name="app", user_id="u", session_id=made.id)
        assert got is not None
        return got, given

    return run(scenario())


def test_a_runner_drives_an_agent_with_tools_through_the_service_turn_after_turn(
    service: BaseSessionService,
) -> None:
    got, given = two_turns(service)
    assert len(got.events) == 16
    assert len({e.invocation_id for e in got.events}) == 2
    assert [e for e in got.events if e.author != "user"] == given  # each read back equal
    assert [e.content.parts[0].text for e in got.events if e.author == "user"] == [
        "first",
        "second",
    ]
    finals = [e for e in got.events if e.author == "helper" and e.is_final_response()]
    assert [e.content.parts[0].text for e in finals] == ["done", "done"]


def test_each_invocation_is_a_run_whose_rows_hold_the_texts_its_events_refer_to(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        two_turns(LedgerSessionService(ledger))
        db = Database(url)
        try:
            runs = db.rows(
                "SELECT status, step_count, input_tokens, output_tokens FROM agent_runs "
                "ORDER BY started_at"
            )
            assert [tuple(r.values()) for r in runs] == [("completed", 4, 40, 8)] * 2
            results = db.rows("SELECT result FROM tool_executions ORDER BY started_at")
            returned = [json.dumps({"result": f"found {n}"}) for n in range(3)]
            assert [r["result"] for r in results] == returned * 2
            said = db.rows(
                "SELECT role, content FROM conversation_messages WHERE section = 'messages' "
                "ORDER BY seq"
            )
            assert [(r["role"], r["content"]) for r in said] == [
                ("user", "first"),
                ("assistant", "done"),
                ("user", "second"),
                ("assistant", "done"),
            ]
            # every event refers to its rows: no text, call argument or result is kept twice
            assert db.scalar("SELECT count(*) FROM adk_events WHERE message_ids IS NULL") == 0
            kept = " ".join(r["event"] for r in db.rows("SELECT event FROM adk_events"))
            assert "found" not in kept and "first" not in kept and '"n"' not in kept
            assert "done" not in kept
        finally:
            db.close()


def test_the_state_and_events_are_rows_of_the_ledger_forgotten_with_the_session(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url) as ledger:
        service = LedgerSessionService(ledger)

        async def scenario() -> str:
            made = await service.create_session(app_name="a", user_id="u", state={"user:x": 1})
            await service.append_event(made, event(delta={"k": "v"}))
            return made.id

        sid = run(scenario())
        db = Database(url)
        try:
            shared = db.rows("SELECT tenant_id, owner_id, state FROM adk_states")
            assert [(r["tenant_id"], r["owner_id"], json.loads(r["state"])) for r in shared] == [
                ("a", "u", {"x": 1})
            ]
            kept = db.rows(
                "SELECT c.tenant_id, c.owner_id, s.state FROM adk_sessions s "
                "JOIN conversations c ON c.id = s.id"
            )
            assert [(r["tenant_id"], r["owner_id"], json.loads(r["state"])) for r in kept] == [
                ("a", "u", {"k": "v"})
            ]
            assert db.scalar("SELECT count(*) FROM adk_events") == 1
            run(service.delete_session(app_name="a", user_id="u", session_id=sid))
            assert db.scalar("SELECT count(*) FROM adk_events") == 0
            assert db.scalar("SELECT count(*) FROM adk_sessions") == 0
            assert db.scalar("SELECT count(*) FROM conversations") == 0
        finally:
            db.close()


# --- what the ledger adds: checksums, a stale writer refused, two handles at once -----------------


def test_a_damaged_session_event_or_state_is_an_error_that_names_it(
    ledger: Ledger, db: Database
) -> None:
    service = LedgerSessionService(ledger)
    made = run(service.create_session(app_name="a", user_id="u", state={"app:k": 1}))
    run(service.append_event(made, event("hello")))
    get = service.get_session(app_name="a", user_id="u", session_id=made.id)
    for table, damage, undo in [
        ("adk_sessions", "SET update_time = 1", f"SET update_time = {made.last_update_time!r}"),
        ("adk_events", "SET invocation_id = 'x'", "SET invocation_id = 'inv'"),
        ("adk_states", "SET state = '{\"k\": 2}'", "SET state = '{\"k\": 1}'"),
    ]:
        db.execute(f"UPDATE {table} {damage}")
        with pytest.raises(LedgerCorruptError, match=f"of {table} does not match"):
            run(service.get_session(app_name="a", user_id="u", session_id=made.id))
        assert any(table in line for line in ledger.verify())
        db.execute(f"UPDATE {table} {undo}")
    assert run(get) == made


def test_an_append_to_a_session_changed_since_it_was_read_is_refused(ledger: Ledger) -> None:
    service = LedgerSessionService(ledger)

    async def scenario() -> None:
        made = await service.create_session(app_name="a", user_id="u")
        first = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        second = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        assert first is not None and second is not None
        await service.append_event(first, event("one", delta={"user:seen": 1}))
        with pytest.raises(StaleSessionError, match="modified in storage"):
            await service.append_event(second, event("two", delta={"user:seen": 2}))
        got = await service.get_session(app_name="a", user_id="u", session_id=made.id)
        assert got == first and got.state["user:seen"] == 1
        await service.append_event(got, event("two"))  # read again, it goes on

    run(scenario())


def test_two_handles_creating_and_appending_at_once_lose_nothing(db_url: str) -> None:
    with Ledger.open(db_url) as one, Ledger.open(db_url) as other:
        services = (LedgerSessionService(one), LedgerSessionService(other))

        async def create() -> list[Any]:
            return await asyncio.gather(
                *(s.create_session(app_name="a", user_id="u", session_id="s") for s in services),
                return_exceptions=True,
            )

        async def writer(service: LedgerSessionService, name: str) -> None:
            for n in range(3):
                while True:
                    read = await service.get_session(app_name="a", user_id="u", session_id="s")
                    assert read is not None
                    try:
                        await service.append_event(read, event(f"{name}{n}", delta={name: n}))
                        break
                    except StaleSessionError:
                        continue

        made = run(create())
        assert sorted(type(each).__name__ for each in made) == ["AlreadyExistsError", "Session"]

        async def both() -> None:
            await asyncio.gather(writer(services[0], "x"), writer(services[1], "y"))

        run(asyncio.wait_for(both(), 60))
        got = run(services[0].get_session(app_name="a", user_id="u", session_id="s"))
        assert got is not None
        texts = [e.content.parts[0].text for e in got.events if e.content and e.content.parts]
        assert sorted(texts) == ["x0", "x1", "x2", "y0", "y1", "y2"]
        assert got.state == {"x": 2, "y": 2}


def test_forgetting_a_user_deletes_their_sessions_and_their_state_and_keeps_the_apps(
    ledger: Ledger,
) -> None:
    service = LedgerSessionService(ledger)

    async def scenario() -> None:
        for user in ("ann", "bob"):
            await service.create_session(
                app_name="a", user_id=user, state={"app:plan": "pro", "user:name": user}
            )

    run(scenario())
    forgotten = ledger.forget_owner("ann")
    assert forgotten.counts["adk_sessions"] == 1 and forgotten.counts["adk_states"] == 1
    assert run(service.get_user_state(app_name="a", user_id="ann")) == {}
    assert run(service.list_sessions(app_name="a", user_id="ann")).sessions == []
    (kept,) = run(service.list_sessions(app_name="a")).sessions
    assert kept.state == {"app:plan": "pro", "user:name": "bob"}

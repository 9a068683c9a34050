"""Scoped handles: ``ledger.scoped(tenant_id=..., owner_id=...)`` sees and writes only the
conversations of its tenant and owner, and the runs and rows that came from them.

One ledger per backend holds two tenants and three owners (acme: alice and bob; globex: carol),
each with a conversation whose run called a tool and spawned a subagent; alice also has a
summarized conversation, a failed run (its buffer kept) and a run still running. From every
scope, every read sees only its own, and another scope's ids and prefixes are not found with
the very words a made-up id gets. SQL on the database shows every row of a tenant's runs
carries the tenant. Then writes, runs through a scoped agent, metadata filters, the command
line's --tenant and --owner, and the OpenAI Agents SDK's session on a scoped handle.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner

from agentledger import AgentBuilder, SubagentSpec
from agentledger.cli import cli
from agentledger.errors import AmbiguousIdError, NotFoundError, UsageError
from agentledger.ledger import Ledger
from agentledger.llm import InferenceResponse, ScriptedLLM
from support.databases import BACKENDS, fresh_database
from support.interrupted import SHOWN, agent_on, begin, step, stream_shown, tool_step_then_answer
from support.ledger import Database
from support.migration_harness import begin_stale_run
from support.subagents import Router, Script, answer, call, fails, lookup, prompt, spawn

SCOPES = (("acme", "alice"), ("acme", "bob"), ("globex", "carol"))
RESEARCHER = SubagentSpec(
    name="researcher",
    description="Finds facts in the archive.",
    system_prompt=prompt("researcher"),
    tools=(lookup,),
)
LEDGER_TABLES = (
    "conversation_messages",
    "agent_runs",
    "execution_buffer_rows",
    "step_executions",
    "tool_executions",
    "context_compactions",
)


def word(owner: str) -> str:
    """A word only ``owner``'s conversation holds (what a search looks for)."""
    return f"zebra{owner}"


@dataclass
class Owned:
    """What one scope holds."""

    conversation_ids: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)


@dataclass
class World:
    url: str
    ledger: Ledger
    owned: dict[tuple[str, str], Owned]
    failed_run_id: str = ""
    running_run_id: str = ""

    def scope(self, tenant: str, owner: str | None = None) -> Ledger:
        return self.ledger.scoped(tenant, owner)

    def others(self, tenant: str, owner: str) -> Owned:
        """Every id of the scopes other than (tenant, owner)."""
        found = Owned()
        for key, owned in self.owned.items():
            if key != (tenant, owner):
                found.conversation_ids += owned.conversation_ids
                found.run_ids += owned.run_ids
        return found


def lead(ledger: Ledger, topic: str) -> AgentBuilder:
    """An agent that spawns the researcher (which looks ``topic`` up), then answers."""
    router = Router(
        {
            "lead": Script([spawn(("researcher", f"Look up {topic}.")), answer(f"{topic}: done")]),
            "researcher": Script([call("lookup", topic=topic), answer(f"{topic} found")]),
        }
    )
    return (
        AgentBuilder()
        .with_llm(router)
        .with_name("lead")
        .with_system_prompt(prompt("lead"))
        .with_subagents([RESEARCHER])
        .with_ledger(ledger)
    )


def record(ledger: Ledger, tenant: str, owner: str) -> Owned:
    scoped = ledger.scoped(tenant, owner)
    conversation = scoped.create_conversation(
        title=f"{owner}'s", metadata={"team": owner, "tier": 2 if owner == "bob" else 1}
    )
    result = lead(scoped, word(owner)).build().run(f"Find {word(owner)}", conversation.id)
    assert result.status == "completed", result.error
    runs = [node.run.id for node in ledger.run_tree(result.run_id).walk()]
    child = ledger.run(result.child_run_ids[0])
    return Owned([conversation.id, child.conversation_id], runs)


def cancel_a_stream(ledger: Ledger) -> Any:
    """A run that took a tool step and streamed part of its answer, then was cancelled."""
    recorder = ledger.recorder
    agent = agent_on(recorder, tool_step_then_answer())
    state = step(agent, recorder, begin(agent, recorder))
    stream_shown(recorder, state)
    assert state.run_id is not None
    return recorder.interrupt_run(state.run_id, partial_text=SHOWN[-1])


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with fresh_database(request.param, request) as url, Ledger.open(url) as ledger:
        owned = {(t, o): record(ledger, t, o) for t, o in SCOPES}
        alice = ledger.scoped("acme", "alice")
        summarizing = (
            AgentBuilder()
            .with_llm(ScriptedLLM([InferenceResponse(content="Noted.")] * 2))
            .with_context_budget(
                10_000, summarizer=ScriptedLLM([InferenceResponse(content="Hellos.")])
            )
            .with_ledger(alice)
            .build()
        )
        hello = summarizing.run("Hello.")
        summarizing.run("Hello again.", hello.conversation_id)
        assert summarizing.compact(hello.conversation_id, force=True) is not None
        failing = Router({"lead": Script([call("lookup", topic="x"), fails(RuntimeError("down"))])})
        failed = (
            AgentBuilder()
            .with_llm(failing)
            .with_system_prompt(prompt("lead"))
            .with_tools([lookup])
            .with_ledger(alice)
            .build()
            .run("This one fails.")
        )
        assert failed.status == "failed"
        cancelled = cancel_a_stream(alice)
        running_conversation, running_run = begin_stale_run(alice)
        owned[("acme", "alice")].conversation_ids += [
            hello.conversation_id,
            failed.conversation_id,
            cancelled.conversation_id,
            running_conversation,
        ]
        owned[("acme", "alice")].run_ids += [
            *(r.id for r in ledger.runs(hello.conversation_id)),
            failed.run_id,
            cancelled.run_id,
            running_run,
        ]
        yield World(url, ledger, owned, failed.run_id, running_run)


@pytest.fixture(scope="module")
def sql(world: World) -> Iterator[Database]:
    database = Database(world.url)
    yield database
    database.close()


# --- every read keeps to the scope ----------------------------------------------------------------


@pytest.mark.parametrize(("tenant", "owner"), SCOPES)
def test_a_scope_lists_searches_and_finds_only_its_own(world: World, tenant: str, owner: str):
    scoped = world.scope(tenant, owner)
    mine = world.owned[(tenant, owner)]

    assert {c.id for c in scoped.conversations()} == set(mine.conversation_ids)
    assert {r.id for r in scoped.runs()} == set(mine.run_ids)
    assert {(c.tenant_id, c.owner_id) for c in scoped.conversations()} == {(tenant, owner)}
    assert {(r.tenant_id, r.owner_id) for r in scoped.runs()} == {(tenant, owner)}
    for other_owner in ("alice", "bob", "carol"):
        hits = scoped.search(word(other_owner))
        assert bool(hits) == (other_owner == owner)
        assert {h.conversation_id for h in hits} <= set(mine.conversation_ids)
    assert {r.id for r in scoped.stale_runs(stale_after=0)} == (
        {world.running_run_id} if owner == "alice" else set()
    )
    # Every id of its own reads back, by its id and by its shortest prefix in the scope.
    short = scoped.short_ids(mine.conversation_ids, of="conversation")
    for conversation_id in mine.conversation_ids:
        assert scoped.conversation(short[conversation_id]).id == conversation_id
        scoped.history(conversation_id)
    for run_id in mine.run_ids:
        assert scoped.run(run_id).id == run_id
        scoped.steps(run_id)


def test_a_tenant_scope_sees_all_its_owners_and_the_whole_ledger_sees_everything(world: World):
    acme = world.scope("acme")
    expected = {*world.owned[("acme", "alice")].run_ids, *world.owned[("acme", "bob")].run_ids}
    assert {r.id for r in acme.runs()} == expected
    assert len(world.ledger.runs()) == sum(len(o.run_ids) for o in world.owned.values())
    assert acme.search(word("bob")) and acme.search(word("alice"))
    assert world.ledger.search(word("carol")) and not acme.search(word("carol"))


CONVERSATION_READS: dict[str, Callable[[Ledger, str], Any]] = {
    "conversation": lambda ledger, cid: ledger.conversation(cid),
    "messages": lambda ledger, cid: ledger.messages(cid),
    "history": lambda ledger, cid: ledger.history(cid),
    "model_context": lambda ledger, cid: ledger.model_context(cid),
    "compactions": lambda ledger, cid: ledger.compactions(cid),
    "runs": lambda ledger, cid: ledger.runs(cid),
    "search": lambda ledger, cid: ledger.search("zebra", conversation_id=cid),
}
RUN_READS: dict[str, Callable[[Ledger, str], Any]] = {
    "run": lambda ledger, rid: ledger.run(rid),
    "run_tree": lambda ledger, rid: ledger.run_tree(rid),
    "steps": lambda ledger, rid: ledger.steps(rid),
    "tool_executions": lambda ledger, rid: ledger.tool_executions(rid),
    "trace_messages": lambda ledger, rid: ledger.trace_messages(rid),
    "buffer": lambda ledger, rid: ledger.buffer(rid),
}


def made_up(real: str) -> str:
    """An id no scope holds, as long as ``real`` (the error quotes the id it was given)."""
    return "f" * len(real)


def unshared_prefix(other: str, own: list[str]) -> str:
    """The shortest prefix of ``other`` (8 characters or more) that begins none of ``own``."""
    return next(
        other[:n] for n in range(8, len(other)) if not any(o.startswith(other[:n]) for o in own)
    )


def error_of(read: Callable[[], Any]) -> str:
    with pytest.raises(NotFoundError) as caught:
        read()
    assert type(caught.value) is NotFoundError
    return str(caught.value)


def assert_not_found_as_made_up(read: Callable[[str], Any], given: str) -> None:
    fake = made_up(given)
    assert error_of(lambda: read(given)).replace(given, fake) == error_of(lambda: read(fake))


@pytest.mark.parametrize(("tenant", "owner"), SCOPES)
def test_another_scopes_ids_and_prefixes_are_not_found_in_the_words_of_a_made_up_id(
    world: World, tenant: str, owner: str
):
    scoped = world.scope(tenant, owner)
    others, mine = world.others(tenant, owner), world.owned[(tenant, owner)]
    for conversation_id in others.conversation_ids:
        prefix = unshared_prefix(conversation_id, mine.conversation_ids)
        for read in CONVERSATION_READS.values():
            for given in (conversation_id, prefix):
                assert_not_found_as_made_up(lambda g, r=read: r(scoped, g), given)
    for run_id in others.run_ids:
        prefix = unshared_prefix(run_id, mine.run_ids)
        for read in RUN_READS.values():
            for given in (run_id, prefix):
                assert_not_found_as_made_up(lambda g, r=read: r(scoped, g), given)
        # The recorder's reads (what Agent.resume and subagents use) keep to the scope too.
        assert_not_found_as_made_up(lambda g: scoped.recorder.run_result(g), run_id)
    assert_not_found_as_made_up(
        lambda g: scoped.recorder.load_conversation(g), others.conversation_ids[0]
    )


def test_an_ambiguous_prefix_lists_only_the_scopes_own_ids(world: World):
    stem = "0badc0de-5c0e-7"
    ids = {f"{stem}aaa-a": "acme", f"{stem}aab-a": "acme", f"{stem}aac-a": "globex"}
    for conversation_id, tenant in ids.items():
        world.ledger.create_conversation(conversation_id=conversation_id, tenant_id=tenant)
    acme, globex = world.scope("acme"), world.scope("globex")

    with pytest.raises(AmbiguousIdError) as caught:
        acme.conversation(stem)
    assert set(caught.value.candidates) == {f"{stem}aaa-a", f"{stem}aab-a"}
    assert f"{stem}aac-a" not in str(caught.value)
    assert globex.conversation(stem).id == f"{stem}aac-a"  # unique in its scope
    with pytest.raises(AmbiguousIdError) as everything:
        world.ledger.conversation(stem)
    assert len(everything.value.candidates) == 3
    # globex's shortest prefix is as short as if acme's ids were not there.
    assert globex.short_ids([f"{stem}aac-a"], of="conversation") == {f"{stem}aac-a": stem[:8]}


def test_verify_and_row_counts_read_the_whole_ledger_so_a_scope_refuses_them(world: World):
    for read in (Ledger.verify, Ledger.row_counts):
        with pytest.raises(UsageError, match="the unscoped ledger"):
            read(world.scope("acme"))
    assert world.ledger.verify() == []


def test_recovering_in_another_scope_leaves_the_running_run_alone(world: World, sql: Database):
    assert world.scope("globex").recover(stale_after=0) == []
    assert world.scope("acme", "bob").recover(stale_after=0) == []
    assert sql.scalar("SELECT status FROM agent_runs WHERE id = :r", r=world.running_run_id) == (
        "running"
    )


# --- every row of a tenant's runs carries the tenant ----------------------------------------------


def test_every_row_of_a_tenants_runs_carries_the_tenant_and_its_runs_the_owner(
    world: World, sql: Database
):
    conversations = {r["id"]: r for r in sql.rows("SELECT * FROM conversations")}
    runs = {r["id"]: r for r in sql.rows("SELECT * FROM agent_runs")}
    for (tenant, owner), owned in world.owned.items():
        for row in [
            *(conversations[c] for c in owned.conversation_ids),
            *map(runs.get, owned.run_ids),
        ]:
            assert (row["tenant_id"], row["owner_id"]) == (tenant, owner), row["id"]
    alice = world.owned[("acme", "alice")]
    for table in LEDGER_TABLES:
        rows = sql.rows(f"SELECT * FROM {table}")
        mine = [
            r
            for r in rows
            if r.get("conversation_id") in alice.conversation_ids
            or r.get("run_id") in alice.run_ids
            or (table == "agent_runs" and r["id"] in alice.run_ids)
        ]
        assert mine, table
        assert {r["tenant_id"] for r in mine} == {"acme"}, table
    # Alice's rows include a subagent's conversation, a failed run's buffer and a running one's.
    assert sql.count("execution_buffer_rows", "run_id = :r", r=world.failed_run_id) > 0
    assert sql.count("execution_buffer_rows", "run_id = :r", r=world.running_run_id) > 0
    assert sql.count("context_compactions", "tenant_id = 'acme'") > 0
    assert sql.count("conversations", "kind = 'subagent' AND owner_id = 'alice'") == 1
    interrupted = sql.rows("SELECT tenant_id FROM conversation_messages WHERE interrupted")
    assert interrupted == [{"tenant_id": "acme"}]
    for table in LEDGER_TABLES:  # nothing was written without a tenant
        assert sql.count(table, "tenant_id IS NULL") == 0, table


# --- conversations by their metadata ------------------------------------------------------------


HOSTILE_KEYS = ['a"b', "a.b", "$", "$.team", "[0]", "x') OR 1=1 --", "päth", ""]


def test_conversations_filter_on_metadata_values_of_every_json_kind(world: World):
    ledger = world.ledger
    made = {
        key: ledger.create_conversation(metadata={key: "v", "n": 3, "flag": True, "none": None})
        for key in HOSTILE_KEYS
    }
    listed = lambda **wanted: {c.id for c in ledger.conversations(metadata=wanted)}  # noqa: E731
    for key, conversation in made.items():
        assert listed(**{key: "v"}) == {conversation.id}, key
    assert listed(a="v") == set()  # a key is never read as a path
    assert listed(team="alice") == {world.owned[("acme", "alice")].conversation_ids[0]}
    assert listed(tier=2) == {world.owned[("acme", "bob")].conversation_ids[0]}
    assert listed(tier=2.0) == listed(tier=2)
    assert listed(n=3, flag=True, none=None) == {c.id for c in made.values()}
    assert listed(flag=1) == listed(flag="true") == listed(none=False) == listed(n="3") == set()
    assert world.scope("globex").conversations(metadata={"team": "alice"}) == []
    with pytest.raises(UsageError, match="objects and lists"):
        ledger.conversations(metadata={"team": ["alice"]})


# --- handles --------------------------------------------------------------------------------------


def test_a_scoped_handle_shares_its_ledger_narrows_and_closes_nothing(world: World):
    threads = threading.active_count()
    acme = world.ledger.scoped(tenant_id="acme")
    alice = acme.scoped(owner_id="alice")
    assert alice.engine is world.ledger.engine
    assert alice.recorder.leases is world.ledger.recorder.leases
    assert (alice.scope.tenant_id, alice.scope.owner_id) == ("acme", "alice")
    assert repr(alice) == f"Ledger({world.ledger.url!r}, tenant_id='acme', owner_id='alice')"
    with pytest.raises(UsageError, match="scoped to tenant_id 'acme'"):
        acme.scoped("globex")
    with pytest.raises(UsageError, match="control character"):
        world.ledger.scoped("ac\x00me")
    with alice:
        pass  # closing a scoped handle closes nothing
    assert [c.tenant_id for c in acme.conversations(limit=1)] == ["acme"]
    assert threading.active_count() == threads


def test_a_conversation_created_in_a_scope_takes_it_and_may_not_contradict_it(world: World):
    bob = world.scope("acme", "bob")
    created = bob.create_conversation(title="by bob")
    world.owned[("acme", "bob")].conversation_ids.append(created.id)
    assert (created.tenant_id, created.owner_id) == ("acme", "bob")
    before = len(world.ledger.conversations())
    for given in ({"tenant_id": "globex"}, {"owner_id": "carol"}):
        with pytest.raises(UsageError, match="nothing was written"):
            bob.create_conversation(**given)
    assert len(world.ledger.conversations()) == before
    explicit = world.ledger.create_conversation(tenant_id="globex", owner_id="dan")
    assert (explicit.tenant_id, explicit.owner_id) == ("globex", "dan")


# --- runs through a scoped agent ------------------------------------------------------------------


@pytest.fixture
def fresh(request: pytest.FixtureRequest, db_url: str) -> Iterator[tuple[Ledger, Database]]:
    with Ledger.open(db_url) as ledger:
        database = Database(db_url)
        yield ledger, database
        database.close()


def test_an_agent_in_a_scope_cannot_run_resume_or_recover_another_scopes_conversation(
    fresh: tuple[Ledger, Database],
):
    ledger, sql = fresh
    carols = ledger.scoped("globex", "carol")
    conversation = carols.create_conversation()
    stale_conversation, stale_run = begin_stale_run(carols)
    alice = ledger.scoped("acme", "alice")
    agent = lead(alice, "x").build()
    counts = sql.table_counts()
    attempts: dict[str, Callable[[], Any]] = {
        "run": lambda: agent.run("hi", conversation.id),
        "stream": lambda: list(agent.stream("hi", conversation.id)),
        "arun": lambda: asyncio.run(agent.arun("hi", conversation.id)),
        "astream": lambda: asyncio.run(_drain(agent, conversation.id)),
        "resume": lambda: agent.resume(stale_run, stale_after=0),
        "run on a busy one": lambda: agent.run("hi", stale_conversation),
    }
    for name, attempt in attempts.items():
        with pytest.raises(NotFoundError):
            attempt()
        assert sql.table_counts() == counts, name
    assert agent.recover(stale_after=0) == []
    assert alice.recover(stale_after=0) == []
    assert sql.table_counts() == counts
    assert (
        sql.scalar("SELECT lease_run_id FROM conversations WHERE id = :c", c=conversation.id)
        is None
    )
    # Its own scope recovers it (committing what it had shown), and an unscoped agent in
    # carol's conversation writes carol's tenant.
    carols.recorder.record_partial_output(stale_run, 1, "Porto is")
    assert [r.id for r in carols.recover(stale_after=0)] == [stale_run]
    shown = sql.row("SELECT tenant_id FROM conversation_messages WHERE interrupted")
    assert shown == {"tenant_id": "globex"}
    unscoped = lead(ledger, "y").build().run("hello", conversation.id)
    assert unscoped.status == "completed"
    tenants = sql.column(
        "SELECT DISTINCT tenant_id FROM conversation_messages WHERE run_id = :r", r=unscoped.run_id
    )
    assert tenants == ["globex"]
    assert (ledger.run(unscoped.run_id).tenant_id, ledger.run(unscoped.run_id).owner_id) == (
        "globex",
        "carol",
    )
    # A run with no conversation id starts one in the scope.
    started = agent.run("a new one")
    assert (alice.conversation(started.conversation_id).owner_id) == "alice"


async def _drain(agent: Any, conversation_id: str) -> None:
    async for _ in agent.astream("hi", conversation_id):
        pass


# --- the command line -----------------------------------------------------------------------------


def invoke(world: World, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", world.url, *args], catch_exceptions=False)


def json_rows(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.mark.parametrize("where", ["before", "after"])
def test_the_command_line_keeps_to_tenant_and_owner_before_or_after_the_command(
    world: World, where: str
):
    def scoped(command: str, *args: str, tenant: str = "acme", owner: str = "bob") -> Any:
        options = ["--tenant", tenant, "--owner", owner]
        words = [*options, command, *args] if where == "before" else [command, *args, *options]
        return invoke(world, *words)

    bobs = world.owned[("acme", "bob")]
    listed = json_rows(scoped("conversations", "--all", "--json").output)
    assert {c["id"] for c in listed} == set(bobs.conversation_ids)
    assert {(c["tenant_id"], c["owner_id"]) for c in listed} == {("acme", "bob")}
    runs = json_rows(scoped("runs", "--json").output)
    assert {r["id"] for r in runs} == set(bobs.run_ids)
    assert {(r["tenant_id"], r["owner_id"]) for r in runs} == {("acme", "bob")}
    assert scoped("show", bobs.conversation_ids[0]).exit_code == 0
    found = json_rows(scoped("search", word("bob"), "--json").output)
    assert found and {h["conversation_id"] for h in found} <= set(bobs.conversation_ids)
    assert json_rows(scoped("search", word("carol"), "--json").output) == []
    carols = world.owned[("globex", "carol")].conversation_ids[0]
    refused, missing = scoped("show", carols), scoped("show", made_up(carols))
    assert refused.exit_code == missing.exit_code == 1
    assert refused.output.replace(carols, made_up(carols)) == missing.output


def test_the_environment_gives_the_scope_and_whole_ledger_commands_refuse_it(
    world: World, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENTLEDGER_TENANT", "globex")
    listed = json_rows(invoke(world, "conversations", "--json").output)
    assert {c["tenant_id"] for c in listed} == {"globex"}
    refused = invoke(world, "db", "verify")
    assert refused.exit_code == 1
    assert "AGENTLEDGER_TENANT" in refused.output


# --- the OpenAI Agents SDK's session --------------------------------------------------------------


def test_a_session_on_a_scoped_handle_cannot_read_or_write_another_tenants_session(
    world: World, sql: Database
):
    from agentledger.integrations.openai_agents import LedgerSession

    acme, globex = world.scope("acme", "alice"), world.scope("globex", "carol")
    item = {"role": "user", "content": "the secret plan"}
    asyncio.run(LedgerSession("session-7", acme).add_items([item]))
    assert asyncio.run(LedgerSession("session-7", acme).get_items()) == [item]
    intruder = LedgerSession("session-7", globex)
    assert asyncio.run(intruder.get_items()) == []
    assert asyncio.run(intruder.pop_item()) is None
    counts = sql.table_counts()
    with pytest.raises(UsageError, match="'session-7' is taken in this ledger: choose another"):
        asyncio.run(intruder.add_items([{"role": "user", "content": "mine now"}]))
    assert sql.table_counts() == counts
    assert asyncio.run(LedgerSession("session-7", acme).get_items()) == [item]


# --- leases under PostgreSQL's row-level security -------------------------------------------------


def test_the_heartbeat_renews_a_scoped_runs_lease_in_its_tenant_under_row_level_security(
    pg_url: str,
):
    """One heartbeat renews the leases of every scope's runs: each renewal must set its own
    run's tenant, or a policy keyed on it hides the conversation and the lease runs out."""
    with Ledger.open(pg_url):
        pass  # migrated by the tables' owner
    role = f"scopes_app_{abs(hash(pg_url)) % 10**8}"
    admin = Database(pg_url)
    admin.execute(
        f"CREATE ROLE {role} LOGIN",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
        "ALTER TABLE conversations ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY by_tenant ON conversations "
        "USING (tenant_id = current_setting('agentledger.tenant_id', true))",
    )
    app_url = pg_url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
    renewals: list[bool] = []
    try:
        with Ledger.open(app_url, migrate=False, lease_seconds=0.6) as ledger:
            acme = ledger.scoped("acme")
            conversation_id = acme.create_conversation().id

            def expiry() -> Any:
                query = "SELECT lease_expires_at FROM conversations WHERE id = :c"
                return admin.scalar(query, c=conversation_id)

            def wait_for_a_renewal(_request: Any) -> InferenceResponse:
                first, deadline = expiry(), time.monotonic() + 5
                while expiry() == first and time.monotonic() < deadline:
                    time.sleep(0.02)  # polling the heartbeat, which beats every 0.2 s
                renewals.append(expiry() != first)
                return InferenceResponse(content="Done.")

            router = Router({"lead": Script([wait_for_a_renewal])})
            agent = AgentBuilder().with_llm(router).with_system_prompt(prompt("lead"))
            result = agent.with_ledger(acme).build().run("Take your time.", conversation_id)
            assert result.status == "completed"
            assert ledger.conversations() == []  # no tenant set: the policy shows nothing
    finally:
        admin.execute(f"DROP OWNED BY {role}", f"DROP ROLE {role}")
        admin.close()
    assert renewals == [True]

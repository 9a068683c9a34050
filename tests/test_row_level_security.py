"""PostgreSQL's row-level security (revision 0010) and the application role of ``agentledger db
app-role``: connected as that role, raw SQL keeps to the tenant its transaction sets, sees
nothing without one, and cannot change the schema; the tables' owner sees everything.

One database for the module: migrated and filled by its owner (the suite's superuser) with
the rows of two tenants, ``a`` and ``b``, and of none; the application role is made by running
the SQL the command prints, under a name and a password chosen to break naive quoting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import errors, sql
from sqlalchemy import create_engine, text

from agentledger.cli import cli
from agentledger.errors import LedgerPermissionError, MigrationError
from agentledger.ledger import Ledger, migrate
from agentledger.ledger._scope import Scope
from agentledger.ledger.roles import RUN_TABLES
from support.databases import postgres_database
from support.migration_harness import record_representative_runs
from support.postgres import PostgresServer

ROLE = 'app; DROP TABLE conversations --"x'
PASSWORD = "it's a \\secret'; DROP TABLE agent_runs; --"
TENANTS = ("a", "b")
SET_TENANT = "SELECT set_config('agentledger.tenant_id', %s, true)"


@pytest.fixture(scope="module")
def owner_url(pg_server: PostgresServer) -> Iterator[str]:
    """The module's database, migrated, holding every table's rows for tenants ``a`` and ``b``
    (a recording of representative runs each, moved to its tenant by the owner), a
    conversation of no tenant, and a ``forget_log`` row per tenant."""
    with postgres_database(pg_server) as url, psycopg.connect(url, autocommit=True) as conn:
        for tenant in TENANTS:
            with Ledger.open(url) as ledger:
                record_representative_runs(ledger)
            for table in RUN_TABLES:  # unsealed: the checksum covers a tenant
                unseal = ", checksum = NULL" if table != "forget_log" else ""
                # Rows of no tenant, and an ADK session's (its app is its tenant).
                statement = (
                    f"UPDATE {{}} SET tenant_id = %s{unseal}"
                    " WHERE tenant_id IS NULL OR tenant_id <> ALL(%s)"
                )
                conn.execute(
                    sql.SQL(statement).format(sql.Identifier(table)), [tenant, list(TENANTS)]
                )
            conn.execute(
                "INSERT INTO forget_log (id, forgotten_at, tenant_id, reason, conversation_ids,"
                " counts) VALUES (%s, now(), %s, 'conversation', '[]', '{}')",
                [f"forgotten-{tenant}", tenant],
            )
        with Ledger.open(url) as ledger:
            ledger.create_conversation(title="nobody's")
        yield url


@pytest.fixture(scope="module")
def app_url(owner_url: str) -> Iterator[str]:
    """The URL of the application role, made by running what `agentledger db app-role` prints
    as the owner; the role is dropped afterwards."""
    result = CliRunner().invoke(
        cli,
        ["db", "app-role", ROLE, "--password-env", "APP_PASSWORD"],
        env={"APP_PASSWORD": PASSWORD},
    )
    assert result.exit_code == 0, result.output
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(result.output.encode())
    parts = urlsplit(owner_url)
    netloc = f"{quote(ROLE, safe='')}@{parts.hostname}:{parts.port}"
    try:
        yield urlunsplit(parts._replace(netloc=netloc))
    finally:
        with psycopg.connect(owner_url, autocommit=True) as conn:
            role = sql.Identifier(ROLE)
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))


@contextlib.contextmanager
def transaction(url: str, tenant: str | None = None) -> Iterator[psycopg.Connection]:
    """A transaction on a new connection (to ``url``), in ``tenant``'s setting if given."""
    with psycopg.connect(url) as conn, conn.transaction():
        if tenant is not None:
            conn.execute(SET_TENANT, [tenant])
        yield conn


def counts(conn: psycopg.Connection, where: str = "") -> dict[str, int]:
    """Rows of every ledger table (that match ``where``)."""
    found = {}
    for table in RUN_TABLES:
        query = sql.SQL("SELECT count(*) FROM {} " + where).format(sql.Identifier(table))
        found[table] = conn.execute(query).fetchone()[0]
    return found


def refused(conn: psycopg.Connection, statement: str, *params: object) -> str:
    """The message PostgreSQL refuses ``statement`` with (insufficient privilege), in a
    savepoint so that the transaction goes on."""
    with pytest.raises(errors.InsufficientPrivilege) as caught, conn.transaction():
        conn.execute(statement, params or None)
    return str(caught.value)


# --- the schema ---------------------------------------------------------------------------------


def test_every_table_holding_a_tenants_rows_is_under_row_level_security_and_no_other(owner_url):
    with transaction(owner_url) as conn:
        secured = conn.execute(
            "SELECT relname, relforcerowsecurity FROM pg_class WHERE relrowsecurity"
        ).fetchall()
        with_tenant = conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'tenant_id'"
            " AND table_schema = 'public'"
        ).fetchall()
        policies = conn.execute("SELECT tablename, policyname, cmd FROM pg_policies").fetchall()
    assert sorted(secured) == sorted((t, False) for t in RUN_TABLES)  # enabled, not forced
    assert sorted(t for (t,) in with_tenant) == sorted(RUN_TABLES)
    assert sorted(policies) == sorted((t, "agentledger_tenant", "ALL") for t in RUN_TABLES)


def secured(url: str) -> tuple[list[str], list[str], list[tuple[bool, list[str] | None]]]:
    """The tables under row-level security, those with policies, and how the deletion log's
    trigger function runs (as its owner? with which settings?)."""
    with transaction(url) as conn:
        tables = conn.execute("SELECT relname FROM pg_class WHERE relrowsecurity").fetchall()
        policies = conn.execute("SELECT DISTINCT tablename FROM pg_policies").fetchall()
        function = conn.execute(
            "SELECT prosecdef, proconfig FROM pg_proc WHERE proname = 'agentledger_log_deletion'"
        ).fetchall()
    return sorted(t for (t,) in tables), sorted(t for (t,) in policies), function


def test_the_downgrade_below_0010_takes_the_policies_away_and_the_upgrade_puts_them_back(pg_url):
    migrate.upgrade(pg_url)
    at_head = secured(pg_url)
    assert at_head == (
        sorted(RUN_TABLES),
        sorted(RUN_TABLES),
        [(True, ["search_path=public, pg_temp"])],
    )
    migrate.downgrade(pg_url, "0009")
    assert secured(pg_url) == ([], [], [(False, None)])
    migrate.upgrade(pg_url)
    assert secured(pg_url) == at_head


def test_the_owner_sees_every_row_of_every_tenant(owner_url):
    with transaction(owner_url) as conn:
        of_a, of_b = (counts(conn, f"WHERE tenant_id = '{t}'") for t in TENANTS)
        every = counts(conn)
    assert all(of_a.values()) and all(of_b.values())
    assert every["conversations"] == of_a["conversations"] * 2 + 1  # and the one of no tenant
    with Ledger.open(owner_url) as ledger:
        assert len(ledger.conversations()) == every["conversations"]


# --- the application role ------------------------------------------------------------------------


def test_the_application_role_holds_exactly_the_grants_it_needs(owner_url, app_url):
    with transaction(owner_url) as conn:
        attributes = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls, rolcanlogin,"
            " rolpassword IS NOT NULL FROM pg_authid WHERE rolname = %s",
            [ROLE],
        ).fetchone()
        grants = conn.execute(
            "SELECT table_name, string_agg(privilege_type, ', ' ORDER BY privilege_type)"
            " FROM information_schema.role_table_grants WHERE grantee = %s GROUP BY table_name",
            [ROLE],
        ).fetchall()
        schema = conn.execute(
            "SELECT has_schema_privilege(%s, 'public', 'USAGE'),"
            " has_schema_privilege(%s, 'public', 'CREATE')",
            [ROLE, ROLE],
        ).fetchone()
        owns = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles"
            " WHERE rolname = %s)",
            [ROLE],
        ).fetchone()
        tables = conn.execute("SELECT count(*) FROM conversations").fetchone()
    assert attributes == (False, False, False, False, True, True)
    assert dict(grants) == {
        **dict.fromkeys(RUN_TABLES, "DELETE, INSERT, SELECT, UPDATE"),
        "agentledger_version": "SELECT",
    }
    assert schema == (True, False)
    assert owns == (0,)
    assert tables[0] > 0  # the hostile name and password dropped nothing


def test_in_a_tenants_setting_every_table_shows_that_tenants_rows_and_no_other(owner_url, app_url):
    with transaction(owner_url) as conn:
        expected = {tenant: counts(conn, f"WHERE tenant_id = '{tenant}'") for tenant in TENANTS}
    for tenant in TENANTS:
        with transaction(app_url, tenant) as conn:
            assert counts(conn) == expected[tenant]
            assert not any(counts(conn, f"WHERE tenant_id IS DISTINCT FROM '{tenant}'").values())


def test_without_a_tenant_every_table_reads_empty_rather_than_everything(app_url):
    with transaction(app_url) as conn:  # a session that never set it: NULL
        assert not any(counts(conn).values())
    with transaction(app_url, "") as conn:
        assert not any(counts(conn).values())
    with psycopg.connect(app_url) as conn:
        with conn.transaction():
            conn.execute(SET_TENANT, ["a"])
            assert all(counts(conn).values())
        with conn.transaction():  # the setting ended with its transaction: '' now
            assert not any(counts(conn).values())


def test_a_row_of_another_tenant_can_be_neither_written_nor_changed(owner_url, app_url):
    inserts = (
        "INSERT INTO conversations (id, kind, version, created_at, updated_at, tenant_id)"
        " VALUES ('sneaked', 'main', 0, now(), now(), %s)",
        "INSERT INTO forget_log (id, forgotten_at, tenant_id, reason, conversation_ids, counts)"
        " VALUES ('sneaked', now(), %s, 'conversation', '[]', '{}')",
    )
    with transaction(app_url, "a") as conn:
        for insert in inserts:
            assert "row-level security" in refused(conn, insert, "b")
            assert "row-level security" in refused(conn, insert, None)
        moved = "UPDATE conversations SET tenant_id = 'b' WHERE tenant_id = 'a'"
        assert "row-level security" in refused(conn, moved)
        renamed = conn.execute("UPDATE conversations SET title = 'x' WHERE tenant_id = 'b'")
        deleted = conn.execute("DELETE FROM agent_runs WHERE tenant_id = 'b'")
        assert (renamed.rowcount, deleted.rowcount) == (0, 0)
    with transaction(owner_url) as conn:
        written = conn.execute(
            "SELECT (SELECT count(*) FROM conversations WHERE id = 'sneaked' OR title = 'x'),"
            " (SELECT count(*) FROM forget_log WHERE id = 'sneaked')"
        ).fetchone()
    assert written == (0, 0)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE conversations ADD COLUMN sneaked integer",
        "ALTER TABLE conversations DISABLE ROW LEVEL SECURITY",
        "DROP POLICY agentledger_tenant ON conversations",
        "DROP TABLE conversations",
        "CREATE TABLE sneaked (id integer)",
        "TRUNCATE conversations",
        "SELECT * FROM agentledger_deletions",
        "UPDATE agentledger_version SET version_num = '0001'",
    ],
)
def test_the_application_role_cannot_change_the_schema_or_reach_past_the_rows(app_url, statement):
    with transaction(app_url, "a") as conn:
        if statement.startswith("CREATE") and conn.info.server_version < 150000:
            pytest.skip("before PostgreSQL 15 every role may create tables in schema public")
        refused(conn, statement)


def test_a_delete_by_the_application_role_is_logged_for_the_copies_of_the_ledger(
    owner_url, app_url
):
    with transaction(app_url, "a") as conn:
        (row_id,) = conn.execute("SELECT id FROM tool_executions LIMIT 1").fetchone()
        assert conn.execute("DELETE FROM tool_executions WHERE id = %s", [row_id]).rowcount == 1
    with transaction(owner_url) as conn:
        logged = conn.execute(
            "SELECT table_name FROM agentledger_deletions WHERE row_id = %s", [row_id]
        ).fetchall()
    assert logged == [("tool_executions",)]


def test_a_scoped_transaction_of_the_library_keeps_to_its_tenant_and_to_itself(app_url):
    engine = create_engine(app_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            with conn.begin():
                Scope(tenant_id="b").enter(conn)
                seen = conn.execute(text("SELECT DISTINCT tenant_id FROM agent_runs")).all()
            with conn.begin():
                after = conn.execute(text("SELECT count(*) FROM agent_runs")).scalar()
            with conn.begin():  # bound, not spliced into the statement
                Scope(tenant_id="a' OR true OR '").enter(conn)
                spliced = conn.execute(text("SELECT count(*) FROM agent_runs")).scalar()
    finally:
        engine.dispose()
    assert seen == [("b",)]
    assert after == 0
    assert spliced == 0


# --- the library as the application role ---------------------------------------------------------


def test_the_application_role_opens_a_ledger_at_head_and_an_unscoped_handle_sees_nothing(
    owner_url, app_url
):
    with Ledger.open(app_url) as ledger:
        assert ledger.conversations() == []
        with pytest.raises(LedgerPermissionError) as caught:
            ledger.create_conversation(title="whose?")
    message = str(caught.value)
    assert "row-level security" in message
    assert "ledger.scoped(tenant_id=...)" in message
    assert message.startswith("creating a conversation: the database refused the row (")
    with transaction(owner_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM conversations WHERE title = 'whose?'"
        ).fetchone() == (0,)


def test_a_role_granted_nothing_is_told_what_to_grant_when_it_opens_the_ledger(owner_url):
    nobody = "agentledger_granted_nothing"
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {nobody} LOGIN")
    try:
        with pytest.raises(LedgerPermissionError) as caught:
            Ledger.open(owner_url.replace("postgres@", f"{nobody}@"))
    finally:
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {nobody}")
    message = " ".join(str(caught.value).split())
    assert "permission denied for table agentledger_version" in message
    assert "Grant the role what `agentledger db app-role` prints" in message


def test_a_ledger_below_head_tells_the_application_role_to_migrate_as_the_owner(owner_url, app_url):
    previous = migrate.history()[1].revision
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("UPDATE agentledger_version SET version_num = %s", [previous])
    try:
        with pytest.raises(MigrationError) as caught:
            Ledger.open(app_url)
        cli_run = CliRunner().invoke(cli, ["--db", app_url, "db", "upgrade"])
    finally:
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute("UPDATE agentledger_version SET version_num = %s", [migrate.head()])
    message = str(caught.value)
    assert f"at revision {previous}" in message
    assert "run `agentledger db upgrade` as the role that owns the ledger's tables" in message
    assert cli_run.exit_code == 1
    assert "as the role that owns the ledger's tables" in cli_run.output
    Ledger.open(app_url).close()  # back at head, it opens again: nothing was left half done


# --- the command ---------------------------------------------------------------------------------


def test_app_role_prints_sql_without_a_database(tmp_path):
    missing = tmp_path / "no-ledger.db"
    result = CliRunner().invoke(cli, ["--db", str(missing), "db", "app-role", "app"])
    assert result.exit_code == 0, result.output
    assert 'CREATE ROLE "app" LOGIN' in result.output
    assert 'ALTER ROLE "app" PASSWORD' in result.output  # how to give it one
    assert not missing.exists()
    assert "connects to no database" in CliRunner().invoke(cli, ["db", "app-role", "--help"]).output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["app", "--password-env", "EMPTY_PASSWORD"], "EMPTY_PASSWORD is not set or is empty"),
        (["app", "--password-env", "UNSET_PASSWORD"], "UNSET_PASSWORD is not set or is empty"),
        ([""], "role name is empty"),
        (["app\nDROP TABLE conversations; --"], "holds a control character"),
        (["r" * 64], "longer than the 63 bytes"),
        (["app", "--schema", ""], "schema is empty"),
    ],
)
def test_app_role_refuses_what_postgresql_would_not_take_as_given(args, said):
    env = {"EMPTY_PASSWORD": "", "UNSET_PASSWORD": None}
    result = CliRunner().invoke(cli, ["db", "app-role", *args], env=env)
    assert result.exit_code == 1
    assert said in result.output
    assert "CREATE ROLE" not in result.output

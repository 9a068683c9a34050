"""The group's options where people put them: ``--db`` (and ``AGENTLEDGER_DB``) before or after
the command's name, on every command; one meaning for the demo's ``--db`` too. Through click's
``CliRunner``, each command found by walking the ``agentledger`` group."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from agentledger.cli import cli
from agentledger.cli._app import LedgerGroup, Options


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group below ``group``, as the words that name it."""
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))


COMMANDS = list(command_paths(cli))


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = invoke(*args, env=env)
    assert result.exit_code == 0, f"agentledger {' '.join(args)}: {result.output}"
    return result.output


@pytest.fixture
def ledger_file(tmp_path: Path) -> str:
    path = tmp_path / "ledger.db"
    ok("db", "upgrade", "--db", str(path))
    return str(path)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_takes_db_after_its_name_and_its_help_says_so_in_a_line(command):
    help_text = ok(*command, "--help")
    said = "Also --db, --read-only, --tenant, --owner: see `agentledger --help`."
    lines = [line.strip() for line in help_text.splitlines()]
    assert said in lines, f"`agentledger {' '.join(command)} --help`:\n{help_text}"
    assert "agentledger --db" not in help_text
    assert ok(*command, "--db", "x.db", "--help") == help_text


@pytest.mark.parametrize(
    "command",
    [
        ["conversations"],
        ["runs"],
        ["show", "some-conversation"],
        ["trace", "some-run"],
        ["search", "anything"],
        ["recover", "--dry-run"],
        ["db", "check"],
        ["db", "current"],
        ["db", "downgrade", "base"],
        ["db", "verify"],
        ["datasette-metadata"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_db_names_the_ledger_before_or_after_the_command(tmp_path, command, where):
    missing = tmp_path / "missing.db"
    words = ["--db", str(missing)]
    result = invoke(*(words + command if where == "before" else command + words))
    assert result.exit_code == 1, result.output
    assert f"no ledger at {missing}" in " ".join(result.output.split())
    assert not missing.exists()


def test_db_upgrade_and_conversations_take_db_after_the_command(tmp_path):
    path = str(tmp_path / "after.db")
    assert "at revision" in ok("db", "upgrade", "--db", path)
    assert Path(path).exists()
    assert "conversations" in ok("conversations", "--db", path)
    assert "(head)" in ok("db", "--db", path, "current")  # between a group and its command


def test_db_after_the_command_wins_over_db_before_it_and_over_the_environment(
    ledger_file, tmp_path
):
    elsewhere = str(tmp_path / "elsewhere.db")
    assert "(head)" in ok("--db", elsewhere, "db", "current", "--db", ledger_file)
    env = {"AGENTLEDGER_DB": elsewhere}
    assert "(head)" in ok("db", "current", "--db", ledger_file, env=env)
    assert "(head)" in ok("--db", ledger_file, "db", "current", env=env)
    assert "(head)" in ok("db", "current", env={"AGENTLEDGER_DB": ledger_file})
    assert not Path(elsewhere).exists()


def test_any_option_of_the_group_is_taken_after_each_command_of_it():
    """What a new group option needs is its decorator: the mechanism carries every option."""

    @click.group(cls=LedgerGroup)
    @click.option("--db", envvar="TOY_DB", default="default.db")
    @click.option("--read-only", is_flag=True)
    @click.pass_context
    def toy(ctx: click.Context, /, db: str, read_only: bool) -> None:
        ctx.obj = Options(db=db)
        ctx.obj.read_only = read_only  # type: ignore[attr-defined]
        ctx.obj.given = {"db"} if ctx.get_parameter_source("db").name != "DEFAULT" else set()

    @toy.group()
    def inner() -> None:
        pass

    @inner.command()
    @click.pass_context
    def leaf(ctx: click.Context) -> None:
        options = ctx.find_object(Options)
        click.echo(f"{options.db} {options.read_only} {sorted(options.given)}")  # type: ignore[union-attr]

    def run(*args: str, env: dict[str, str] | None = None) -> str:
        result = CliRunner().invoke(toy, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.output.strip()

    assert run("inner", "leaf") == "default.db False []"
    assert run("inner", "leaf", "--read-only", "--db", "x.db") == "x.db True ['db', 'read_only']"
    assert run("--read-only", "inner", "--db", "y.db", "leaf") == "y.db True ['db']"
    assert run("--db", "a.db", "inner", "leaf", "--db", "b.db") == "b.db False ['db']"
    assert run("inner", "leaf", env={"TOY_DB": "env.db"}) == "env.db False ['db']"
    assert run("inner", "leaf", "--db", "c.db", env={"TOY_DB": "env.db"}) == "c.db False ['db']"


# --- help ----------------------------------------------------------------------------------------


def command_object(path: tuple[str, ...]) -> click.Command:
    found: click.Command = cli
    for name in path:
        assert isinstance(found, click.Group)
        command = found.get_command(click.Context(found), name)
        assert command is not None
        found = command
    return found


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "agentledger")
def test_every_option_has_help_text_and_help_shows_no_markup(command):
    shown = command_object(command)
    options = [*shown.params, *(cli.params if command else ())]
    silent = [
        o.opts for o in options if isinstance(o, click.Option) and not o.hidden and not o.help
    ]
    assert not silent, f"`agentledger {' '.join(command)}`: options without help: {silent}"
    help_text = ok(*command, "--help")
    for markup in ("``", ":class:", ":func:", ":meth:", "::"):
        assert markup not in help_text, f"{markup} in `agentledger {' '.join(command)} --help`"


HELP_AT_80 = {"COLUMNS": "80"}


def helps() -> Iterator[tuple[tuple[str, ...], str]]:
    """Every command's help (the group's first), as an 80-column terminal shows it."""
    for command in [(), *COMMANDS]:
        yield command, ok(*command, "--help", env=HELP_AT_80)


@pytest.mark.parametrize("command", [(), *COMMANDS], ids=lambda c: " ".join(c) or "agentledger")
def test_every_command_s_help_ends_its_text_with_an_example_of_it(command):
    help_text = ok(*command, "--help", env=HELP_AT_80)
    text = help_text.split("\nOptions:\n")[0]
    examples = text.split("\n  Examples:\n")[-1].splitlines()
    assert "\n  Examples:\n" in text, f"`agentledger {' '.join(command)} --help`:\n{help_text}"
    assert any(line.startswith(f"    {' '.join(('agentledger', *command))}") for line in examples)
    assert max(len(line) for line in help_text.splitlines()) <= 80


def test_every_command_summary_is_a_whole_sentence_that_fits_the_list():
    summaries = [
        line.split(maxsplit=1)[1]
        for _, help_text in helps()
        if "\nCommands:\n" in help_text
        for line in help_text.split("\nCommands:\n")[1].splitlines()
        if line.strip()
    ]
    assert len(summaries) == len(COMMANDS)
    cut = [summary for summary in summaries if summary.endswith("...")]
    assert cut == []
    assert all(summary.endswith(".") for summary in summaries), summaries


def test_the_group_options_are_described_once_in_the_group_s_help():
    described = {" ".join(str(option.help).split()) for option in cli.params if option.help}
    told = [" ".join(help_text.split()) for _, help_text in helps()]
    for description in described:
        assert sum(text.count(description) for text in told) == 1, description
    assert "before or after its name" in told[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["runs", "--status", "bogus"], "'bogus' is not one of 'running', 'completed', 'stopped'"),
        (["runs", "--limit", "0"], "0 is not in the range x>=1"),
        (["conversations", "--limit", "-1"], "-1 is not in the range x>=1"),
        (["search", "word", "--limit", "0"], "0 is not in the range x>=1"),
        (["recover", "--stale-after", "-5"], "-5.0 is not in the range x>=0"),
        (["show", "some-id", "--as", "robot"], "'robot' is not one of 'user', 'model'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_a_value_that_cannot_match_is_refused_listing_the_valid_ones(ledger_file, args, says):
    result = invoke("--db", ledger_file, *args)
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


# --- the demo: --db is its ledger too -------------------------------------------------------------


DEMO_CONVERSATIONS = 3
"""The travel assistant's, and the prompt-caching turns' (cached and not)."""


def main_conversations(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM conversations WHERE kind = 'main'").fetchone()
    return int(count)


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["demo", "--db", "{path}"], None, id="after"),
        pytest.param(["--db", "{path}", "demo"], None, id="before"),
        pytest.param(["demo"], {"AGENTLEDGER_DB": "{path}"}, id="environment"),
    ],
)
def test_the_demo_records_into_the_ledger_db_names(tmp_path, args, env):
    path = tmp_path / "demo.db"
    fill = {"path": str(path)}
    output = ok(
        *(a.format(**fill) for a in args),
        env={k: v.format(**fill) for k, v in env.items()} if env else None,
    )
    assert f"The ledger is the SQLite file {path}" in " ".join(output.split())
    assert main_conversations(path) == DEMO_CONVERSATIONS


def test_the_demo_takes_db_file_as_a_deprecated_name_of_db(tmp_path):
    path = tmp_path / "old.db"
    result = invoke("demo", "--db-file", str(path))
    assert result.exit_code == 0, result.output
    assert "--db-file is deprecated, use --db" in result.stderr
    assert main_conversations(path) == DEMO_CONVERSATIONS
    assert "--db-file" not in ok("demo", "--help")

    both = invoke("--db", str(tmp_path / "other.db"), "demo", "--db-file", str(path))
    assert both.exit_code == 2 and "give the demo's ledger once, with --db" in both.output
    assert not (tmp_path / "other.db").exists()


def test_the_demo_refuses_a_ledger_that_is_not_a_sqlite_file(tmp_path):
    result = invoke("demo", "--db", "postgresql://someone@localhost/ledger")
    assert result.exit_code == 2
    assert "the demo records into a SQLite file: give --db" in " ".join(result.output.split())

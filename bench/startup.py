"""Sections 9 and 16: what starting agentledger costs. Every system is a fresh process timed from
the parent, start to exit, its output thrown away; interleaved, after a few untimed runs of
each (a warm bytecode and page cache); medians, against the bare interpreter.

9. ``import agentledger`` (its version's source first on the path), against pydantic alone and
   the previous version's, over the bare interpreter: the median of the paired differences.
16. ``agentledger --help`` and each read command of the installed console script on the demo's
   ledger, against an interpreter that only imports what a read command imports and the
   ``sqlite3`` shell reading the rows the command prints.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from ._common import Samples, Sizes, interleaved, timed, x
from ._report import Row, Section, judged, ratio, seconds
from ._versions import PREVIOUS, THIS, Version, this_version

BARE, PYDANTIC, IMPORTS, HELP = (
    "bare interpreter",
    "pydantic alone",
    "their imports alone",
    "agentledger --help",
)
IMPORT = "import agentledger"
IMPORTED = "import agentledger.cli, agentledger.ledger, rich.console, rich.table, rich.tree"
"""What a read command imports before it reads a row: the command line (click), the reader
with the values (pydantic), and rich."""
HEAVY = (
    "pydantic",
    "httpx",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "duckdb",
    "pyarrow",
    "rich",
    "click",
    "psycopg",
)
"""The third-party packages worth naming when an import loads them."""
WARM_UP = 3
REPS = {"quick": (10, 5), "default": (40, 20), "full": (100, 50)}
"""Repetitions of sections 9 and 16, per mode."""
CONSOLE = Path(sys.executable).with_name("agentledger")
WORD = "Lisbon"
"""What ``search`` looks for in the demo's ledger (in its messages and its trace)."""


def environment(source: Path | None = None) -> dict[str, str]:
    """This process's environment as a user's shell has it: bytecode written, no ledger,
    scope or width of the benchmark's own; ``source`` first on the path."""
    left_out = {"PYTHONDONTWRITEBYTECODE", "AGENTLEDGER_DB", "AGENTLEDGER_TENANT"}
    left_out |= {"AGENTLEDGER_OWNER", "COLUMNS"}
    env = {k: v for k, v in os.environ.items() if k not in left_out}
    return env | ({"PYTHONPATH": str(source)} if source is not None else {})


def process(*argv: str, source: Path | None = None, cwd: Path | None = None) -> Callable[[], float]:
    """A fresh process of ``argv`` (a user's environment, ``source`` first on the path), run
    to its end, its output discarded: its seconds, start to exit."""
    env = environment(source)
    return lambda: timed(
        lambda: subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    )


def over(samples: Samples, name: str, base: str) -> list[float]:
    """``name``'s time less ``base``'s, per repetition."""
    return [a - b for a, b in zip(samples.times[name], samples.times[base], strict=True)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"


def _iqr(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q1 * 1e3:,.0f}–{q3 * 1e3:,.0f} ms"


def loaded(version: Version) -> list[str]:
    """Every module ``import agentledger`` leaves loaded in ``version``, checked to be its own."""
    code = (
        f"import json, sys; {IMPORT}; print(json.dumps([agentledger.__file__, list(sys.modules)]))"
    )
    argv = [sys.executable, "-P", "-c", code]
    out = subprocess.run(argv, env=environment(version.source), capture_output=True, check=True)
    where, modules = json.loads(out.stdout)
    if not Path(where).resolve().is_relative_to(version.source.resolve()):
        raise AssertionError(
            f"{version.label}: agentledger came from {where}, not {version.source}"
        )
    return list(modules)


def import_section(reps: int, versions: list[Version]) -> Section:
    here, labels = versions[0].source, [v.label for v in versions]
    systems = {
        BARE: process(sys.executable, "-P", "-c", "pass", source=here),
        PYDANTIC: process(
            sys.executable, "-P", "-c", "from pydantic import BaseModel", source=here
        ),
    }
    systems |= {
        v.label: process(sys.executable, "-P", "-c", IMPORT, source=v.source) for v in versions
    }
    modules = {v.label: loaded(v) for v in versions}
    samples = interleaved(systems, reps, WARM_UP)
    extra = {name: statistics.median(over(samples, name, BARE)) for name in [*labels, PYDANTIC]}
    rows = [Row(f"{name}: start to exit", _ms(samples.median(name))) for name in systems]
    rows.append(Row(f"{PYDANTIC}: over the bare interpreter", _ms(extra[PYDANTIC])))
    for v in labels:
        target = "< 150 ms" if v == THIS else ""
        rows.append(
            seconds(f"{v}: over the bare interpreter", extra[v], target, headline=True, shown=_ms)
        )
    rows.append(
        ratio(f"{THIS} / {PYDANTIC}, over the bare interpreter", extra[THIS] / extra[PYDANTIC])
    )
    if PREVIOUS in labels:
        rows += [
            ratio(
                f"{THIS} / {PREVIOUS}, over the bare interpreter",
                extra[THIS] / extra[PREVIOUS],
                headline=True,
            ),
            ratio(f"{THIS} / {PREVIOUS}, start to exit", samples.ratio(THIS, PREVIOUS)),
        ]
    notes = [
        f"{v.label.capitalize()} ({v.described}): `{IMPORT}` leaves {len(modules[v.label])} "
        f"modules loaded; of the heavy packages: "
        f"{', '.join(p for p in HEAVY if p in modules[v.label]) or 'none'}."
        for v in versions
    ]
    spread = ", ".join(f"{name} {_iqr(over(samples, name, BARE))}" for name in extra)
    notes.append(
        f"Spread (interquartile range of the differences over the bare interpreter): {spread}."
    )
    return Section(
        "9. Importing agentledger",
        f'`python -P -c "{IMPORT}"` in a fresh interpreter, against `python -P -c pass` (the bare '
        "interpreter), pydantic alone and, with `--previous`, the previous version's import; "
        f"{reps} repetitions, interleaved, after {WARM_UP} untimed runs of each; medians. Over the "
        "bare interpreter: the median of each repetition's difference with the bare interpreter's.",
        rows,
        notes,
    )


def commands(conversation: str, run: str) -> dict[str, tuple[tuple[str, ...], str]]:
    """Each read command over the demo's ``conversation`` and its ``run``: its arguments, and
    the SQL that reads the rows it prints."""
    tree = f"JOIN agent_runs r ON r.id = s.run_id WHERE r.root_run_id = '{run}'"
    fts = (
        "SELECT {t}.* FROM {table}_fts f JOIN {table} {t} ON {t}.id = f.{column} "
        f"WHERE {{table}}_fts MATCH '\"{WORD}\"' ORDER BY f.rank LIMIT 20;"
    )
    return {
        "conversations": (
            ("conversations",),
            "SELECT c.*, (SELECT count(*) FROM conversation_messages m WHERE m.conversation_id "
            "= c.id) FROM conversations c WHERE c.kind = 'main' "
            "ORDER BY c.updated_at DESC, c.id DESC LIMIT 50;",
        ),
        "runs": (("runs",), "SELECT * FROM agent_runs ORDER BY started_at DESC, id DESC LIMIT 50;"),
        "show": (
            ("show", conversation),
            "SELECT * FROM conversation_messages "
            f"WHERE conversation_id = '{conversation}' ORDER BY seq;",
        ),
        "trace": (
            ("trace", run),
            f"SELECT * FROM agent_runs WHERE root_run_id = '{run}' ORDER BY started_at, id; "
            f"SELECT s.* FROM step_executions s {tree} ORDER BY s.run_id, s.step_index; "
            f"SELECT s.* FROM tool_executions s {tree} ORDER BY s.step_index, s.position;",
        ),
        "search": (
            ("search", WORD),
            fts.format(t="m", table="conversation_messages", column="message_id")
            + " "
            + fts.format(t="t", table="tool_executions", column="tool_execution_id"),
        ),
    }


def shell(database: Path, sql: str) -> tuple[str, ...]:
    """The ``sqlite3`` shell reading ``sql`` from ``database`` (or, where no shell is
    installed, a fresh interpreter's ``sqlite3`` module doing the same)."""
    if (found := shutil.which("sqlite3")) is not None:
        return (found, "-readonly", str(database), sql)
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "[c.execute(s).fetchall() for s in sys.argv[2].split(';') if s.strip()]"
    )
    return (sys.executable, "-c", code, str(database), sql)


def demo_ledger(folder: Path) -> tuple[Path, str, str]:
    """The demo's ledger in ``folder``; its first main conversation and that conversation's
    first run (which called tools and a subagent)."""
    path = folder / "agentledger-demo.db"
    argv = [str(CONSOLE), "--db", str(path), "demo"]
    subprocess.run(argv, cwd=folder, env=environment(), check=True, capture_output=True)
    with closing(sqlite3.connect(path)) as database:
        first = "SELECT id FROM {} WHERE {} ORDER BY {} LIMIT 1"
        (conversation,) = database.execute(
            first.format("conversations", "kind = 'main'", "created_at")
        ).fetchone()
        (run,) = database.execute(
            first.format("agent_runs", "conversation_id = ?", "started_at"), (conversation,)
        ).fetchone()
    return path, str(conversation), str(run)


def command_section(reps: int, folder: Path) -> Section:
    database, conversation, run = demo_ledger(folder)
    chosen = commands(conversation, run)
    systems = {
        BARE: process(sys.executable, "-c", "pass", cwd=folder),
        HELP: process(str(CONSOLE), "--help", cwd=folder),
        IMPORTS: process(sys.executable, "-c", IMPORTED, cwd=folder),
    }
    for name, (args, sql) in chosen.items():
        systems[name] = process(str(CONSOLE), "--db", str(database), *args, cwd=folder)
        systems[f"{name}: the same rows read by sqlite3"] = process(
            *shell(database, sql), cwd=folder
        )
    return command_report(interleaved(systems, reps, WARM_UP), chosen, reps)


def command_report(
    samples: Samples, chosen: dict[str, tuple[tuple[str, ...], str]], reps: int
) -> Section:
    median, rate = samples.median, samples.ratio
    rows = [
        Row(f"{BARE}: start to exit", _ms(median(BARE))),
        Row(
            f"{IMPORTS} (what a read command imports); / bare",
            _ms(median(IMPORTS)),
            x(rate(IMPORTS, BARE)),
        ),
        Row(
            f"{HELP} (target < 150 ms); / bare",
            judged(_ms(median(HELP)), median(HELP), "< 150 ms"),
            x(rate(HELP, BARE)),
            True,
        ),
    ]
    for name in chosen:
        reading = f"{name}: the same rows read by sqlite3"
        rows += [
            Row(
                f"agentledger {name} (target < 300 ms); / bare; / sqlite3",
                judged(_ms(median(name)), median(name), "< 300 ms"),
                f"{x(rate(name, BARE))}; {x(rate(name, reading))}",
                headline=True,
            ),
            Row(reading, _ms(median(reading))),
        ]
    best = ", ".join(f"{n} {_ms(min(samples.times[n]))}" for n in (BARE, IMPORTS, HELP, *chosen))
    spread = ", ".join(f"{n} {_iqr(samples.times[n])}" for n in (HELP, *chosen))
    beyond = ", ".join(f"{n} {_ms(statistics.median(over(samples, n, IMPORTS)))}" for n in chosen)
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    notes = [
        f"Best of the repetitions: {best}.",
        f"Spread (interquartile range): {spread}.",
        f"Beyond their imports (the median of each repetition's difference with them): {beyond}.",
        f"The machine's load average as the measuring ended: {load} (1, 5, 15 minutes; "
        f"{os.cpu_count()} CPUs): the absolute times follow it, the ratios less so.",
        *(f"`{name}` reads what this reads: `{sql}`" for name, (_, sql) in chosen.items()),
    ]
    return Section(
        "16. The read commands, each a fresh process",
        "Each command a fresh process of the installed `agentledger` on the demo's ledger "
        "(`agentledger demo`), against the bare interpreter, a fresh interpreter that only imports "
        f'what a read command imports (`python -c "{IMPORTED}"`), and the sqlite3 shell reading '
        f"the rows the command prints (its statements in the notes). {reps} repetitions, "
        f"interleaved, after {WARM_UP} untimed runs of each; medians.",
        rows,
        notes,
    )


def imports(sizes: Sizes, previous: Version | None) -> Section:
    print("import agentledger, fresh interpreters ...", file=sys.stderr, flush=True)
    versions = [this_version(), *([previous] if previous is not None else [])]
    return import_section(REPS[sizes.name][0], versions)


def read_commands(sizes: Sizes, tmp: Path) -> Section:
    print("the read commands, each a fresh process ...", file=sys.stderr, flush=True)
    return command_section(REPS[sizes.name][1], tmp)

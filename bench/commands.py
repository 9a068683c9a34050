"""The command line's read commands as a user runs them: each a fresh process of the installed
``agentledger`` on the demo's ledger, against a bare interpreter and against the ``sqlite3``
shell reading the same rows.

Each system is a process started and waited for from here (its output thrown away): the bare
interpreter (``python -c pass``, what any Python command pays), ``agentledger --help``, the
five read commands (``conversations``, ``runs``, ``show``, ``trace``, ``search``), and for each
read command the ``sqlite3`` shell running the statements that read the same rows (or, where
the shell is not installed, ``python -c`` with the ``sqlite3`` module, said so). The systems
are interleaved, the order rotating, after a few untimed runs that warm the bytecode and page
caches; medians, and each command's ratios to the bare interpreter and to the shell in the
same run. The targets: a read command under 300 ms, ``--help`` under 150 ms.

``python -m bench.commands [--quick | --full] [--write]`` runs this section alone; ``--write``
puts it into ``bench/RESULTS.md`` (section and summary rows), leaving the other sections as
they are.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._common import Samples, Sizes, interleaved
from ._report import Row, Section

TITLE = "16. The read commands, each a fresh process"
BARE = "bare interpreter"
HELP = "agentledger --help"
IMPORTS = "their imports alone"
IMPORTED = "import agentledger.cli, agentledger.ledger, rich.console, rich.table, rich.tree"
"""What a read command imports before it reads a row: the command line (click), the reader
with the values (pydantic), and rich."""
READ_TARGET, HELP_TARGET = 0.300, 0.150
WARM_UP = 3
REPS = {"quick": 5, "default": 20, "full": 50}
WORD = "Lisbon"
"""What ``search`` looks for in the demo's ledger (in its messages and its trace)."""

CONSOLE = Path(sys.executable).with_name("agentledger")


@dataclass(frozen=True)
class Command:
    """A read command, and the SQL that reads the rows it prints."""

    name: str
    args: tuple[str, ...]
    sql: str


def commands(conversation: str, run: str) -> list[Command]:
    """The read commands over the demo's conversation ``conversation`` and its run ``run``."""
    c, r, w = conversation, run, WORD
    tree = f"JOIN agent_runs r ON r.id = s.run_id WHERE r.root_run_id = '{r}'"
    return [
        Command(
            "conversations",
            ("conversations",),
            "SELECT c.*, (SELECT count(*) FROM conversation_messages m "
            "WHERE m.conversation_id = c.id) FROM conversations c WHERE c.kind = 'main' "
            "ORDER BY c.updated_at DESC, c.id DESC LIMIT 50;",
        ),
        Command(
            "runs",
            ("runs",),
            "SELECT * FROM agent_runs ORDER BY started_at DESC, id DESC LIMIT 50;",
        ),
        Command(
            "show",
            ("show", c),
            f"SELECT * FROM conversation_messages WHERE conversation_id = '{c}' ORDER BY seq;",
        ),
        Command(
            "trace",
            ("trace", r),
            f"SELECT * FROM agent_runs WHERE root_run_id = '{r}' ORDER BY started_at, id; "
            f"SELECT s.* FROM step_executions s {tree} ORDER BY s.run_id, s.step_index; "
            f"SELECT s.* FROM tool_executions s {tree} ORDER BY s.step_index, s.position;",
        ),
        Command(
            "search",
            ("search", w),
            "SELECT m.* FROM conversation_messages_fts f JOIN conversation_messages m "
            f"ON m.id = f.message_id WHERE conversation_messages_fts MATCH '\"{w}\"' "
            "ORDER BY f.rank LIMIT 20; SELECT t.* FROM tool_executions_fts f "
            "JOIN tool_executions t ON t.id = f.tool_execution_id "
            f"WHERE tool_executions_fts MATCH '\"{w}\"' ORDER BY f.rank LIMIT 20;",
        ),
    ]


@dataclass(frozen=True)
class Process:
    """One system: a command line run to its end, its output discarded."""

    argv: tuple[str, ...]
    cwd: Path

    def run(self) -> float:
        env = environment()
        started = time.perf_counter()
        subprocess.run(self.argv, cwd=self.cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started


def environment() -> dict[str, str]:
    """This process's environment, as a user's shell has it: bytecode written (a warm start,
    after the untimed runs), and no ledger, scope or width of the benchmark's own."""
    left_out = {"PYTHONDONTWRITEBYTECODE", "AGENTLEDGER_DB", "AGENTLEDGER_TENANT"}
    left_out |= {"AGENTLEDGER_OWNER", "COLUMNS"}
    return {k: v for k, v in os.environ.items() if k not in left_out}


def shell(database: Path, sql: str) -> tuple[str, ...]:
    """The ``sqlite3`` shell reading ``sql`` from ``database`` (or, where no shell is
    installed, a fresh interpreter's ``sqlite3`` module doing the same)."""
    found = shutil.which("sqlite3")
    if found is not None:
        return (found, "-readonly", str(database), sql)
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "[c.execute(s).fetchall() for s in sys.argv[2].split(';') if s.strip()]"
    )
    return (sys.executable, "-c", code, str(database), sql)


@dataclass
class Measured:
    samples: Samples
    commands: list[Command]
    reps: int
    reader: str
    """What read the rows beside the commands: the ``sqlite3`` shell, or the module."""
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The machine's load average (1, 5 and 15 minutes) as the measuring ended: on a shared
    machine, what the absolute times are to be read with."""

    def ratio(self, top: str, bottom: str) -> str:
        return f"{self.samples.ratio(top, bottom):.2f}x"

    def best(self, name: str) -> float:
        return min(self.samples.times[name])


def demo_ledger(folder: Path) -> tuple[Path, str, str]:
    """The demo's ledger in ``folder``; its first main conversation and that conversation's
    first run (which called tools and a subagent)."""
    path = folder / "agentledger-demo.db"
    subprocess.run(
        [str(CONSOLE), "--db", str(path), "demo"],
        cwd=folder,
        env=environment(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with sqlite3.connect(path) as database:
        (conversation,) = database.execute(
            "SELECT id FROM conversations WHERE kind = 'main' ORDER BY created_at LIMIT 1"
        ).fetchone()
        (run,) = database.execute(
            "SELECT id FROM agent_runs WHERE conversation_id = ? ORDER BY started_at LIMIT 1",
            (conversation,),
        ).fetchone()
    database.close()
    return path, str(conversation), str(run)


def systems(folder: Path, reps: int) -> Measured:
    database, conversation, run = demo_ledger(folder)
    chosen = commands(conversation, run)
    timed: dict[str, Callable[[], float]] = {
        BARE: Process((sys.executable, "-c", "pass"), folder).run,
        HELP: Process((str(CONSOLE), "--help"), folder).run,
        IMPORTS: Process((sys.executable, "-c", IMPORTED), folder).run,
    }
    for command in chosen:
        argv = (str(CONSOLE), "--db", str(database), *command.args)
        timed[command.name] = Process(argv, folder).run
        timed[_reading(command)] = Process(shell(database, command.sql), folder).run
    for _ in range(WARM_UP):
        for work in timed.values():
            work()
    reader = "the sqlite3 shell" if shutil.which("sqlite3") else "python's sqlite3 module"
    samples = interleaved(timed, reps)
    return Measured(samples, chosen, reps, reader, os.getloadavg())


def _reading(command: Command) -> str:
    return f"{command.name}: the same rows read by sqlite3"


def measure(sizes: Sizes, folder: Path) -> Measured:
    return systems(folder, REPS[sizes.name])


# -- the report ---------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"


def report(measured: Measured) -> Section:
    median = measured.samples.median
    rows = [
        Row(f"{BARE}: start to exit", _ms(median(BARE))),
        Row(
            f"{IMPORTS} (what a read command imports); / bare",
            _ms(median(IMPORTS)),
            measured.ratio(IMPORTS, BARE),
        ),
        Row(
            f"{HELP} (target < {HELP_TARGET * 1e3:.0f} ms); / bare",
            _ms(median(HELP)),
            measured.ratio(HELP, BARE),
            headline=True,
        ),
    ]
    for command in measured.commands:
        name, reading = command.name, _reading(command)
        rows += [
            Row(
                f"agentledger {name} (target < {READ_TARGET * 1e3:.0f} ms); / bare; / sqlite3",
                _ms(median(name)),
                f"{measured.ratio(name, BARE)}; {measured.ratio(name, reading)}",
                headline=True,
            ),
            Row(reading, _ms(median(reading))),
        ]
    return Section(
        title=TITLE,
        about=(
            "Each command a fresh process of the installed `agentledger` on the demo's ledger "
            "(`agentledger demo`), timed from its start to its exit, its output thrown away; "
            "against the bare interpreter (`python -c pass`), against a fresh interpreter that "
            f'only imports what a read command imports (`python -c "{IMPORTED}"`), and '
            "against "
            f"{measured.reader} reading the rows the command prints (`sqlite3 -readonly`, the "
            f"statements in the notes). {measured.reps} repetitions, the systems interleaved, "
            f"the order rotating, after {WARM_UP} untimed runs of each; medians, and ratios of "
            "medians measured in this run."
        ),
        rows=rows,
        notes=_notes(measured),
    )


def _notes(measured: Measured) -> list[str]:
    slowest = max(measured.commands, key=lambda c: measured.samples.median(c.name))
    worst = measured.samples.median(slowest.name)
    met = "met" if worst < READ_TARGET else "missed"
    help_met = "met" if measured.samples.median(HELP) < HELP_TARGET else "missed"
    notes = [
        f"Target {met}: the slowest read command, `{slowest.name}`, takes "
        f"{_ms(worst)} (target < {READ_TARGET * 1e3:.0f} ms); `--help` {help_met} "
        f"({_ms(measured.samples.median(HELP))}, target < {HELP_TARGET * 1e3:.0f} ms).",
        "Best of the repetitions: "
        + ", ".join(
            f"{name} {_ms(measured.best(name))}"
            for name in (BARE, IMPORTS, HELP, *(c.name for c in measured.commands))
        )
        + ".",
        "Spread (interquartile range): "
        + ", ".join(
            f"{name} {_quartiles(measured.samples.times[name])}"
            for name in (HELP, *(c.name for c in measured.commands))
        )
        + ".",
    ]
    one, five, fifteen = measured.load
    notes.append(
        f"The machine's load average as the measuring ended: {one:.2f}, {five:.2f}, "
        f"{fifteen:.2f} (1, 5, 15 minutes; {os.cpu_count()} CPUs): the absolute times follow "
        "it, the ratios less so."
    )
    notes.append(
        "Beyond their imports (the median of each repetition's difference with the imports "
        "alone): "
        + ", ".join(f"{c.name} {_ms(_beyond_imports(measured, c.name))}" for c in measured.commands)
        + "."
    )
    notes += [f"`{c.name}` reads what this reads: `{c.sql}`" for c in measured.commands]
    return notes


def _beyond_imports(measured: Measured, name: str) -> float:
    """What the command ``name`` takes beyond its imports, paired by repetition."""
    times = measured.samples.times
    return statistics.median(a - b for a, b in zip(times[name], times[IMPORTS], strict=True))


def _quartiles(times: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return f"{q1 * 1e3:,.0f}–{q3 * 1e3:,.0f} ms"


# -- alone --------------------------------------------------------------------------------------


def written(results: str, section: Section) -> str:
    """``results`` (a ``bench/RESULTS.md``) with ``section`` in place of its own (or added at
    its end) and its headline rows in place of its rows of the summary (or after the last)."""
    lines = results.rstrip("\n").split("\n")
    number = section.title.split(".", 1)[0]
    summary = [
        f"| {number}. {row.measure} | {row.median} | {row.ratio} |"
        for row in section.rows
        if row.headline
    ]
    at = next((i for i, line in enumerate(lines) if line.startswith(f"| {number}. ")), None)
    kept = [line for line in lines if not line.startswith(f"| {number}. ")]
    if at is None:  # after the summary's rows of the sections before it
        before = [i for i, line in enumerate(kept) if 0 < _section_of(line) < int(number)]
        at = 1 + max(before)
    kept[at:at] = summary
    start = next((i for i, line in enumerate(kept) if line == f"## {section.title}"), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(kept)) if kept[i].startswith("## ")), len(kept))
        del kept[start:end]
        kept[start:start] = section.render()
    else:
        kept += ["", *section.render()]
    return "\n".join(kept).rstrip("\n") + "\n"


def _section_of(line: str) -> int:
    """The section a row of the summary belongs to (0 for any other line)."""
    found = line[2:6].split(".", 1)[0] if line.startswith("| ") else ""
    return int(found) if found.isdigit() else 0


def main() -> None:
    """``python -m bench.commands [--quick | --full] [--write]``: this section alone."""
    import argparse
    import tempfile

    from ._common import DEFAULT, FULL, QUICK

    parser = argparse.ArgumentParser(prog="python -m bench.commands")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--full", action="store_true")
    parser.add_argument("--write", action="store_true", help="put it into bench/RESULTS.md")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL if args.full else DEFAULT
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        section = report(measure(sizes, Path(tmp)))
    if args.write:
        command = " ".join(["python -m bench.commands", *sys.argv[1:]])
        section.notes.insert(
            0, f"Measured alone, with `{command}` (the others: the run named at the top)."
        )
    print("\n".join(section.render()))
    if args.write:
        results = Path(__file__).with_name("RESULTS.md")
        results.write_text(written(results.read_text(encoding="utf-8"), section), "utf-8")
        print(f"written to {results}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Benchmarks, reported as ratios measured in one run (machines are shared and noisy).

``python -m bench [--quick | --full] [--previous REF]`` prints a report and writes
``bench/RESULTS.md``:

1. the agent loop's own overhead, no database (``bench/loop.py``);
2. the ledger's cost per step against plain ``sqlite3`` writing the same rows, with
   ``synchronous=FULL`` and ``NORMAL`` (``bench/ledger.py``);
3. the cost of a turn at 50 and at 1000 turns of history, which should be flat,
4. the database's size per turn (``bench/history.py``),
5. DuckDB's ``run_rollup`` and ``tool_stats`` against SQLite alone on a synthetic ledger of
   1,000,000 steps in 100,000 runs, 10x fewer with ``--quick``, over the ledger and over the
   analytics cache (``bench/analytics.py``; ``python -m bench.analytics`` runs it alone), and
6. recording one turn at 50, 200 and 1000 turns of history (``--quick``: 50 and 200), through
   ``Agent.run``, through the Recorder API alone, through plain ``sqlite3``, and through
   LangGraph's ``SqliteSaver`` and the OpenAI Agents SDK's ``SQLiteSession`` when installed
   (``pip install -e '.[bench]'``), each system in a process of its own;
7. loading the conversation back for the next inference, cold and warm, against ``sqlite3``;
8. the database's size per turn for each of those systems (``bench/recording.py``);
9. ``import agentledger`` in a fresh interpreter, against a bare one and pydantic alone
   (``bench/imports.py``);
10. the ledger's statements, compiled once and run on the driver's cursor, against SQLAlchemy
    Core's ``execute`` and ``exec_driver_sql``, on SQLite and on a throwaway PostgreSQL when one
    can be started, and what statement logging and ``handle_error`` see
    (``bench/statements.py``);
11. with ``--previous REF`` (a git commit of this repository: its ``src/`` is exported into the
    temporary directory and run in worker processes of its own), this version against that one:
    recording a turn and loading a conversation (``bench/previous.py``), ``import agentledger``
    (in 9), and
12. the rows ``Ledger.runs()`` and ``Ledger.run_tree()`` return. Without ``--previous``, 11
    and 12 are skipped, and say so;
13. 200 conversations streaming at once through ``agent.astream`` in one process, on a SQLite
    file and on a throwaway PostgreSQL: turns per second, the event loop's lateness, a step's
    end to its ``StepRecorded``, the cost of the partial-output flushes, and cancel to
    committed (20 conversations with ``--quick``), and
14. the same turn, not streamed, through ``Agent.run`` and ``await agent.arun``
    (``bench/streaming.py``; ``python -m bench.streaming`` runs 13 and 14 alone), and
15. many writer processes on one database (a SQLite file; a throwaway PostgreSQL): turns per
    second at 1, 2, 4 and 16 writers, a step's commit p50/p99 and the ledger's lock retries,
    against the OpenAI Agents SDK's ``SQLiteSession`` and ``SQLAlchemySession`` and LangGraph's
    ``SqliteSaver`` and ``PostgresSaver`` (``bench/writers.py``; ``python -m bench.writers``
    runs it alone), and
16. the command line's read commands (``conversations``, ``runs``, ``show``, ``trace``,
    ``search``) and ``--help``, each a fresh process on the demo's ledger, against a bare
    interpreter and the ``sqlite3`` shell reading the same rows (``bench/commands.py``;
    ``python -m bench.commands`` runs it alone).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from . import (
    analytics,
    commands,
    history,
    imports,
    ledger,
    loop,
    previous,
    recording,
    statements,
    streaming,
    writers,
)
from ._common import DEFAULT, FULL, QUICK
from ._report import environment, render
from ._versions import Version, export, resolve


def main(argv: list[str] | None = None) -> None:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="a short run (about a minute), a smoke check"
    )
    size.add_argument("--full", action="store_true", help="more repetitions")
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    parser.add_argument(
        "--tmpdir",
        type=Path,
        default=None,
        help="where the temporary databases go (default: the system's temporary directory)",
    )
    parser.add_argument(
        "--previous",
        metavar="REF",
        default=None,
        help="a git commit of this repository to compare this version with (sections 9, 11 "
        "and 12); without it, that comparison is skipped",
    )
    args = parser.parse_args(args_list)
    if args.previous is not None:
        try:
            resolve(args.previous)
        except ValueError as problem:
            parser.error(f"--previous: {problem}")
    sizes = QUICK if args.quick else FULL if args.full else DEFAULT
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-", dir=args.tmpdir) as tmp:
        env = environment(str(Path(tmp).parent))
        before: Version | None = None
        if args.previous is not None:
            before = export(args.previous, Path(tmp))
            env.append(
                f"The previous version: {before.described} (`--previous {args.previous}`), its "
                "`src/` exported with `git archive` into the temporary directory; this version: "
                "the working tree."
            )
        print("agent loop ...", file=sys.stderr, flush=True)
        sections = [loop.run(sizes)]
        sections.append(ledger.run(sizes, Path(tmp)))
        sections.extend(history.run(sizes, Path(tmp)))
        sections.append(analytics.run(sizes, Path(tmp)))
        sections.extend(recording.run(sizes, Path(tmp)))
        sections.append(imports.run(sizes, before))
        sections.append(statements.run(sizes, Path(tmp)))
        sections.extend(previous.run(sizes, Path(tmp), before))
        sections.extend(streaming.run(sizes, Path(tmp)))
        sections.extend(writers.run(sizes, Path(tmp)))
        print("the read commands, each a fresh process ...", file=sys.stderr, flush=True)
        sections.append(commands.report(commands.measure(sizes, Path(tmp))))
    elapsed = time.perf_counter() - started
    command = " ".join(["python -m bench", *args_list])
    report = render(command=command, mode=sizes.name, env=env, sections=sections, elapsed=elapsed)
    print(report)
    args.output.write_text(report, encoding="utf-8")
    print(f"written to {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()

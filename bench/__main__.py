"""Benchmarks, reported as ratios measured in one run (machines are shared and noisy).

``python -m bench [--quick | --full] [--previous REF] [--only 6,15]`` prints a report and
writes ``bench/RESULTS.md`` (with ``--only``, prints those sections alone). What each section
measures, and why a target is missed: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import (
    analytics,
    checkpoints,
    frameworks,
    previous,
    recording,
    startup,
    statements,
    steps,
    streaming,
    viewer,
    writers,
)
from ._common import DEFAULT, FULL, QUICK, Sizes
from ._report import Section, environment, render
from ._versions import Version, export, resolve

Runner = Callable[[Sizes, Path, Version | None], list[Section]]
SECTIONS: list[tuple[tuple[int, ...], Runner]] = [
    ((1, 2), lambda sizes, tmp, _: steps.run(sizes, tmp)),
    ((5,), lambda sizes, tmp, _: [analytics.run(sizes, tmp)]),
    ((6, 7, 8), lambda sizes, tmp, _: recording.run(sizes, tmp)),
    ((9,), lambda sizes, _, before: [startup.imports(sizes, before)]),
    ((10,), lambda sizes, tmp, _: [statements.run(sizes, tmp)]),
    ((11, 12), previous.run),
    ((13, 14), lambda sizes, tmp, _: streaming.run(sizes, tmp)),
    ((15,), writers.run),
    ((16,), lambda sizes, tmp, _: [startup.read_commands(sizes, tmp)]),
    ((17,), lambda sizes, tmp, _: checkpoints.run(sizes, tmp)),
    ((18,), lambda sizes, tmp, _: frameworks.run(sizes, tmp)),
    ((19,), lambda sizes, tmp, _: viewer.run(sizes, tmp)),
]
RETIRED = Section(
    "Retired figures",
    "What the report measured before and no longer does, and why. The figures: the last run "
    "that measured them (commit 2086672's bench/RESULTS.md, and for section 10 the run of "
    "c98c525).",
    notes=[
        "Sections 2, 3, 4, 6 and 8 held agentledger against a raw `sqlite3` writer of the "
        "ledger's own rows (`agentledger / raw, per step` 2.66x FULL and 3.02x NORMAL; raw with "
        "the lease UPDATEs; `recorder alone / raw` 1.97x, target 1.5x; raw's turn @ 1000 / @ 50 "
        "1.11x; bytes per turn / raw 1.01x). That writer copied the ledger's row layout column by "
        "column (its change stamps, lease statements and buffer rows) and had to change with "
        "every migration; the floor now is plain `sqlite3` writing the turn's messages and usage, "
        "what any agent store must write (sections 2, 6 and 8).",
        "Sections 3 and 4 (a turn at 50 and 1000 turns of history, bytes per turn, in one "
        "process) measured what section 6 measures again in processes of their own, at 50, 200 "
        "and 1000 turns, for every system; section 8 gives the bytes per turn.",
        "LangGraph's `SqliteSaver` in section 6: every checkpoint holds the whole thread, so its "
        "files grow with the square of the history (about 25 GB at 1000 turns); it was skipped "
        "for want of disk in the last runs. LangGraph is measured in section 15, and on a chat "
        "of short turns in section 17.",
        "Section 10's D, SQLAlchemy's private `Connection._cursor_execute` (a step transaction "
        "D/A 1.01x FULL, 1.11x NORMAL, 1.00x and 1.05x on PostgreSQL): the ledger no longer "
        "has that path (it uses SQLAlchemy's public APIs only), so there is nothing left to "
        "hold against it.",
        "Section 10's replay of captured statements, one transaction at a time, and its "
        "per-statement table (B/A 1.17x to 7.57x a statement): the section now records whole "
        "turns through `Agent.run` each way and times each recorder call (one transaction) and "
        "the statements in it, the same comparison where a user meets it. Its visibility table "
        "(every statement shown to `echo`, the engine's logger, cursor events and `handle_error`, "
        "each way) was a check, not a figure: tests/test_statement_logging.py asserts it.",
        "The explanations of missed targets (what bounds the many-writers curves, why a checked "
        "cold load stays above 1.5x, why the DuckDB rollup over the attached file stays a few "
        "times SQLite's speed) are in docs/benchmarks.md, not computed here; so is section 12's "
        "per-run difference, which is the medians' difference over the runs returned.",
    ],
)


def main(argv: list[str] | None = None) -> None:
    args_list = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a short run, a smoke check")
    size.add_argument("--full", action="store_true", help="more repetitions")
    parser.add_argument("--output", type=Path, default=None, help="default: bench/RESULTS.md")
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the databases go")
    parser.add_argument(
        "--previous", metavar="REF", help="a git commit to compare with (9, 11, 12)"
    )
    parser.add_argument("--only", metavar="N,N", help="these sections alone, printed")
    args = parser.parse_args(args_list)
    try:
        only = {int(n) for n in args.only.split(",")} if args.only else None
        if args.previous is not None:
            resolve(args.previous)
    except ValueError as problem:
        parser.error(str(problem))
    sizes = QUICK if args.quick else FULL if args.full else DEFAULT
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-", dir=args.tmpdir) as tmp:
        env = environment(str(Path(tmp).parent))
        before = export(args.previous, Path(tmp)) if args.previous is not None else None
        if before is not None:
            env.append(f"The previous version: {before.described} (`--previous {args.previous}`).")
        sections = [
            section
            for numbers, runner in SECTIONS
            if only is None or only & set(numbers)
            for section in runner(sizes, Path(tmp), before)
        ]
    sections.sort(key=lambda section: int(section.title.split(".", 1)[0]))
    report = render(
        command=" ".join(["python -m bench", *args_list]),
        mode=sizes.name,
        env=env,
        sections=sections + ([RETIRED] if only is None else []),
        elapsed=time.perf_counter() - started,
    )
    print(report)
    output = args.output or (Path(__file__).with_name("RESULTS.md") if only is None else None)
    if output is not None:
        output.write_text(report, encoding="utf-8")
        print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main()

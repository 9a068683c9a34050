"""The report: the machine and versions, then one table per benchmark, each figure a row and
each target judged (met or missed) where it is shown."""

from __future__ import annotations

import operator
import os
import platform
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ._common import ms, x

PACKAGES = ("agentledger", "pydantic", "pydantic-core", "SQLAlchemy", "sqlmodel", "alembic")
PEERS = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
    "openai-agents",
    "asyncpg",
)
"""The peers of ``bench/peers.py`` (the ``bench`` extra), named in the report's header."""
TARGET = re.compile(r"([<>≤≥]) ([\d.]+) ?(x|s|ms)")
OPERATORS = {"<": operator.lt, "≤": operator.le, ">": operator.gt, "≥": operator.ge}
UNITS = {"x": 1.0, "s": 1.0, "ms": 1e-3}


def judged(shown: str, value: float, target: str) -> str:
    """``shown``, and whether ``value`` (a ratio, or seconds) meets ``target``: a comparison, a
    bound and its unit (``"≤ 3x"``, ``"< 300 ms"``)."""
    found = TARGET.fullmatch(target)
    assert found is not None, target
    op, bound, unit = found.groups()
    return f"{shown}, {'met' if OPERATORS[op](value, float(bound) * UNITS[unit]) else 'missed'}"


@dataclass(frozen=True)
class Row:
    measure: str
    median: str = ""
    ratio: str = ""
    headline: bool = False
    """A figure of the summary at the top of the report (shown in bold)."""

    def cells(self) -> list[str]:
        cells = [self.measure, self.median, self.ratio]
        return [f"**{c}**" if c and self.headline else c for c in cells]


def ratio(measure: str, value: float, target: str = "", headline: bool = False) -> Row:
    """A ratio's row; with a ``target``, the target named and judged."""
    if not target:
        return Row(measure, ratio=x(value), headline=headline)
    return Row(
        f"{measure} (target {target})", ratio=judged(x(value), value, target), headline=headline
    )


def seconds(
    measure: str,
    value: float,
    target: str = "",
    *,
    headline: bool = False,
    shown: Callable[[float], str] = ms,
) -> Row:
    """A time's row; with a ``target``, the target named and judged."""
    if not target:
        return Row(measure, shown(value), headline=headline)
    named = f"{measure} (target {target})"
    return Row(named, judged(shown(value), value, target), headline=headline)


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` gives each column's side, ``l`` or ``r`` (by default the
    first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "|".join("---:" if side == "r" else "---" for side in align) + "|"
    lines = [f"| {' | '.join(cells)} |" for cells in rows]
    return [f"| {' | '.join(header)} |", rule, *lines, ""]


@dataclass
class Section:
    """One benchmark's part of the report."""

    title: str
    about: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    """Markdown after the notes (more tables), for what does not fit one row per figure."""

    def render(self) -> list[str]:
        lines = [f"## {self.title}", "", self.about, ""]
        if self.rows:  # a section skipped says why in its notes, with no table
            lines += table(("measure", "median", "ratio"), (row.cells() for row in self.rows))
        if self.notes:
            lines += [*(f"- {note}" for note in self.notes), ""]
        return lines + ([*self.details, ""] if self.details else [])


def _cpu() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _versions(packages: Sequence[str]) -> str:
    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    return ", ".join(f"{p} {installed(p)}" for p in packages)


def environment(tempdir: str) -> list[str]:
    return [
        f"Machine: {platform.machine()}, {_cpu()}, {os.cpu_count()} CPUs, "
        f"{platform.system()} {platform.release()}.",
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"SQLite {sqlite3.sqlite_version}; {_versions(PACKAGES)}.",
        f"Peers: {_versions(PEERS)}.",
        f"Database files in a temporary directory under `{tempdir}`.",
    ]


def render(
    *, command: str, mode: str, env: list[str], sections: list[Section], elapsed: float
) -> str:
    summary = [
        [f"{s.title.split('.', 1)[0]}. {r.measure}", r.median, r.ratio]
        for s in sections
        for r in s.rows
        if r.headline
    ]
    lines = [
        "# Benchmark results",
        "",
        f"Command: `{command}` ({mode} mode; took {elapsed:.0f} s).",
        *env,
        "",
        "Machines are shared and noisy: every comparison is measured in one run, the systems "
        "interleaved, several repetitions, medians. The ratios are the figures to compare; "
        "absolute times are printed for scale only.",
        "",
        "## Summary",
        "",
        *table(("measure", "median", "ratio"), summary),
    ]
    for section in sections:
        lines += section.render()
    return "\n".join(lines)

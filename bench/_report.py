"""The report: the machine and versions, then one table per benchmark."""

from __future__ import annotations

import os
import platform
import sqlite3
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ("agentledger", "pydantic", "pydantic-core", "SQLAlchemy", "sqlmodel", "alembic")
PEERS = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
    "openai-agents",
    "asyncpg",
)
"""The peers of ``bench/recording.py`` and ``bench/writers.py`` (the ``bench`` extra), named in
the report's header."""


@dataclass(frozen=True)
class Row:
    measure: str
    median: str = ""
    ratio: str = ""
    headline: bool = False
    """A figure of the summary at the top of the report (shown in bold)."""

    def cells(self) -> str:
        if not self.headline:
            return f"| {self.measure} | {self.median} | {self.ratio} |"
        bold = [f"**{cell}**" if cell else "" for cell in (self.measure, self.median, self.ratio)]
        return "| " + " | ".join(bold) + " |"


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
            lines += ["| measure | median | ratio |", "|---|---:|---:|"]
            lines += [row.cells() for row in self.rows]
            lines.append("")
        if self.notes:
            lines += [f"- {note}" for note in self.notes]
            lines.append("")
        if self.details:
            lines += [*self.details, ""]
        return lines


def _cpu() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def environment(tempdir: str) -> list[str]:
    packages = ", ".join(f"{p} {_version(p)}" for p in PACKAGES)
    peers = ", ".join(f"{p} {_version(p)}" for p in PEERS)
    return [
        f"Machine: {platform.machine()}, {_cpu()}, {os.cpu_count()} CPUs, "
        f"{platform.system()} {platform.release()}.",
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"SQLite {sqlite3.sqlite_version}; {packages}.",
        f"Peers: {peers}.",
        f"Database files in a temporary directory under `{tempdir}`.",
    ]


def render(
    *, command: str, mode: str, env: list[str], sections: list[Section], elapsed: float
) -> str:
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
    ]
    lines += ["## Summary", "", "| measure | median | ratio |", "|---|---:|---:|"]
    for section in sections:
        number = section.title.split(".", 1)[0]
        lines += [
            f"| {number}. {r.measure} | {r.median} | {r.ratio} |"
            for r in section.rows
            if r.headline
        ]
    lines.append("")
    for section in sections:
        lines += section.render()
    return "\n".join(lines)

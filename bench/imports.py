"""What ``import agentledger`` costs a fresh interpreter, against a bare interpreter, pydantic
alone and (with ``--previous``) the previous version's ``import agentledger``.

Each system is a fresh ``python -P -c ...`` of this benchmark's interpreter, timed from the
parent (start to exit), its output thrown away; the systems interleaved, the order rotating,
many repetitions, medians. The figure is a system's time over the bare interpreter's in the
same repetition (``python -c pass``: the interpreter's own start, ``site`` and the virtual
environment's ``.pth`` files), the median of those paired differences.

Every interpreter runs with ``PYTHONPATH`` set to the source of the agentledger it imports (the
bare and pydantic ones to this version's, which they do not import) and without
``PYTHONDONTWRITEBYTECODE``; each runs a few times first, untimed, so that every ``.pyc`` is
written and the files are in the page cache: a warm start, as on a machine that imported it
before. Then one more run of each version lists what ``import agentledger`` loaded.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ._common import Samples, Sizes, interleaved
from ._report import Row, Section
from ._versions import PREVIOUS, THIS, Version, this_version

BARE, PYDANTIC = "bare interpreter", "pydantic alone"
CODE = {BARE: "pass", PYDANTIC: "from pydantic import BaseModel"}
IMPORT = "import agentledger"
TARGET_OVER_BARE = 0.150  # seconds: this version's import over the bare interpreter
WARM_UP = 3
REPS = {"quick": 10, "default": 40, "full": 100}
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
LIST_MODULES = (
    "import json, sys; import agentledger; "
    "print(json.dumps([agentledger.__file__, sorted(sys.modules)]))"
)


@dataclass(frozen=True)
class Interpreter:
    """One system: the code a fresh interpreter runs, and the source first on its path."""

    code: str
    source: Path

    def argv(self, code: str | None = None) -> list[str]:
        return [sys.executable, "-P", "-c", code or self.code]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = str(self.source)
        return env

    def run(self) -> float:
        """One start to exit, timed from here."""
        argv, env = self.argv(), self.env()
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started

    def loaded(self) -> tuple[str, list[str]]:
        """Where its ``agentledger`` came from, and every module the import left loaded."""
        out = subprocess.run(
            self.argv(LIST_MODULES), env=self.env(), check=True, capture_output=True, text=True
        ).stdout
        where, modules = json.loads(out)
        return where, modules


def systems(versions: list[Version]) -> dict[str, Interpreter]:
    here = versions[0].source
    found = {name: Interpreter(code, here) for name, code in CODE.items()}
    found.update({v.label: Interpreter(IMPORT, v.source) for v in versions})
    return found


@dataclass
class Measured:
    samples: Samples
    versions: list[Version]
    loaded: dict[str, list[str]]
    """Each version's ``sys.modules`` after ``import agentledger``."""
    reps: int

    def over_bare(self, name: str) -> list[float]:
        """``name``'s time minus the bare interpreter's, per repetition."""
        times = self.samples.times
        return [a - b for a, b in zip(times[name], times[BARE], strict=True)]

    def extra(self, name: str) -> float:
        return statistics.median(self.over_bare(name))


def measure(reps: int, versions: list[Version]) -> Measured:
    chosen = systems(versions)
    for _ in range(WARM_UP):
        for interpreter in chosen.values():
            interpreter.run()
    loaded = {v.label: _checked(chosen[v.label], v) for v in versions}
    samples = interleaved({name: i.run for name, i in chosen.items()}, reps)
    return Measured(samples, versions, loaded, reps)


def _checked(interpreter: Interpreter, version: Version) -> list[str]:
    where, modules = interpreter.loaded()
    if not Path(where).resolve().is_relative_to(version.source.resolve()):
        raise AssertionError(
            f"{version.label}: agentledger came from {where}, not {version.source}"
        )
    return modules


# -- the report ---------------------------------------------------------------------------------


def run(sizes: Sizes, previous: Version | None) -> Section:
    reps = REPS[sizes.name]
    versions = [this_version(), *([previous] if previous is not None else [])]
    print(f"import agentledger, {reps} fresh interpreters each ...", file=sys.stderr, flush=True)
    return report(measure(reps, versions))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def report(measured: Measured) -> Section:
    labels = [v.label for v in measured.versions]
    rows = [
        Row(f"{name}: start to exit", _ms(measured.samples.median(name)))
        for name in measured.samples.times
    ]
    for name in [PYDANTIC, *labels]:
        target = f" (target < {TARGET_OVER_BARE * 1e3:.0f} ms)" if name == THIS else ""
        rows.append(
            Row(
                f"{name}: over the bare interpreter{target}",
                _ms(measured.extra(name)),
                headline=name in labels,
            )
        )
    rows.append(
        Row(f"{THIS} / {PYDANTIC}, over the bare interpreter", "", _ratio(measured, THIS, PYDANTIC))
    )
    if PREVIOUS in labels:
        rows += [
            Row(
                f"{THIS} / {PREVIOUS}, over the bare interpreter",
                "",
                _ratio(measured, THIS, PREVIOUS),
                headline=True,
            ),
            Row(
                f"{THIS} / {PREVIOUS}, start to exit",
                "",
                _x(measured.samples.ratio(THIS, PREVIOUS)),
            ),
        ]
    return Section(
        title="9. Importing agentledger",
        about=(
            f'`python -P -c "{IMPORT}"` in a fresh interpreter, timed from start to exit, '
            f"against `python -P -c pass` (the bare interpreter) and `python -P -c "
            f'"{CODE[PYDANTIC]}"` (pydantic alone){_previous_about(measured)}; '
            f"{measured.reps} repetitions, the systems interleaved, the order rotating, medians. "
            "Over the bare interpreter: the median of each repetition's difference with the "
            "bare interpreter's run. Bytecode cache warm: every system ran "
            f"{WARM_UP} times first, untimed, with `PYTHONDONTWRITEBYTECODE` unset."
        ),
        rows=rows,
        notes=_notes(measured),
    )


def _ratio(measured: Measured, top: str, bottom: str) -> str:
    return _x(measured.extra(top) / measured.extra(bottom))


def _previous_about(measured: Measured) -> str:
    previous = next((v for v in measured.versions if v.label == PREVIOUS), None)
    if previous is None:
        return ""
    return f", and against {PREVIOUS}'s `{IMPORT}` ({previous.described})"


def _notes(measured: Measured) -> list[str]:
    notes = [_verdict(measured)]
    for version in measured.versions:
        modules = measured.loaded[version.label]
        heavy = [name for name in HEAVY if name in modules]
        notes.append(
            f"{version.label.capitalize()} ({version.described}): `{IMPORT}` leaves "
            f"{len(modules)} modules loaded; of the heavy packages: {', '.join(heavy) or 'none'}."
        )
    if not any(v.label == PREVIOUS for v in measured.versions):
        notes.append(
            f"{PREVIOUS.capitalize()}: not measured (give `--previous REF`, a git commit)."
        )
    notes.append(_spread(measured))
    return notes


def _verdict(measured: Measured) -> str:
    extra = measured.extra(THIS)
    met = "met" if extra < TARGET_OVER_BARE else "missed"
    return (
        f"Target {met}: {THIS}'s `{IMPORT}` takes {_ms(extra)} more than the bare "
        f"interpreter (target < {TARGET_OVER_BARE * 1e3:.0f} ms)."
    )


def _spread(measured: Measured) -> str:
    """The interquartile range of each system's paired difference, in ms."""
    parts = []
    for name in measured.samples.times:
        if name == BARE:
            continue
        q1, _, q3 = statistics.quantiles(measured.over_bare(name), n=4, method="inclusive")
        parts.append(f"{name} {q1 * 1e3:,.0f}–{q3 * 1e3:,.0f} ms")
    return "Spread (interquartile range of the differences over the bare interpreter): " + (
        ", ".join(parts) + "."
    )

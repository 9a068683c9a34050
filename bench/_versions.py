"""The versions of agentledger a benchmark can hold against each other: this one (the package the
benchmark imports) and a previous one, exported from git (``--previous REF``) into the run's
temporary directory, which goes away with it.

A version is a directory holding an ``agentledger`` package: a worker process or an interpreter
started with that directory first on ``PYTHONPATH`` imports that version (the same virtual
environment serves both, so the dependencies are the same too).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import agentledger

REPOSITORY = Path(__file__).resolve().parent.parent
"""The repository ``bench/`` sits in: where ``--previous`` is looked up."""
THIS, PREVIOUS = "this version", "the previous version"


@dataclass(frozen=True)
class Version:
    label: str
    source: Path
    """The directory holding its ``agentledger`` package."""
    described: str
    """What it is, for the report: ``the working tree`` or ``commit 5a1c1be``."""


def this_version() -> Version:
    """The agentledger this process imported (for ``make bench``, the working tree's)."""
    source = Path(agentledger.__file__ or "").resolve().parent.parent
    return Version(THIS, source, "the working tree")


def resolve(ref: str) -> str:
    """The commit ``ref`` names in the repository; ``ValueError`` with git's words if none."""
    found = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise ValueError(f"{ref!r} names no commit of {REPOSITORY.name} ({found.stderr.strip()})")
    return found.stdout.strip()


def export(ref: str, into: Path) -> Version:
    """Commit ``ref``'s ``src/`` written under ``into`` (``git archive``): the previous version.
    Its bytecode is written there too on first import, and goes with the directory."""
    commit = resolve(ref)
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", "--format=tar", commit, "src"],
        capture_output=True,
        check=True,
    ).stdout
    target = into / "previous"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    source = target / "src"
    if not (source / "agentledger" / "__init__.py").is_file():
        raise ValueError(f"commit {commit[:7]} has no src/agentledger package")
    return Version(PREVIOUS, source, f"commit {commit[:7]}")

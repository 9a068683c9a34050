"""The versions of agentledger a benchmark can hold against each other: this one (the package the
benchmark imports) and a previous one, exported from git (``--previous REF``) into the run's
temporary directory, which goes away with it. A version is a directory holding an
``agentledger`` package: a process started with it first on ``PYTHONPATH`` imports that version
(the same virtual environment serves both, so the dependencies are the same too).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import agentledger

from ._common import REPOSITORY

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
    return Version(
        THIS, Path(agentledger.__file__ or "").resolve().parent.parent, "the working tree"
    )


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, check=False)


def resolve(ref: str) -> str:
    """The commit ``ref`` names in the repository; ``ValueError`` with git's words if none."""
    found = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode != 0:
        raise ValueError(
            f"{ref!r} names no commit of {REPOSITORY.name} ({found.stderr.decode().strip()})"
        )
    return found.stdout.decode().strip()


def export(ref: str, into: Path) -> Version:
    """Commit ``ref``'s ``src/`` written under ``into`` (``git archive``): the previous version.
    Its bytecode is written there too on first import, and goes with the directory."""
    commit = resolve(ref)
    archive = _git("archive", "--format=tar", commit, "src")
    archive.check_returncode()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into / "previous", filter="data")
    source = into / "previous" / "src"
    if not (source / "agentledger" / "__init__.py").is_file():
        raise ValueError(f"commit {commit[:7]} has no src/agentledger package")
    return Version(PREVIOUS, source, f"commit {commit[:7]}")

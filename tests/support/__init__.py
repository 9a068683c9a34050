"""What the tests share: a fake clock and model provider, a throwaway PostgreSQL server and the
databases the fixtures hand out, SQL straight on a ledger's database, the migration harness, and
the child processes of the crash, concurrency and reliability tests.

The test session finds this package because ``tests/`` is on its path (``pythonpath`` in
``pyproject.toml``). Child processes find it from any working directory: the crash children
are forked with the session's ``sys.path`` (``support.forked``), and a fresh interpreter such
as the workload's fork server is started with :func:`module_command` and
:func:`child_environment`.

The modules child processes import (this one, ``forked``, ``crash_child``,
``subagent_crash_child``, ``crash_points``, ``workload``) do not import pytest: a child starts
with the library alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
"""The directory that holds this package: what a child process needs on its path."""


def module_command(module: str, *args: str) -> list[str]:
    """``python -m module args``, with this interpreter: how a test starts a child of ``support``
    (``module_command("support.crash_child", spec_file)``)."""
    return [sys.executable, "-m", module, *args]


def child_environment() -> dict[str, str]:
    """This process's environment with ``tests/`` first on ``PYTHONPATH``, so that a child
    started with :func:`module_command` imports ``support`` wherever it runs."""
    inherited = os.environ.get("PYTHONPATH")
    path = str(TESTS_DIR) if not inherited else os.pathsep.join([str(TESTS_DIR), inherited])
    return {**os.environ, "PYTHONPATH": path}

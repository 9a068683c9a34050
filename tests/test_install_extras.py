"""What ``pip install agentledger`` and each of its extras bring, checked in fresh virtual
environments from the wheel: the wheel ships every migration, which an installed copy plays on a
fresh ledger; the base install has no analytics engine, no LangGraph and no sqlite-utils, and
says which extra to install for each; each analytics extra brings everything
its conversion needs (``.df()``, ``.arrow()``, ``.pl()``), ``examples`` what the example chat
app runs on, ``langgraph`` a graph checkpointed by ``LedgerSaver`` with its messages as rows,
``pydantic-ai`` a conversation saved through ``LedgerConversationStore`` with its runs,
``adk`` an ADK session kept by ``LedgerSessionService``, ``import`` ``agentledger import``
of an Agents SDK session file (without the SDK), and ``ui`` the viewer with the files it serves.

Slow (a wheel, a virtual environment per extra, packages from the registry): it runs with
``AGENTLEDGER_EXTRAS=1``, as ``make extras`` and CI do, and is skipped otherwise. The base
install's package count and size on disk are printed at the end of the session; its
``agentledger datasette-metadata`` reads the schema's documentation the wheel ships.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest

from agentledger.integrations.datasette import datasette_metadata
from support.reports import INSTALL

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "support" / "install_probe.py"

pytestmark = pytest.mark.skipif(
    os.environ.get("AGENTLEDGER_EXTRAS") != "1",
    reason="installs the wheel in fresh virtual environments: AGENTLEDGER_EXTRAS=1 (make extras)",
)

ANALYTICS = {"duckdb", "duckdb-extension-sqlite-scanner"}
OTEL = {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-proto", "protobuf"}
OTEL_API = {"opentelemetry-api"}
"""The OpenTelemetry API alone (no SDK, no exporter): FastAPI depends on it, and so does the MCP
SDK (the mcp extra's, and the one the OpenAI Agents SDK needs), so their extras bring it
whatever agentledger does."""
HEAVY = {
    *ANALYTICS,
    *OTEL,
    "duckdb-extension-postgres-scanner",
    "numpy",
    "pandas",
    "pyarrow",
    "polars",
}
ROLLUP = [["agent", 30]]
"""What the probe's rollup query reads back: the run's path and its input tokens."""

BASE_SIZE_LIMIT = 100 * 2**20
"""The base install (agentledger and what it depends on) stays under 100 MB on disk."""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agentledger wheel, built once from this working tree."""
    target = tmp_path_factory.mktemp("wheel")
    pip(sys.executable, "wheel", "--no-deps", "--wheel-dir", str(target), str(ROOT))
    (built,) = target.glob("agentledger-*.whl")
    return built


def pip(python: str | Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stderr}"


def install(wheel: Path, extra: str | None, where: Path) -> Path:
    """A fresh virtual environment with the wheel (and ``extra``) installed; its python."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    pip(python, "install", f"{wheel}[{extra}]" if extra else str(wheel))
    return python


def probe(python: Path, extra: str, url: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), str(PROBE), extra, url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the probe failed with [{extra}]:\n{done.stderr}"
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    def add(line: str) -> None:
        request.node.user_properties.append((INSTALL, line))

    return add


def megabytes(size: int) -> str:
    return f"{size / 2**20:.0f} MB"


def holds(
    found: dict[str, Any],
    extra: str,
    brings: AbstractSet[str],
    report: Callable[[str], None],
    *,
    allowed: AbstractSet[str] = frozenset(),
) -> None:
    """The venv of ``extra`` holds what it ``brings`` and nothing of :data:`HEAVY` but that
    and what it is ``allowed``; its size reported."""
    installed = found["installed"]
    assert brings <= set(installed), brings - set(installed)
    unwanted = (HEAVY - brings - allowed) & set(installed)
    assert not unwanted, unwanted
    report(f"[{extra}]: {len(installed)} packages, {megabytes(sum(installed.values()))}")


def test_the_base_install_has_no_extra_and_says_which_to_install_for_each(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    shipped = set(zipfile.ZipFile(wheel).namelist())
    migrations = ROOT / "src"
    needed = {
        str(path.relative_to(migrations))
        for pattern in ("env.py", "script.py.mako", "versions/*.py", "*.py")
        for path in (migrations / "agentledger" / "migrations").glob(pattern)
    }
    assert needed <= shipped, sorted(needed - shipped)  # every revision ships in the wheel
    python = install(wheel, None, tmp_path / "venv")

    found = probe(python, "base", f"sqlite:///{tmp_path / 'ledger.db'}")
    newest = sorted((migrations / "agentledger" / "migrations" / "versions").glob("0*.py"))[-1]
    # The installed copy migrated the fresh ledger to the newest revision it ships.
    assert sqlite_version(tmp_path / "ledger.db") == newest.name.split("_")[0]

    assert found["uses"]["analytics"].endswith("Install it: pip install 'agentledger[analytics]'")
    assert found["uses"]["langgraph"] == (
        "LangGraph is not installed: agentledger.integrations.langgraph (LedgerSaver) comes "
        "with the langgraph extra. Install it: pip install 'agentledger[langgraph]'"
    )
    assert found["uses"]["pydantic-ai"] == (
        "pydantic-ai (2.66 or newer) is not installed: agentledger.integrations.pydantic_ai "
        "(LedgerConversationStore) comes with the pydantic-ai extra. Install it: pip install "
        "'agentledger[pydantic-ai]'"
    )
    assert found["uses"]["adk"] == (
        "Google ADK (2.10 or newer) is not installed: agentledger.integrations.adk "
        "(LedgerSessionService) comes with the adk extra. Install it: pip install "
        "'agentledger[adk]'"
    )
    missing = (
        "Error: sqlite-utils is not installed: agentledger import comes with the import "
        "extra. Install it: pip install 'agentledger[import]'"
    )
    assert (
        found["uses"]["import"]
        == [  # the dry run, then the import: nothing written
            {"code": 1, "out": "", "err": missing, "conversations": 0}
        ]
        * 2
    )
    installed = found["installed"]
    assert "agentledger" in installed
    assert not HEAVY & set(installed), HEAVY & set(installed)
    size = sum(installed.values())
    assert size < BASE_SIZE_LIMIT, megabytes(size)
    largest = sorted(installed, key=installed.__getitem__, reverse=True)[:3]
    report(
        f"base install: {len(installed)} packages, {megabytes(size)} on disk (largest: "
        + ", ".join(f"{name} {megabytes(installed[name])}" for name in largest)
        + ")"
    )
    assert datasette_metadata_of(python, tmp_path / "ledger.db") == datasette_metadata("ledger")


def sqlite_version(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute("SELECT version_num FROM agentledger_version").fetchone()
    conn.close()
    return str(version)


def datasette_metadata_of(python: Path, ledger: Path) -> dict[str, Any]:
    """``agentledger datasette-metadata`` as the installed wheel writes it: its descriptions
    from the schema's documentation the wheel ships (no source tree beside it)."""
    command = [str(python.parent / "agentledger"), "--db", str(ledger)]
    for args in (["db", "upgrade"], ["datasette-metadata"]):
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, cwd=ledger.parent, check=False
        )
        assert done.returncode == 0, done.stderr
    written: dict[str, Any] = json.loads(done.stdout)
    return written


@pytest.mark.parametrize(
    ("extra", "brings", "library"),
    [
        pytest.param("analytics", ANALYTICS, "builtins", id="analytics: .fetchall()"),
        pytest.param("pandas", {*ANALYTICS, "pandas", "numpy"}, "pandas", id="pandas: .df()"),
        pytest.param("arrow", {*ANALYTICS, "pyarrow"}, "pyarrow", id="arrow: .arrow()"),
        pytest.param("polars", {*ANALYTICS, "polars", "pyarrow"}, "polars", id="polars: .pl()"),
    ],
)
def test_each_analytics_extra_brings_what_its_conversion_needs(
    wheel: Path,
    tmp_path: Path,
    report: Callable[[str], None],
    extra: str,
    brings: set[str],
    library: str,
) -> None:
    python = install(wheel, extra, tmp_path / "venv")

    found = probe(python, extra, f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == {"library": library, "rows": ROLLUP}
    holds(found, extra, brings, report)


def test_the_examples_extra_runs_the_example_chat_app(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "examples", tmp_path / "venv")

    found = probe(python, "examples", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert [(m["role"], m["content"], m["interrupted"]) for m in found["uses"]] == [
        ("user", "Lisbon", False),
        ("assistant", "Lisbon a subject", False),
    ]
    holds(found, "examples", {"fastapi", "uvicorn", "starlette"}, report, allowed=OTEL_API)


def test_the_ui_extra_serves_the_viewer_with_its_own_stylesheet(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "ui", tmp_path / "venv")

    found = probe(python, "ui", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == {"page": 200, "style": 200, "agent": True}
    holds(found, "ui", {"starlette", "jinja2", "uvicorn"}, report)


def test_the_openai_agents_extra_keeps_an_sdk_session_in_the_ledger(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "openai-agents", tmp_path / "venv")

    found = probe(python, "openai-agents", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == [{"role": "user", "content": "hello"}]
    holds(found, "openai-agents", {"openai-agents"}, report, allowed=OTEL_API)


def test_the_otel_extra_traces_a_run_and_exports_the_ledgers_runs(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "otel", tmp_path / "venv")

    found = probe(python, "otel", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == {"live": ["chat scripted", "invoke_agent agent"], "exported": 6}
    holds(found, "otel", OTEL, report)


def test_the_postgresql_extras_record_and_analyse_a_ledger_on_postgresql(
    wheel: Path, tmp_path: Path, report: Callable[[str], None], pg_url: str
) -> None:
    python = install(wheel, "postgresql", tmp_path / "postgresql")
    found = probe(python, "postgresql", pg_url)
    assert found["uses"].endswith("Install it: pip install 'agentledger[analytics]'")
    assert not HEAVY & set(found["installed"])
    report(f"[postgresql]: {len(found['installed'])} packages")

    python = install(wheel, "analytics-postgresql", tmp_path / "analytics-postgresql")
    found = probe(python, "analytics-postgresql", pg_url)
    assert found["uses"]["rows"] == ROLLUP * 2  # both probes' runs, in one ledger
    assert {*ANALYTICS, "duckdb-extension-postgres-scanner", "psycopg"} <= set(found["installed"])


def test_the_mcp_extra_offers_an_mcp_servers_tools_to_an_agent(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "mcp", tmp_path / "venv")

    found = probe(python, "mcp", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == {
        "result": "42",
        "metadata": {
            "mcp_server": "probe",
            "mcp_tool": "multiply",
            "structured_content": {"result": 42},
        },
    }
    holds(found, "mcp", {"mcp", "jsonschema"}, report, allowed=OTEL_API)


def test_the_langgraph_extra_keeps_a_graphs_thread_as_rows_of_the_ledger(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "langgraph", tmp_path / "venv")

    found = probe(python, "langgraph", f"sqlite:///{tmp_path / 'ledger.db'}")

    said = [["user", "hi"], ["assistant", "Hello!"], ["user", "bye"], ["assistant", "Bye!"]]
    assert found["uses"]["state"] == [content for _, content in said]
    assert found["uses"]["messages"] == said
    assert found["uses"]["runs"] == [["completed", 1, 12, 3, 1]] * 2  # priced: cost_usd > 0
    assert found["uses"]["checkpoints"] > 0
    holds(found, "langgraph", {"langgraph", "langgraph-checkpoint", "langchain-core"}, report)


def test_the_pydantic_ai_extra_keeps_a_conversation_and_its_runs_in_the_ledger(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "pydantic-ai", tmp_path / "venv")

    found = probe(python, "pydantic-ai", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"]["loaded"] == ["ModelRequest", "ModelResponse"] * 2
    said = [["user", "hi"], ["assistant", "answer 1"], ["user", "bye"], ["assistant", "answer 3"]]
    assert found["uses"]["messages"] == said
    assert found["uses"]["runs"] == [["completed", 12, 3]] * 2
    holds(found, "pydantic-ai", {"pydantic-ai-slim", "pydantic-graph"}, report, allowed=OTEL_API)


def test_the_adk_extra_keeps_an_adk_session_in_the_ledger(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "adk", tmp_path / "venv")

    found = probe(python, "adk", f"sqlite:///{tmp_path / 'ledger.db'}")

    assert found["uses"] == {  # the probe's own scripted run first, of no tenant or owner
        "same": True,
        "messages": [["user", "What is 2 + 3?"], ["assistant", "5"], ["user", "hi"]],
        "owners": [[None, None], ["probe", "u"]],
    }
    holds(found, "adk", {"google-adk", "google-genai"}, report, allowed=OTEL)


def test_the_import_extra_imports_an_agents_sdk_session_file_without_the_sdk(
    wheel: Path, tmp_path: Path, report: Callable[[str], None]
) -> None:
    python = install(wheel, "import", tmp_path / "venv")

    found = probe(python, "import", f"sqlite:///{tmp_path / 'ledger.db'}")

    source = tmp_path / "sessions.db"
    what = f"1 turn (2 steps, 1 tool execution) in 1 conversation from {source} (agents-sdk)"
    unpriced = "; the file records no token usage, so the steps are unpriced."
    assert found["uses"]["said"] == [
        {
            "code": 0,
            "out": f"Would import {what}{unpriced} Nothing was written (dry run).",
            "err": "",
            "conversations": 0,
        },
        {"code": 0, "out": f"Imported {what}{unpriced}", "err": "", "conversations": 1},
    ]
    assert found["uses"]["messages"] == [["user", "Weather in Paris?"], ["assistant", "22C."]]
    assert found["uses"]["tools"] == [["get_weather", "22C"]]
    assert not {"openai-agents", "langgraph", "llm"} & set(found["installed"])
    holds(found, "import", {"sqlite-utils"}, report)

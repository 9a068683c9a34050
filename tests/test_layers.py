"""The package's shape: ``import agentledger`` stays light, no module imports itself through
others (``TYPE_CHECKING`` imports included), and no module reaches into another package's
private modules. The layers themselves are import-linter's contracts (``make lint``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from functools import cache

import grimp
import pytest

from support.cli import record_a_run

VIEWER = ("starlette", "jinja2", "uvicorn")
"""What the viewer (``agentledger ui``, the ui extra) serves and writes its pages with."""

HEAVY = (
    "httpx",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "duckdb",
    "rich",
    "click",
    "agents",
    "datasette",
    "opentelemetry",
    "mcp",
    "jsonschema",
    "pydantic_ai",
    "google.adk",
    "google.genai",
    *VIEWER,
)
"""Libraries ``import agentledger`` must not load (``agents`` is the OpenAI Agents SDK; it,
Datasette, OpenTelemetry, the MCP SDK (with jsonschema), pydantic-ai and Google's ADK (with
google-genai) are loaded only by their integrations, and the web libraries by the viewer)."""


def loaded_by(statement: str, names: tuple[str, ...] = HEAVY) -> dict[str, bool]:
    """Which of the libraries ``names`` (the heavy ones) a fresh interpreter has loaded after
    ``statement``."""
    script = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps({{name: name in sys.modules for name in {list(names)!r}}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    loaded: dict[str, bool] = json.loads(out)
    return loaded


def test_import_agentledger_loads_no_heavy_library():
    assert loaded_by("import agentledger") == dict.fromkeys(HEAVY, False)


def test_import_agentledger_builds_no_validator():
    """The values' models build their validators when first used (``defer_build``): building
    one at import (an instance made at module level, say) costs a tenth of the import."""
    script = (
        "import json, agentledger, agentledger._values as values\n"
        "from pydantic import BaseModel\n"
        "models = [o for o in vars(values).values()\n"
        "          if isinstance(o, type) and issubclass(o, BaseModel)]\n"
        "print(json.dumps([len(models), [m.__name__ for m in models if m.__pydantic_complete__]]))"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    count, built = json.loads(out.stdout)
    assert count > 20
    assert built == []


def test_import_agentledger_loads_no_pydantic_until_a_value_is_used():
    assert loaded_by("import agentledger", ("pydantic",)) == {"pydantic": False}
    assert loaded_by("from agentledger import Message", ("pydantic",)) == {"pydantic": True}


LIGHT = ("pydantic", "rich", "sqlalchemy", "sqlmodel", "alembic", "httpx", "duckdb")
"""What a command line that only parses its arguments does without (``agentledger --help``)."""


def test_the_command_line_loads_click_alone_until_a_command_runs():
    assert loaded_by("import agentledger.cli", LIGHT) == dict.fromkeys(LIGHT, False)


def test_the_command_line_loads_the_viewers_libraries_only_when_the_viewer_is_imported():
    assert loaded_by("import agentledger.cli", VIEWER) == dict.fromkeys(VIEWER, False)
    assert loaded_by("import agentledger.ui", VIEWER) == dict.fromkeys(VIEWER, True)


READ_COMMANDS = (
    ["conversations"],
    ["conversations", "--json"],
    ["runs"],
    ["show", "{conversation}"],
    ["trace", "{run}"],
    ["trace", "{run}", "--json"],
    ["search", "Paris"],
)


def test_the_read_commands_read_a_sqlite_ledger_without_sqlalchemy_or_alembic(tmp_path):
    """Each of them, run in one fresh interpreter, with everything they print."""
    recorded = record_a_run(str(tmp_path / "ledger.db"))
    commands = [
        [
            "--db",
            recorded.url,
            *(a.format(conversation=recorded.conversation_id, run=recorded.run_id) for a in args),
        ]
        for args in READ_COMMANDS
    ]
    statement = (
        "from click.testing import CliRunner\n"
        "from agentledger.cli import cli\n"
        f"for args in {commands!r}:\n"
        "    result = CliRunner().invoke(cli, args)\n"
        "    assert result.exit_code == 0, (args, result.output)"
    )
    assert loaded_by(statement, ("sqlalchemy", "sqlmodel", "alembic")) == dict.fromkeys(
        ("sqlalchemy", "sqlmodel", "alembic"), False
    )


def test_a_sqlite_ledger_at_the_newest_schema_opens_without_alembic_or_another_dialect(tmp_path):
    """Alembic loads only to migrate, and SQLAlchemy's PostgreSQL dialect only for PostgreSQL."""
    path = tmp_path / "ledger.db"
    record_a_run(str(path))
    statement = (
        "from agentledger.ledger import Ledger\n"
        f"with Ledger.open({str(path)!r}) as ledger:\n"
        "    assert ledger.runs()[0].budget"
    )
    names = ("alembic", "sqlalchemy.dialects.postgresql")
    assert loaded_by(statement, names) == dict.fromkeys(names, False)


def test_the_agent_and_its_builder_load_no_heavy_library():
    statement = "from agentledger import Agent, AgentBuilder, InferenceResponse, ScriptedLLM, tool"
    assert loaded_by(statement) == dict.fromkeys(HEAVY, False)


@pytest.mark.parametrize(
    ("name", "library"),
    [("Ledger", "sqlalchemy"), ("OpenAIChat", "httpx"), ("Analytics", "sqlalchemy")],
)
def test_a_heavy_name_loads_its_library_when_it_is_first_used(name, library):
    assert loaded_by(f"from agentledger import {name}")[library]


FRAMEWORKS = ("agents", "pydantic_ai", "google.adk", "mcp", "langgraph", "langchain_core")
"""The agent frameworks and SDKs the integrations keep to themselves (``agents`` is the OpenAI
Agents SDK)."""


def test_the_ledger_the_command_line_and_the_importer_load_no_framework():
    """The command line registers ``agentledger mcp serve`` without the MCP SDK, and the
    importer reaches LangGraph's integration only inside the reading of a SqliteSaver file (the
    contract that keeps LangGraph there lets that one import through)."""
    statement = (
        "import agentledger.ledger, agentledger.integrations, agentledger.cli,"
        " agentledger.importing, agentledger.cli._import"
    )
    assert loaded_by(statement, FRAMEWORKS) == dict.fromkeys(FRAMEWORKS, False)


@pytest.mark.parametrize(
    ("integration", "library"),
    [
        ("openai_agents", "agents"),
        ("pydantic_ai", "pydantic_ai"),
        ("adk", "google.adk"),
        ("mcp", "mcp"),
        ("mcp_server", "mcp"),
        ("langgraph", "langgraph"),
    ],
)
def test_each_framework_is_loaded_by_its_integration(integration, library):
    """What makes the test above able to fail: each name is the library its integration
    loads (an agent built with MCP servers loads the SDK, and so does serving a ledger over
    MCP)."""
    importlib.import_module(f"agentledger.integrations.{integration}")
    assert library in sys.modules


def test_duckdb_is_loaded_when_analytics_first_queries_not_when_it_is_imported(tmp_path):
    """DuckDB comes with the analytics extra: importing analytics must work without it."""
    ledger = tmp_path / "ledger.db"
    assert not loaded_by("import agentledger.analytics, agentledger.cli")["duckdb"]
    opened = (
        "from agentledger.ledger import Ledger\n"
        "from agentledger import Analytics\n"
        f"Ledger.open({str(ledger)!r}).close()\n"
        f"Analytics.open({str(ledger)!r}).close()"
    )
    assert loaded_by(opened)["duckdb"]


def opentelemetry_loaded_by(statement: str) -> list[str]:
    """The OpenTelemetry (and protobuf) modules a fresh interpreter has loaded after
    ``statement``."""
    script = (
        f"import json, sys\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] == 'opentelemetry' or m.startswith('google.protobuf'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    loaded: list[str] = json.loads(out)
    return loaded


def test_import_agentledger_and_a_plain_run_load_nothing_of_opentelemetry():
    """The otel extra is installed here, and still nothing of it loads unless tracing is
    asked for."""
    run = (
        "from agentledger import AgentBuilder, InferenceResponse, ScriptedLLM\n"
        "from agentledger.ledger import Ledger\n"
        "ledger = Ledger.open('sqlite://')\n"
        "llm = ScriptedLLM([InferenceResponse(content='hi')])\n"
        "assert AgentBuilder().with_llm(llm).with_ledger(ledger).build().run('?').answer == 'hi'"
    )
    assert opentelemetry_loaded_by(f"{run}\nimport agentledger.cli") == []
    from agentledger.integrations.otel import OpenTelemetryTracer  # noqa: F401

    assert "opentelemetry.trace" in sys.modules


@cache
def graph() -> grimp.ImportGraph:
    """Every import between agentledger's modules, those under ``TYPE_CHECKING`` included."""
    return grimp.build_graph("agentledger", exclude_type_checking_imports=False)


def cycles(modules: set[str]) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected
    components with more than one module, or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph().find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            looped = module in graph().find_modules_directly_imported_by(module)
            if len(component) > 1 or looped:
                found.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others():
    assert cycles(set(graph().modules)) == []


def private(module: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in module.split("."))


def package_of(module: str) -> str:
    """The package whose private module ``module`` is: the part before its first private
    component."""
    parts = module.split(".")
    first = next(i for i, part in enumerate(parts) if part.startswith("_"))
    return ".".join(parts[:first])


def test_no_module_imports_another_packages_private_modules():
    reached_into = sorted(
        (importer, imported)
        for imported in graph().modules
        if private(imported)
        for importer in graph().find_modules_that_directly_import(imported)
        if not importer.startswith(package_of(imported) + ".") and importer != package_of(imported)
    )
    assert reached_into == []

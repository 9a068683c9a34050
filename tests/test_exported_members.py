"""``__all__`` is the public API: sorted, and exactly the public names a package exports, for
the door (``agentledger``), every public subpackage and the public modules beside the door; the
layers below are private, and the docs name no private module."""

from __future__ import annotations
import __future__

import ast
import importlib
import pkgutil
import re
import types
from pathlib import Path

import pytest

import agentledger

INCLUDED_PRIVATE_MEMBERS = {"__version__"}


ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = ["agentledger.errors", "agentledger.events"]


def is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def public_packages() -> list[types.ModuleType]:
    """``agentledger``, every package below it whose name has no private part, and the public
    modules beside the door."""
    found = [agentledger, *map(importlib.import_module, PUBLIC_MODULES)]
    for info in pkgutil.walk_packages(agentledger.__path__, "agentledger."):
        if info.ispkg and is_public(info.name):
            found.append(importlib.import_module(info.name))
    return found


def all_of(package: types.ModuleType) -> list[str]:
    """The package's ``__all__`` (none: it exports nothing)."""
    return list(getattr(package, "__all__", []))


def isort_style(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, then Classes, then the rest."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def exported_names(package: types.ModuleType) -> set[str]:
    """Public names bound in ``package`` or loaded by it when first used, leaving out its own
    submodules."""
    bound = {
        name
        for name, value in vars(package).items()
        if (not name.startswith("_") or name in INCLUDED_PRIVATE_MEMBERS)
        and not isinstance(value, __future__._Feature)
        and not (
            isinstance(value, types.ModuleType)
            and value.__name__.startswith(f"{package.__name__}.")
        )
    }
    lazy = set(getattr(package, "_LAZY", {}))
    return bound | lazy | (INCLUDED_PRIVATE_MEMBERS & set(all_of(package)))


def groups_only(package: types.ModuleType) -> bool:
    """Whether ``package`` only groups packages below it (``agentledger.integrations``: a
    docstring, no names of its own), so it needs no ``__all__``."""
    return not hasattr(package, "__all__") and not exported_names(package)


PACKAGES = [p for p in public_packages() if not groups_only(p)]
IDS = [p.__name__ for p in PACKAGES]


def test_every_public_package_is_covered_and_the_layers_are_private():
    assert set(IDS) == {
        "agentledger",
        "agentledger.errors",
        "agentledger.events",
        "agentledger.llm",
        "agentledger.ledger",
        "agentledger.analytics",
        "agentledger.cli",
        "agentledger.importing",
        "agentledger.integrations.datasette",
        "agentledger.integrations.otel",
        "agentledger.integrations.mcp",
        "agentledger.integrations.mcp_server",
        "agentledger.integrations.openai_agents",
        "agentledger.integrations.langgraph",
        "agentledger.integrations.pydantic_ai",
        "agentledger.integrations.adk",
        "agentledger.ui",
    }
    for layer in ("values", "core", "recording", "loop", "drivers", "builder"):
        with pytest.raises(ImportError):
            importlib.import_module(f"agentledger.{layer}")


def test_the_door_is_about_fifty_names():
    assert 45 <= len(agentledger.__all__) <= 65


def test_the_door_is_one_list_that_type_checkers_read_too():
    """``__all__`` and the lazy table are built from ``__init__.pyi``'s lines; the stub read as
    Python (as a type checker reads it) imports exactly those names, each from where it loads."""
    stub = ast.parse(Path(agentledger.__file__).with_name("__init__.pyi").read_text())
    declared = {
        alias.name: f"agentledger.{node.module}"
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    for node in stub.body:
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1
            assert all(alias.asname == alias.name for alias in node.names), "re-export as X as X"
    assert declared == agentledger._LAZY
    assert set(agentledger.__all__) == {*declared, "__version__"}


def test_the_docs_name_no_private_module():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        f"{page.name}: {found}"
        for page in pages
        for found in re.findall(r"agentledger(?:\.\w+)*\._\w+", page.read_text())
    }
    assert named == set()


@pytest.mark.parametrize("package", PACKAGES, ids=IDS)
def test_all_is_sorted(package):
    assert all_of(package) == sorted(all_of(package), key=isort_style)


@pytest.mark.parametrize("package", PACKAGES, ids=IDS)
def test_all_names_exactly_the_public_members(package):
    assert len(set(all_of(package))) == len(all_of(package))
    assert set(all_of(package)) == exported_names(package)


@pytest.mark.parametrize("package", PACKAGES, ids=IDS)
def test_everything_in_all_can_be_imported(package):
    for name in all_of(package):
        assert getattr(package, name) is not None


def test_the_door_exports_what_a_user_needs():
    from agentledger import (  # noqa: F401
        Agent,
        AgentBuilder,
        Analytics,
        AnthropicMessages,
        InferenceResponse,
        Ledger,
        OpenAIChat,
        ScriptedLLM,
        tool,
    )


def test_every_error_of_the_tree_is_exported_and_drawn_in_its_docstring():
    from agentledger import errors

    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.AgentLedgerError)
    }
    assert "LedgerReadOnlyError" in defined
    assert set(errors.__all__) == defined
    for name in defined:
        assert f" {name} " in errors.__doc__, f"{name} is not drawn in the error tree"
    door_errors = {name for name in agentledger.__all__ if name in defined}
    assert {"AgentLedgerError", "LedgerError", "ProviderError", "UsageError"} <= door_errors
    for name in door_errors:
        assert getattr(agentledger, name) is getattr(errors, name)


def test_the_door_gives_the_same_objects_as_the_packages_that_define_them():
    from agentledger._values import InferenceResponse
    from agentledger.analytics import Analytics
    from agentledger.ledger import Ledger
    from agentledger.llm import OpenAIChat, ScriptedLLM

    assert agentledger.Ledger is Ledger
    assert agentledger.Analytics is Analytics
    assert agentledger.OpenAIChat is OpenAIChat
    assert agentledger.ScriptedLLM is ScriptedLLM
    assert agentledger.InferenceResponse is InferenceResponse


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        agentledger.Nope  # noqa: B018


def test_the_version_is_a_string():
    assert isinstance(agentledger.__version__, str)
    assert agentledger.__version__

"""``__all__`` is the public API: sorted, and exactly the public names a package exports, for
the door (``agentledger``) and every public subpackage."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import agentledger

INCLUDED_PRIVATE_MEMBERS = {"__version__"}


def public_packages() -> list[types.ModuleType]:
    """``agentledger`` and every package below it whose name has no private part."""
    found = [agentledger]
    for info in pkgutil.walk_packages(agentledger.__path__, "agentledger."):
        if info.ispkg and not any(p.startswith("_") for p in info.name.split(".")):
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


def test_every_public_subpackage_is_covered():
    assert set(IDS) >= {
        "agentledger",
        "agentledger.values",
        "agentledger.core",
        "agentledger.recording",
        "agentledger.loop",
        "agentledger.drivers",
        "agentledger.llm",
        "agentledger.ledger",
        "agentledger.analytics",
        "agentledger.cli",
        "agentledger.integrations.otel",
        "agentledger.integrations.mcp",
        "agentledger.integrations.mcp_server",
    }


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


def test_the_door_exports_every_error_of_the_tree_drawn_in_its_docstring():
    from agentledger import errors

    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.AgentLedgerError)
    }
    assert "LedgerReadOnlyError" in defined
    for name in defined:
        assert name in agentledger.__all__, name
        assert getattr(agentledger, name) is getattr(errors, name)
        assert f" {name} " in errors.__doc__, f"{name} is not drawn in the error tree"


def test_the_door_gives_the_same_objects_as_the_packages_that_define_them():
    from agentledger.analytics import Analytics
    from agentledger.ledger import Ledger
    from agentledger.llm import OpenAIChat, ScriptedLLM
    from agentledger.values import InferenceResponse

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

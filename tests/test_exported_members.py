"""``__all__`` is the public API: sorted, and exactly the public names a package exports."""

from __future__ import annotations

import types

import pytest

import agentledger
import agentledger.analytics
import agentledger.llm

INCLUDED_PRIVATE_MEMBERS = {"__version__"}


def isort_style(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, then Classes, then the rest."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def exported_names(package: types.ModuleType) -> set[str]:
    """Public names bound in ``package``, leaving out its own submodules."""
    return {
        name
        for name, value in vars(package).items()
        if (not name.startswith("_") or name in INCLUDED_PRIVATE_MEMBERS)
        and not (
            isinstance(value, types.ModuleType)
            and value.__name__.startswith(f"{package.__name__}.")
        )
    }


@pytest.mark.parametrize(
    "package", [agentledger, agentledger.llm, agentledger.analytics], ids=lambda p: p.__name__
)
def test_all_is_sorted(package):
    assert package.__all__ == sorted(package.__all__, key=isort_style)


@pytest.mark.parametrize(
    "package", [agentledger, agentledger.llm, agentledger.analytics], ids=lambda p: p.__name__
)
def test_all_names_exactly_the_public_members(package):
    assert len(set(package.__all__)) == len(package.__all__)
    assert set(package.__all__) == exported_names(package)


@pytest.mark.parametrize(
    "package", [agentledger, agentledger.llm, agentledger.analytics], ids=lambda p: p.__name__
)
def test_everything_in_all_can_be_imported(package):
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_the_version_is_a_string():
    assert isinstance(agentledger.__version__, str)
    assert agentledger.__version__

"""agentledger: an LLM agent loop whose memory is a relational ledger.

The conversation (user messages and final answers) and the execution trace (tool calls, tool
results, reasoning, errors) are kept apart. This module is the public door: every name in
``__all__`` is public API, listed once, in ``__init__.pyi`` beside this file (which type
checkers read). ``import agentledger`` loads the error tree only; every other name is loaded
when first used, so a program pays for what it uses: the values load pydantic, the SQL ledger
SQLAlchemy, the HTTP providers httpx, analytics DuckDB, and none of the last three is loaded by
the agent itself (nor ``agentledger --help`` by any of them).

The public packages beside the door: ``agentledger.ledger`` (the SQL ledger and its reader),
``agentledger.analytics``, ``agentledger.events`` (what a run streams), ``agentledger.llm``
(the providers), ``agentledger.errors`` (the whole error tree) and ``agentledger.integrations.*``.
Every module whose name starts with ``_`` is private and may change in any release.
"""

import importlib as _importlib
import os as _os

from . import errors as _errors


def _door() -> dict[str, str]:
    """Each exported name and the module it is loaded from, read from ``__init__.pyi``'s
    ``from .module import Name as Name`` lines: the one list of the door. (Read by splitting
    lines, with no ``re``, ``typing`` or ``pathlib``: ``import agentledger`` stays light.)"""
    door = {}
    with open(_os.path.join(_os.path.dirname(__file__), "__init__.pyi"), encoding="utf-8") as stub:
        for line in stub:
            match line.split():
                case ["from", module, "import", name, "as", alias] if alias == name:
                    door[name] = "agentledger" + module
    return door


_LAZY = _door()
"""Public names loaded when first used (``from agentledger import Ledger`` loads the ledger),
and the module that has each."""

__all__ = sorted([*_LAZY, "__version__"], key=lambda n: (not n.isupper(), not n[:1].isupper(), n))

globals().update(
    {name: getattr(_errors, name) for name, module in _LAZY.items() if module == _errors.__name__}
)


def __getattr__(name: str) -> object:
    if name == "__version__":
        value: object = _version()
    elif name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentledger")
    except PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "0.0.0"

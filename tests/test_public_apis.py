"""The package uses only the public APIs of SQLAlchemy, SQLModel, pydantic and Alembic: a
private method or attribute of theirs can change in any release without a word.

Read from the package's source (its syntax trees): no import of a private module or name of
those libraries, no attribute of theirs that is private (a name with one leading underscore
that their classes or instances hold, and that the package does not define itself), and none
of pydantic's ``__pydantic_*__`` internals, as attributes or as names handed to ``setattr``."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

import agentledger

LIBRARIES = ("sqlalchemy", "sqlmodel", "pydantic", "pydantic_core", "alembic")
SOURCE = Path(agentledger.__file__).parent

MODULES = (
    "sqlalchemy",
    "sqlalchemy.engine",
    "sqlalchemy.exc",
    "sqlalchemy.orm",
    "sqlalchemy.orm.instrumentation",
    "sqlalchemy.pool",
    "sqlalchemy.sql",
    "sqlalchemy.sql.compiler",
    "sqlalchemy.types",
    "sqlmodel",
    "pydantic",
    "pydantic_core",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "alembic.script",
)
"""Where the classes whose private names are looked for are exported."""

ROW_API = frozenset({"_mapping", "_fields", "_asdict", "_t", "_tuple"})
"""SQLAlchemy's ``Row`` names its public methods with an underscore, so that they cannot
collide with a column's name (its documentation says so): these are public."""

PYDANTIC_INTERNAL = re.compile(r"__pydantic_\w+__")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def classes(module_name: str) -> Iterator[type]:
    module = importlib.import_module(module_name)
    yield from (value for value in vars(module).values() if isinstance(value, type))


@cache
def library_private_names() -> frozenset[str]:
    """The private names the libraries' classes hold, and their instances that the package
    works with: an engine, a connection, a result, a compiled statement, a model."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm.instrumentation import manager_of_class

    from agentledger import Message
    from agentledger.ledger import Conversation

    names: set[str] = set()
    for module_name in MODULES:
        for cls in classes(module_name):
            names.update(n for n in dir(cls) if is_private(n))
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        result = conn.exec_driver_sql("SELECT 1 AS one")
        row = result.first()
        instances = [engine, conn, result, row, conn.connection, engine.dialect, engine.pool]
        manager = manager_of_class(Conversation)
        instances += [select(1).compile(engine), Message(role="user"), manager]
        instances.append(manager.new_instance())
        for instance in instances:
            names.update(n for n in dir(instance) if is_private(n))
    engine.dispose()
    return frozenset(names - ROW_API)


def trees(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield str(path.relative_to(root.parent)), ast.parse(path.read_text("utf-8"), str(path))


def own_names(modules: Iterable[ast.Module]) -> set[str]:
    """The private names the package defines itself: its functions, classes, module and class
    attributes, arguments, and what it sets on ``self`` or ``cls``."""
    names: set[str] = set()
    for tree in modules:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return {name for name in names if is_private(name)}


def from_library(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in LIBRARIES


def uses(tree: ast.Module, private: frozenset[str]) -> Iterator[str]:
    """Each use in ``tree`` of a library's private module, name or attribute, with its line."""
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and from_library(node.module):
            assert node.module is not None
            modules = node.module.split(".")
            for alias in node.names:
                if any(is_private(part) for part in [*modules, alias.name]):
                    yield f"{where}: from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if from_library(alias.name) and any(is_private(p) for p in parts):
                    yield f"{where}: import {alias.name}"
        elif isinstance(node, ast.Attribute):
            if node.attr in private or PYDANTIC_INTERNAL.fullmatch(node.attr):
                yield f"{where}: .{node.attr}"
        elif (  # a name handed to setattr or getattr
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and PYDANTIC_INTERNAL.fullmatch(node.value)
        ):
            yield f"{where}: {node.value!r}"


def private_uses(root: Path) -> dict[str, list[str]]:
    """The package under ``root``'s uses of the libraries' private APIs, by module."""
    modules = dict(trees(root))
    private = library_private_names() - own_names(modules.values())
    found = {name: list(uses(tree, private)) for name, tree in modules.items()}
    return {name: lines for name, lines in found.items() if lines}


def test_the_package_uses_no_private_api_of_sqlalchemy_sqlmodel_pydantic_or_alembic():
    assert private_uses(SOURCE) == {}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from sqlalchemy.sql.util import _repr_params", "from sqlalchemy.sql.util import"),
        ("import pydantic._internal._model_construction", "import pydantic._internal"),
        ("def f(conn):\n    conn._handle_dbapi_exception(None, '', (), None, None)", "._handle"),
        ("def f(engine):\n    return engine._should_log_info()", "._should_log_info"),
        ("def f(conn):\n    conn._echo = True", "._echo"),
        ("def f(m):\n    object.__setattr__(m, '__pydantic_fields_set__', set())", "fields_set"),
        ("def f(m):\n    return m.__pydantic_private__", ".__pydantic_private__"),
    ],
)
def test_the_check_finds_each_kind_of_private_use(tmp_path, code, expected):
    (tmp_path / "agentledger").mkdir()
    (tmp_path / "agentledger" / "module.py").write_text(code + "\n", "utf-8")
    (found,) = private_uses(tmp_path / "agentledger").values()
    assert any(expected in line for line in found), found


def test_the_check_allows_public_apis_and_the_package_s_own_private_names(tmp_path):
    code = (
        "class Kept:\n"
        "    def __init__(self, conn):\n"
        "        self._echo = conn.exec_driver_sql('SELECT 1').first()._mapping\n"
        "    def again(self, other):\n"
        "        return other._echo\n"
    )
    (tmp_path / "agentledger").mkdir()
    (tmp_path / "agentledger" / "module.py").write_text(code, "utf-8")
    assert private_uses(tmp_path / "agentledger") == {}

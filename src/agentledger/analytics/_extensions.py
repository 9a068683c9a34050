"""DuckDB's scanner extensions, loaded from their PyPI packages: never downloaded at run time."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ._duckdb import INSTALL, require_duckdb

if TYPE_CHECKING:
    import duckdb

PACKAGES = {
    "sqlite_scanner": "duckdb-extension-sqlite-scanner",
    "postgres_scanner": "duckdb-extension-postgres-scanner",
}
"""Each extension agentledger loads, and the PyPI package that ships it."""

_EXTRAS = {
    "sqlite_scanner": INSTALL,
    "postgres_scanner": "pip install 'agentledger[analytics-postgresql]'",
}
"""The extra that installs each extension with the DuckDB it is built for."""


def extension_path(name: str) -> Path:
    """The extension file ``name`` for the installed DuckDB, from its PyPI package.

    Raises :class:`ConfigurationError` naming what to install when DuckDB or the package is
    missing, or when the package was built for another DuckDB version.
    """
    require_duckdb()
    import duckdb

    package = PACKAGES[name]
    wanted = duckdb.__version__
    install = f"pip install '{package}=={wanted}' (or: {_EXTRAS[name]})"
    try:
        module = importlib.import_module(package.replace("-", "_"))
    except ImportError:
        raise ConfigurationError(
            f"the DuckDB extension {name} is not installed. Install it: {install}"
        ) from None
    root = Path(next(iter(module.__path__))) / "extensions"
    path = root / f"v{wanted}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise ConfigurationError(
            f"{package} {_installed(package)} ships the {name} extension for DuckDB "
            f"{_built_for(root)}, but DuckDB {wanted} is installed; they must match. Install "
            f"matching versions: {install}"
        )
    return path


def load(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    connection.load_extension(str(extension_path(name)))


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "(unknown version)"


def _built_for(root: Path) -> str:
    versions = sorted(p.name.removeprefix("v") for p in root.glob("v*")) if root.is_dir() else []
    return ", ".join(versions) or "no version"

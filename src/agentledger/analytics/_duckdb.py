"""DuckDB comes with the ``analytics`` extra, not with the base install: an app that embeds a
conversation store carries no analytics engine. The analytics modules import it when they
first need it (never at import), so that what needs it says what to install."""

from __future__ import annotations

from ..errors import ConfigurationError

INSTALL = "pip install 'agentledger[analytics]'"
"""What installs DuckDB and its SQLite scanner, at the versions this agentledger loads."""


def require_duckdb() -> None:
    """Raise :class:`ConfigurationError` naming the ``analytics`` extra when DuckDB cannot be
    imported; after it, ``import duckdb`` succeeds."""
    try:
        import duckdb  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "DuckDB is not installed: agentledger's analytics (Analytics, the analytics "
            "report and views, the Parquet export) run in DuckDB, which comes with the "
            f"analytics extra. Install it: {INSTALL}"
        ) from None


def quoted(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'

"""The URL SQLAlchemy needs for a database the ledger is given, for tests that reach the
database through connections of their own. Light: child processes of the crash tests import it."""

from __future__ import annotations

from pathlib import Path


def sqlalchemy_url(url: str | Path) -> str:
    """A path as ``sqlite:///``, PostgreSQL with psycopg 3 named (SQLAlchemy's default driver
    there is psycopg2 before 2.1), anything else as it is."""
    text = str(url)
    if "://" not in text:
        return f"sqlite:///{text}"
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    return text

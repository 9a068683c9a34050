"""The ledger's database URLs: a file path, a ``sqlite:///`` URL or a ``postgresql://`` URL,
read without SQLAlchemy (the command line reads a SQLite ledger without loading it).

A URL is parsed as SQLAlchemy's ``make_url`` parses it (``tests/test_urls.py`` compares the
two): ``driver://user:password@host:port/database?query``, the user, password and database
percent-decoded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from ..errors import ConfigurationError

_URL = re.compile(
    r"""
    (?P<name>[\w+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<ipv4host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
    (?:/(?P<database>[^?]*))?
    (?:\?(?P<query>.*))?
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class ParsedURL:
    """The parts of a database URL the ledger reads."""

    backend: str
    """The database: ``sqlite`` or ``postgresql`` (the driver after ``+`` left out)."""
    database: str | None
    """The database's name or, for SQLite, its file (percent-decoded)."""


def parse_url(url: str) -> ParsedURL:
    """The backend and database of ``url``; :class:`ConfigurationError` when it is no URL."""
    found = _URL.match(url)
    if found is None:
        raise ConfigurationError(
            f"cannot read the database URL {redact(url)!r}: give a file path, a sqlite:/// URL "
            "or a postgresql:// URL"
        )
    database = found["database"]
    return ParsedURL(found["name"].split("+")[0], None if database is None else unquote(database))


def normalize_url(url: str | os.PathLike[str]) -> str:
    """A SQLAlchemy URL from a file path, a ``sqlite:///`` URL or a ``postgresql://`` URL."""
    text = os.fspath(url)
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser()}"
    if text.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text.split("://", 1)[1]
    if text.startswith(("sqlite://", "postgresql+")):
        return text
    raise ConfigurationError(
        f"unsupported database URL {redact(text)!r}: give a file path, a sqlite:/// URL or "
        "a postgresql:// URL"
    )


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL; ``None`` for another database or SQLite in memory."""
    parsed = parse_url(url)
    if parsed.backend != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def redact(url: str) -> str:
    """``url`` with its password, if any, written ``***``."""
    found = _URL.match(url)
    if found is None:
        return url.split("@")[-1]
    if found["password"] is None:
        return url
    start, end = found.span("password")
    return url[:start] + "***" + url[end:]

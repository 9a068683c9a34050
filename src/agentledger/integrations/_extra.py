"""Each integration's libraries come with an extra of its own: importing the integration without
them raises :class:`ConfigurationError` naming the extra, not a bare ``ImportError``."""

from __future__ import annotations

import importlib

from ..errors import ConfigurationError


def require(modules: tuple[str, ...], *, library: str, what: str, extra: str) -> None:
    """Import ``modules``; when one is missing, raise :class:`ConfigurationError` saying that
    ``library`` is not installed, that ``what`` comes with ``extra``, and how to install it."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError:
        raise ConfigurationError(
            f"{library} is not installed: {what} comes with the {extra} extra. Install it: "
            f"pip install 'agentledger[{extra}]'"
        ) from None

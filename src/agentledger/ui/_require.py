"""The viewer's libraries come with the ``ui`` extra: importing the viewer without them raises
:class:`ConfigurationError` naming the extra, not a bare ``ImportError``."""

from __future__ import annotations

import importlib.util

from ..errors import ConfigurationError

NEEDED = ("starlette", "jinja2", "uvicorn")
"""The web framework, the templates (escaped by default) and the server."""


def require_viewer_libraries() -> None:
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: the "
            "viewer (`agentledger ui`) comes with the ui extra. Install it: pip install "
            "'agentledger[ui]'"
        )


require_viewer_libraries()

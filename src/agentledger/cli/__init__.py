"""The ``agentledger`` command: a thin shell over the library's functions.

``cli`` is the click group; ``main`` is the console script. The commands live by concept:
reading a ledger (``_browse``), migrations and verification (``_db``), forgetting
(``_forget``), graph checkpoints' retention (``_prune``), importing other programs' files
(``_import``), talking to a model (``_talk``), analytics and exports (``_analytics``), traces
out (``_otlp``), Datasette's metadata (``_datasette``), the MCP server (``_mcp``), the viewer
(``_ui``); the offline demo is :mod:`.demo`.
"""

# They register their commands.
from . import (  # noqa: F401
    _analytics,
    _browse,
    _datasette,
    _db,
    _forget,
    _import,
    _mcp,
    _otlp,
    _prune,
    _talk,
    _ui,
)
from ._app import cli, main

__all__ = ["cli", "main"]

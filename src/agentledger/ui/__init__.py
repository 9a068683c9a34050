"""``agentledger ui``: a local, read-only web viewer of a ledger (the ``ui`` extra,
``pip install 'agentledger[ui]'``).

The conversations (``/``: searched, filtered, paged), each conversation as its user saw it
with the run that produced each answer folded beside it (``/c/{id}``), and each run with its
trace and its run tree (``/r/{id}``). Pages are written on the server from the ledger's public
reads and escape every value; the viewer's own stylesheet and script are all a page loads.
It serves GET and HEAD only, on 127.0.0.1 unless a token guards it.
"""

# First: a missing extra is a clear error naming it, before anything imports Starlette.
from . import _require  # noqa: F401  (isort: keep first)
from ._app import create_app
from ._serve import serve

__all__ = ["create_app", "serve"]

"""Analytics over a ledger in DuckDB: the run tree rolled up, tools, models, agents, time,
and the model's context (its compactions, and its size over a conversation's life).

The ledger is attached read-only; the views are SQL files shipped in ``sql/`` that run in the
``duckdb`` command line as well (``agentledger analytics sql`` prints them, ready to use). With
``Analytics.open(url, cache="ledger.duckdb")`` the same views read a copy of the ledger's tables
kept in a DuckDB file, synced incrementally (:class:`SyncResult` says what a sync did): many
times faster on a large ledger.
:func:`build_report` gathers the main breakdowns into a :class:`Report`, which
:func:`render_terminal` draws as tables and :func:`render_html` as one self-contained page
(``agentledger analytics report [--html FILE]``); :func:`figures` gives its charts as SVG, to
show in a notebook.

DuckDB comes with the ``analytics`` extra (``pip install 'agentledger[analytics]'``): this
package imports without it, and :meth:`Analytics.open` and everything that runs a query say
what to install when it is missing.
"""

from ._analytics import Analytics, export_parquet, script
from ._cache import SyncResult
from ._duckdb import require_duckdb
from ._figures import Figure, figures
from ._html import render_html, write_html
from ._report import Report, build_report
from ._terminal import render_export, render_terminal, summarize_export

__all__ = [
    "Analytics",
    "Figure",
    "Report",
    "SyncResult",
    "build_report",
    "export_parquet",
    "figures",
    "render_export",
    "render_html",
    "render_terminal",
    "require_duckdb",
    "script",
    "summarize_export",
    "write_html",
]

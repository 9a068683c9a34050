"""Analytics over a ledger in DuckDB: the run tree rolled up, tools, models, agents, time.

The ledger is attached read-only; the views are SQL files shipped in ``sql/`` that run in the
``duckdb`` command line as well (``agentledger analytics sql`` prints them, ready to use).
"""

from ._analytics import Analytics, attach_statement, export_parquet, script, view_files

__all__ = ["Analytics", "attach_statement", "export_parquet", "script", "view_files"]

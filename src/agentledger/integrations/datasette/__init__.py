"""Datasette metadata for a ledger: ``agentledger datasette-metadata > metadata.json``, then
``datasette ledger.db -m metadata.json`` serves it, every table and column described and the
questions people ask of a ledger ready as canned queries.

The descriptions are ``schema/README.md``'s (:func:`agentledger.ledger.schema.documentation`),
never written twice. The queries are the SQL files beside this module (each runs in the
``sqlite3`` shell too); their parameters are named (``:run_id``), so a value is always data,
and an id may be the short id the command line prints. Served, their SQL is hidden until asked
for, and each id leads to the trace and tree queries: the metadata adds a column of absolute
URLs, which Datasette shows as links, built from the request's Host header (Datasette's magic
parameters). The ledger's bookkeeping tables are hidden.
The metadata is Datasette 0.65's (``-m``): the 1.0 alphas read canned queries from ``-c``.

Building the metadata needs no Datasette: it is plain JSON. Serving it does
(``pip install 'agentledger[datasette]'``).
"""

from ._metadata import CANNED_QUERIES, CannedQuery, canned_queries, datasette_metadata

__all__ = ["CANNED_QUERIES", "CannedQuery", "canned_queries", "datasette_metadata"]

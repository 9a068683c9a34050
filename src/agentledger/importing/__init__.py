"""``agentledger import``: the history people already have, brought into a ledger.

``import_history(ledger, "sessions.db")`` reads another program's SQLite file with
sqlite-utils (the ``import`` extra) and records each of its turns through ``ledger.turn``, at
the time the file says it happened: an OpenAI Agents SDK ``SQLiteSession`` file (``agents-sdk``),
an ``llm`` logs database (``llm``) or a LangGraph ``SqliteSaver`` file (``langgraph``, read with
the LangGraph integration, the ``langgraph`` extra). :data:`SOURCES` lists the kinds of file it
reads.
"""

from ._importer import (
    IMPORTED_FROM,
    SOURCE_ID,
    SOURCES,
    ImportSummary,
    import_history,
    recognise,
)
from ._sources import Source

__all__ = [
    "IMPORTED_FROM",
    "SOURCES",
    "SOURCE_ID",
    "ImportSummary",
    "Source",
    "import_history",
    "recognise",
]

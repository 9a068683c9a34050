"""The ledger's schema migrations: Alembic's environment (``env.py``) and the revisions
(``versions/``), shipped in the package and run by :mod:`agentledger.ledger.migrate`.

A revision describes the schema as it was at that revision, forever: it imports nothing of
the package outside this one (an import-linter contract in ``pyproject.toml`` holds it), and
copies the column shapes and the functions it needs. What revisions share lives here, frozen:
the refusal they raise (:mod:`._refusal`) and the row checksum as revision 0003 defined it
(:mod:`._checksums_0003`). ``docs/migrations.md`` says how to write a new revision.
"""

"""What a revision raises when it refuses to run.

A revision imports nothing of the package outside ``agentledger.migrations``, so it cannot raise
:class:`agentledger.errors.MigrationError` itself: it raises :class:`MigrationRefused`, and the
migration environment (``env.py``) raises that again as ``MigrationError``, the error callers
catch.
"""

from __future__ import annotations

__all__ = ["MigrationRefused"]


class MigrationRefused(Exception):
    """A revision refused to run, because it would lose data or seal a damaged row; its message
    says what and what to do. The migration's transaction is rolled back: nothing changed."""

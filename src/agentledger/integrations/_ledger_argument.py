"""Each framework's store is given the ledger it keeps its conversations in: anything else is
refused at once, where the mistake was made, rather than at the first write."""

from __future__ import annotations

from ..errors import UsageError
from ..ledger import Ledger


def a_ledger(value: object, store: str) -> Ledger:
    """``value``, the :class:`Ledger` the ``store`` was given; :class:`UsageError` saying what
    to pass when it is something else."""
    if not isinstance(value, Ledger):
        raise UsageError(
            f"{store} takes a Ledger (agentledger.ledger.Ledger.open(url)), not "
            f"{type(value).__name__}"
        )
    return value

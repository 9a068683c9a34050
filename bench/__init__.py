"""agentledger's benchmarks: ``make bench`` (``python -m bench``)."""

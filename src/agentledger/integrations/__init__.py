"""What agentledger gives the tools around it, each integration in a package of its own,
loaded only when used (``import agentledger`` loads none of them):
:mod:`agentledger.integrations.datasette`."""

__all__: list[str] = []

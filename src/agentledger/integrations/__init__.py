"""Integrations of agentledger with other tools, each in its own module and extra."""

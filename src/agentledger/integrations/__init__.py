"""Integrations of agentledger with other tools, each in its own subpackage and each behind
its own extra; ``import agentledger`` loads none of them."""

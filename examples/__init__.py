"""Examples of agentledger in use; not part of the installed package."""

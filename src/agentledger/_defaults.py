"""Defaults that the agent's builder and the command line share, in a module that imports
nothing: the command line reads them to describe its options before it loads the agent."""

DEFAULT_MAX_STEPS = 20
"""The most steps a run takes unless told otherwise (``AgentBuilder.with_max_steps``)."""

"""A chat app over an agent, streamed as server-sent events: see ``app.py``."""

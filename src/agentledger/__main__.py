"""``python -m agentledger``: the command line."""

from .cli import main

main()

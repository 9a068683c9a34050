"""The library's loggers, under ``agentledger``, for the application to show as it likes. With
no logging configured, nothing reaches standard error through Python's last-resort handler: the
error raised in the end says what went wrong, once. Here, not in the package's ``__init__``, so
that only what logs loads :mod:`logging` (the command line's read commands do not)."""

import logging

logging.getLogger("agentledger").addHandler(logging.NullHandler())


def library_logger(name: str) -> logging.Logger:
    """The logger ``name`` (under ``agentledger``), once the library's own handler is set."""
    return logging.getLogger(name)

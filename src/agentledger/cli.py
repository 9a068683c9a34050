"""The ``agentledger`` command: a thin shell over the library's functions."""

from __future__ import annotations

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agentledger")
def cli() -> None:
    """agentledger: an LLM agent loop whose memory is a relational ledger."""


@cli.command()
def demo() -> None:
    """Run the offline demo: a scripted travel assistant over two turns."""
    from .demo import run_demo

    run_demo()


def main() -> None:
    cli()

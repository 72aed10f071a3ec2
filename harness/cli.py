"""The `onceproof` command: one subcommand per stage of plan -> run -> history -> check.

Every subcommand turns the harness's own failures (SetupError) into one line on stderr and
exit code 2, so "Kafka is broken" (exit 1) is never confused with "the harness is broken".
"""
from __future__ import annotations

import sys

import click

from .errors import SetupError


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SetupError as exc:
            click.echo(f"onceproof: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
def main() -> None:
    """Evidence, not marketing, for Kafka's exactly-once claims."""

"""`sidequest demo`: a worker and example jobs, to watch it work (the worker and the jobs are in
`demo.run`, imported only when the command runs: listing the commands registers no demo job)."""

from __future__ import annotations

import logging
import sys

import click

from sidequest.cli.logs import configure_logging
from sidequest.cli.root import UserError, main
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError


@main.command()
@click.option("--jobs", default=6, show_default=True, type=click.IntRange(min=1),
              help="How many immediate demo jobs to enqueue.")
def demo(jobs: int) -> None:
    """Start a worker on the embedded (or REDIS_URL) Redis and watch example jobs run."""
    from sidequest.cli.demo.run import run_demo

    configure_logging(False, None)
    logging.getLogger().setLevel(logging.ERROR)
    try:
        sys.exit(run_demo(Config.from_env(), jobs))
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    except RedisUnavailableError as exc:
        raise click.ClickException(str(exc)) from None

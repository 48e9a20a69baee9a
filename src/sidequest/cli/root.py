"""The `sidequest` command group and the two kinds of error every subcommand may end with."""

from __future__ import annotations

import click

from .. import __version__


class UserError(click.ClickException):
    """A mistake the user can fix (a setting, a flag, a path): one line, exit status 2."""

    exit_code = 2


class Unreachable(click.ClickException):
    """Redis did not answer (or stopped answering): one line, exit status 1."""

    exit_code = 1


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sidequest")
def main() -> None:
    """sidequest: background jobs for Python on Redis, in Sidekiq's wire format.

    Set REDIS_URL to use your Redis (redis://, rediss:// for TLS). Without it, `worker`,
    `web` and `demo` start an embedded redis-server in ./.sidequest/redis; the admin
    commands (stats, queues, retries, scheduled, dead, processes, enqueue, tasks, top)
    use the Redis on localhost:6379 and never start one.
    """

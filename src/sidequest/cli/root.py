"""The `sidequest` command group and the two kinds of error every subcommand may end with.

The group imports the module that defines a subcommand only when that subcommand is asked for
(`LazyGroup`): `sidequest worker` never loads the admin commands, the dashboard's or `top`'s.
For `worker`, it also caps glibc's malloc arenas (`limit_malloc_arenas`) before any thread starts.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from sidequest import __version__

# subcommand -> the module of this package that defines it (registers it on `main` when imported)
COMMANDS = {
    "stats": "admin.queues", "queues": "admin.queues", "enqueue": "admin.queues", "tasks": "admin.queues",
    "retries": "admin.sets", "scheduled": "admin.sets", "dead": "admin.sets",
    "processes": "admin.processes", "top": "admin.top", "health": "admin.health", "workflows": "admin.workflows",
    "periodic": "admin.periodic", "groups": "admin.groups", "steps": "admin.steps",
    "search": "admin.search", "mcp": "assistant", "web": "web", "demo": "demo",
    "worker": "worker",
}
M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)
WORKER_ARENAS = 2


class UserError(click.ClickException):
    """A mistake the user can fix (a setting, a flag, a path): one line, exit status 2."""

    exit_code = 2


class Unreachable(click.ClickException):
    """Redis did not answer (or stopped answering): one line, exit status 1."""

    exit_code = 1


class LazyGroup(click.Group):
    """A group whose subcommands' modules (`COMMANDS`) are imported when a subcommand is looked up:
    the one asked for, or all of them to list them (help, completion) or to suggest a name close
    to an unknown one, so what the group shows is the same as with every module imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load(*COMMANDS.values())
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            self.load(COMMANDS[cmd_name])
        elif cmd_name not in self.commands:
            self.load(*COMMANDS.values())
        return super().get_command(ctx, cmd_name)

    @staticmethod
    def load(*modules: str) -> None:
        for module in dict.fromkeys(modules):
            importlib.import_module(f"{__package__}.{module}")


def limit_malloc_arenas(arenas: int = WORKER_ARENAS) -> None:
    """Cap glibc's malloc arenas for this process and the threads it starts afterwards.

    glibc gives a thread that finds the arenas in use one of its own, up to 8 per CPU: a worker's
    dozen threads (processors, fetch, heartbeat, poller...) take ten or more, each holding freed
    memory of its own: 0.3 MB of an idle worker's RSS, 0.5 MB under load. The threads allocate
    while holding the GIL, so they hardly ever contend for an arena. A MALLOC_ARENA_MAX in the environment is the user's
    choice and is left alone; so is any C library but glibc."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas)
    except (OSError, ValueError, AttributeError):  # no confstr name, no libc, no mallopt
        pass


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sidequest")
@click.pass_context
def main(ctx: click.Context) -> None:
    """sidequest: background jobs for Python on Redis, in Sidekiq's wire format.

    Set REDIS_URL to use your Redis (redis://, rediss:// for TLS). Without it, `worker`
    and `demo` start an embedded redis-server in ./.sidequest/redis; `web` and the admin
    commands (stats, queues, groups, retries, scheduled, dead, search, processes, enqueue, tasks, top, mcp)
    use the Redis on localhost:6379 and never start one.
    """
    if ctx.invoked_subcommand == "worker":
        limit_malloc_arenas()

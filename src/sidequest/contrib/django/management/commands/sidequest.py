"""`manage.py sidequest worker|web|stats|queues|...`: the `sidequest` command, with Django set up.

Every argument goes to the click CLI unchanged (`manage.py sidequest worker -q mail -c 5`,
`manage.py sidequest --help`). Around it:

- the `SIDEQUEST` setting reaches the CLI as the `SIDEQUEST_*` variables it reads (see `conf`),
  so flags and a `-C` file still beat it;
- `worker` first imports `sidequest.contrib.django.boot`, which sets Django up in each process a
  `--processes` supervisor starts (fresh interpreters), whose `ready()` imports the apps' `jobs`
  modules and adds the per-job database handling (see `worker`);
- every database connection is closed before the CLI starts, so no process it starts, and no
  long-lived supervisor or web server, holds one it inherited from the set-up.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from sidequest.contrib.django.apps import SidequestConfig
from sidequest.contrib.django.conf import cli_environment

BOOT = "sidequest.contrib.django.boot"


class Command(BaseCommand):
    help = "Run the sidequest command (worker, web, stats, queues, ...) with this project's settings."
    requires_system_checks = ()  # the CLI is not a Django command; `manage.py check` runs them

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cli_args", nargs=argparse.REMAINDER, help="the sidequest command and its arguments")

    def run_from_argv(self, argv: list[str]) -> None:
        """`manage.py sidequest ...`: hand everything after `sidequest` to click, Django's own
        option parsing bypassed (its -v and -h mean other things to sidequest)."""
        run_cli(f"{Path(argv[0]).name} {argv[1]}", argv[2:])

    def handle(self, *args: Any, **options: Any) -> None:
        """`call_command("sidequest", "stats", "--json")`: click's exit becomes a return, or a
        CommandError with its status."""
        try:
            run_cli("manage.py sidequest", [*args, *options.get("cli_args", [])])
        except SystemExit as exit:
            if exit.code not in (0, None):
                raise CommandError(f"sidequest exited with status {exit.code}",
                                   returncode=exit.code if isinstance(exit.code, int) else 1) from None


def run_cli(prog: str, args: list[str]) -> None:
    """Run the click CLI as `prog args...` in this process; click exits with its status."""
    from sidequest.cli import main

    if args[:1] == ["worker"]:
        args = ["worker", "-r", BOOT, *args[1:]]
    connections.close_all()
    with cli_process(prog, args):
        main(args=args, prog_name=prog)


@contextmanager
def cli_process(prog: str, args: list[str]) -> Iterator[None]:
    """This process as the CLI would see it if started as `sidequest args...`: `sys.argv` (which a
    supervisor repeats to its children) and the environment (which they inherit), put back after."""
    app = cast(SidequestConfig, apps.get_app_config(SidequestConfig.label))
    env = cli_environment(app.given, app.config)
    project = sys.path[0] if sys.path and sys.path[0] else os.getcwd()  # manage.py's folder, for the children
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")]))
    saved_env = {name: os.environ.get(name) for name in env}
    saved_argv = sys.argv
    _set(env)
    sys.argv = [prog, *args]
    try:
        yield
    finally:
        sys.argv = saved_argv
        _set(saved_env)


def _set(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

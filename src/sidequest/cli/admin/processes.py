"""`sidequest processes`: the worker processes and what they run; quiet or stop one, or all.

Quiet and stop go through the process's signal list in Redis (the admin API's `Process.quiet`
and `stop`), so they reach a process on any host, Ruby Sidekiq's included; it acts at its next
heartbeat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main

if TYPE_CHECKING:
    from sidequest.api import Process
    from sidequest.client.sync_client import Client

ACTIONS = ("list", "quiet", "stop")


@main.command(cls=AdminCommand)
@click.argument("action", required=False, default="list", metavar="[list|quiet ID|stop ID]")
@click.argument("identity", required=False, metavar="[ID]")
@click.option("--all", "every", is_flag=True, help="Quiet or stop every process.")
@json_option
@redis_url_option
@redis_errors
def processes(action: str, identity: str | None, every: bool, as_json: bool, redis_url: str | None) -> None:
    """List worker processes and their running jobs; quiet or stop one (by identity, or a
    unique start of it) or all.

    \b
    Examples:
      sidequest processes
      sidequest processes quiet web-1:4242       # before a deploy: finish jobs, take no new ones
      sidequest processes stop --all
    """
    from sidequest.api import ProcessSet
    from sidequest.cli.admin import render

    if action not in ACTIONS:
        raise UserError(f"unknown processes action {action!r}: use list, quiet ID or stop ID")
    if action == "list" and (identity or every):
        raise UserError("`processes list` takes no ID; to quiet or stop one: sidequest processes quiet ID")
    if action != "list" and not identity and not every:
        raise UserError(f"`processes {action}` needs a process ID or --all (`sidequest processes` lists them)")
    if identity and every:
        raise UserError(f"give either an ID or --all to `processes {action}`, not both")
    client = admin_client(redis_url)
    found = list(ProcessSet(client))
    if action == "list":
        list_processes(client, found, as_json)
        return
    chosen = found if every else [pick(found, identity or "")]
    for process in chosen:
        try:
            process.quiet() if action == "quiet" else process.stop()
        except RuntimeError as exc:  # embedded in an application: controlled there
            raise UserError(str(exc)) from None
    if as_json:
        render.emit_json({"action": action, "processes": [p.identity for p in chosen]})
        return
    what = "finish running jobs and take no new ones" if action == "quiet" else "shut down"
    for process in chosen:
        click.echo(f"asked {process.identity} to {what}; it acts at its next heartbeat")
    if not chosen:
        click.echo("no worker processes")


def list_processes(client: Client, found: list[Process], as_json: bool) -> None:
    from sidequest.api import Workers
    from sidequest.cli.admin import render, views

    works = list(Workers(client))
    if as_json:
        render.emit_json({"processes": [p.as_dict() for p in found], "running": [views.work_dict(w) for w in works]})
        return
    out = render.console()
    if not found:
        out.print("no worker processes")
        return
    now = client.clock()
    out.print(views.processes(found, now, title=None))
    for process in found:
        if len(process.capsules) > 1:  # only the default capsule: its queues are in the table
            out.print(f"{process.identity} capsules: {describe_capsules(process)}")
    if works:
        out.print()
        out.print(views.running(works, now))


def describe_capsules(process: Process) -> str:
    """`default 10 threads (strict: a, b); serial 1 thread (strict: ledger)`."""
    return "; ".join(f"{name} {c['concurrency']} thread{'s' if c['concurrency'] != 1 else ''} "
                     f"({c['mode']}: {', '.join(c['weights'])})" for name, c in process.capsules.items())


def pick(found: list[Process], identity: str) -> Process:
    """The process of this identity, or the only one whose identity starts with it."""
    exact = [p for p in found if p.identity == identity]
    matches = exact or [p for p in found if p.identity.startswith(identity)]
    if not matches:
        raise UserError(f"no process {identity!r} (`sidequest processes` lists them)")
    if len(matches) > 1:
        raise UserError(f"{identity!r} matches {len(matches)} processes ({', '.join(p.identity for p in matches[:3])}"
                        f"{'...' if len(matches) > 3 else ''}); give more of the identity")
    return matches[0]

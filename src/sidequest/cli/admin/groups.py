"""`sidequest groups QUEUE`: a queue's fairness groups (the largest first: waiting, running,
limits, paused) and its laned jobs waiting per priority level; `--pause G` / `--resume G`;
`--reset G` gives back the group's slots; `--set G --weight N [--concurrency N] [--rate N/S]`
overrides its limits over its jobs' options, `--clear G` removes the overrides.

It acts only through the admin API (`sidequest.api.groups`); a table for people, one JSON
document with `--json`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main

if TYPE_CHECKING:
    from rich.table import Table

    from sidequest.api import GroupInfo
    from sidequest.client.sync_client import Client


@main.command(cls=AdminCommand)
@click.argument("queue")
@click.option("--pause", "to_pause", metavar="GROUP", help="Pause this group: no job of it is staged until resumed.")
@click.option("--resume", "to_resume", metavar="GROUP", help="Resume this group: it takes turns again at once.")
@click.option("--reset", "to_reset", metavar="GROUP",
              help="Give back this group's slots (and end its rate window): its jobs still running go on.")
@click.option("--set", "to_set", metavar="GROUP", help="Override this group's limits (with --weight, --concurrency, "
              "--rate) over its jobs' options, until --clear.")
@click.option("--weight", type=click.IntRange(1, 1000), help="With --set: the group's share of the turns.")
@click.option("--concurrency", type=click.IntRange(min=0), help="With --set: at most this many at once (0: no cap).")
@click.option("--rate", metavar="COUNT/SECONDS", help="With --set: at most COUNT staged per SECONDS (0: no rate).")
@click.option("--clear", "to_clear", metavar="GROUP", help="Remove this group's overrides: its jobs' options apply.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Groups to list.")
@json_option
@redis_url_option
@redis_errors
def groups(queue: str, to_pause: str | None, to_resume: str | None, to_reset: str | None, to_set: str | None,
           weight: int | None, concurrency: int | None, rate: str | None, to_clear: str | None, limit: int,
           as_json: bool, redis_url: str | None) -> None:
    """List a queue's groups, the largest (waiting + running) first, and its jobs waiting per
    priority level; pause or resume one group.

    \b
    Examples:
      sidequest groups mail                     # GROUP WAITING RUNNING CONCURRENCY RATE PAUSED
      sidequest groups mail --pause tenant-42   # its waiting jobs stay waiting
      sidequest groups mail --resume tenant-42
      sidequest groups mail --reset tenant-42   # its slots back at once
      sidequest groups mail --set tenant-42 --weight 4 --rate 100/60
      sidequest groups mail --clear tenant-42   # its jobs' limits again
    """
    given = [g for g in (to_pause, to_resume, to_reset, to_set, to_clear) if g is not None]
    if len(given) > 1:
        raise UserError("give one of --pause, --resume, --reset, --set and --clear, not several")
    if (weight, concurrency, rate) != (None, None, None) and to_set is None:
        raise UserError("--weight, --concurrency and --rate go with --set GROUP")
    if given and given[0] == "":
        raise UserError("GROUP must not be empty (`sidequest groups QUEUE` lists the groups)")
    client = admin_client(redis_url)
    if not given:
        list_groups(client, queue, limit, as_json)
    elif to_reset is not None:
        reset(client, queue, to_reset, as_json)
    elif to_set is not None or to_clear is not None:
        override(client, queue, to_set, to_clear, (weight, concurrency, parse_rate(rate)), as_json)
    else:
        change_group(client, queue, given[0], pause=to_pause is not None, as_json=as_json)


def list_groups(client: Client, queue: str, limit: int, as_json: bool) -> None:
    from sidequest.api import Queue, lanes
    from sidequest.api import groups as groups_of
    from sidequest.cli.admin import render

    found, levels = groups_of(queue, limit, client), lanes(queue, client)
    if not found and not levels and queue not in {q.name for q in Queue.all(client)}:
        raise UserError(f"no queue named {queue!r} (`sidequest queues` lists them)")
    if as_json:
        render.emit_json({"queue": queue, "levels": levels, "groups": [g.as_dict() for g in found]})
        return
    if not found and not levels:
        click.echo(f"queue {queue} has no groups and no laned jobs waiting")
        return
    waiting = ", ".join(f"{level}: {n:,}" for level, n in levels.items()) or "none"
    out = render.console()
    out.print(f"queue {queue}: {render.plural(len(found), 'group')}; waiting by priority: {waiting}")
    if found:
        out.print(table(found))


def table(found: list[GroupInfo]) -> Table:
    from rich.text import Text

    from sidequest.cli.admin import render

    grid = render.table("GROUP", "WAITING", "RUNNING", "CONCURRENCY", "RATE", "WEIGHT", "PAUSED",
                        right=("WAITING", "RUNNING", "CONCURRENCY", "WEIGHT"))
    for g in found:
        rate = f"{g.rate[0]:,} per {g.rate[1]:g} s" if g.rate else None
        set_here = "*" if g.overridden else ""  # an operator's override: `--clear` removes it
        render.row(grid, g.name + set_here, f"{g.waiting:,}", f"{g.running:,}", g.concurrency, rate, g.weight,
                   Text("paused", style="yellow") if g.paused else Text(""))
    return grid


def change_group(client: Client, queue: str, group: str, *, pause: bool, as_json: bool) -> None:
    from sidequest.api import groups as groups_of
    from sidequest.api import pause_group, resume_group
    from sidequest.cli.admin import render

    was_paused = {g.name for g in groups_of(queue, 10**9, client) if g.paused}
    if not pause and group not in was_paused:  # a typo would otherwise look like a resume
        known = ", ".join(sorted(was_paused)[:5]) or "none"
        raise UserError(f"group {group!r} of queue {queue} is not paused (paused there: {known})")
    if pause:
        pause_group(queue, group, client)
        message = f"paused group {group} of queue {queue}: none of its jobs are staged until it is resumed"
    else:
        resume_group(queue, group, client)
        message = f"resumed group {group} of queue {queue}"
    if as_json:
        render.emit_json({"queue": queue, "group": group, "paused": pause})
        return
    click.echo(message)
    if pause and group not in {g.name for g in groups_of(queue, 10**9, client) if g.waiting or g.running}:
        click.echo(f"note: group {group!r} has no jobs in queue {queue} now; it is paused all the same", err=True)


def reset(client: Client, queue: str, group: str, as_json: bool) -> None:
    from sidequest.api import reset_group
    from sidequest.cli.admin import render

    held = reset_group(queue, group, client)
    if as_json:
        render.emit_json({"queue": queue, "group": group, "slots_given_back": held})
        return
    click.echo(f"reset group {group} of queue {queue}: gave back {render.plural(held, 'slot')}"
               + ("; its jobs still running go on" if held else ""))


def parse_rate(given: str | None) -> tuple[int, float] | int | None:
    """`--rate COUNT/SECONDS` (or 0: no rate) as `set_group_limits` takes it (`api.groups.parse_rate`)."""
    from sidequest.api.groups import parse_rate as rate_of

    try:
        return None if given is None else rate_of(given)
    except ValueError as error:
        raise UserError(f"--{error}") from None


def override(client: Client, queue: str, to_set: str | None, to_clear: str | None,
             limits: tuple[int | None, int | None, tuple[int, float] | int | None], as_json: bool) -> None:
    from sidequest.api import clear_group_limits, set_group_limits
    from sidequest.cli.admin import render

    try:
        if to_set is not None:
            weight, concurrency, rate = limits
            info = set_group_limits(queue, to_set, weight=weight, concurrency=concurrency, rate=rate, client=client)
        else:
            info = clear_group_limits(queue, to_clear or "", client=client)
    except ValueError as error:
        raise UserError(str(error)) from None
    if as_json:
        render.emit_json({"queue": queue, "group": info.name, "concurrency": info.concurrency, "rate": info.rate,
                          "weight": info.weight, "overridden": list(info.overridden)})
        return
    rate_text = f"{info.rate[0]:,} per {info.rate[1]:g} s" if info.rate else "none"
    click.echo(f"group {info.name} of queue {queue}: weight {info.weight}, concurrency {info.concurrency or 'none'}, "
               f"rate {rate_text}; set by an operator: {', '.join(info.overridden) or 'nothing'}")

"""`sidequest steps JID`: a job's durable steps; `--reset [NAME]`: forget one step, or every step."""

from __future__ import annotations

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main

ALL = "\0all"  # what a bare `--reset` stands for: no step's name can be it


@main.command(cls=AdminCommand)
@click.argument("jid")
@click.option("--reset", "reset", metavar="[NAME]", is_flag=False, flag_value=ALL, default=None,
              help="Forget step NAME (every step without a name): the job's next run runs it again.")
@json_option
@redis_url_option
@redis_errors
def steps(jid: str, reset: str | None, as_json: bool, redis_url: str | None) -> None:
    """Show a job's durable steps (sidequest.step): each one's state, attempts, duration and
    result; or forget them with --reset.

    \b
    Examples:
      sidequest steps 5f2c0a9e4b1d...
      sidequest steps 5f2c0a9e4b1d... --reset charge    # the next run charges again
      sidequest steps 5f2c0a9e4b1d... --reset           # every step
    """
    from sidequest.api.steps import job_steps, reset_steps
    from sidequest.cli.admin import render

    client = admin_client(redis_url)
    if reset is not None:
        name = None if reset == ALL else reset
        forgotten = reset_steps(jid, name, client)
        if not forgotten:
            raise UserError(f"job {jid} has no recorded step{'' if name is None else f' {name!r}'} "
                            "(see `sidequest steps JID`)")
        render.console().print(f"forgot {render.plural(forgotten, 'step')} of job {jid}")
        return
    found = job_steps(jid, client)
    if found is None:
        raise UserError(f"job {jid} has no recorded steps (it used none, or it has ended, which removes them)")
    if as_json:
        render.emit_json(found.as_dict())
        return
    out = render.console()
    facts = [("job", jid), ("class", found.klass), ("queue", found.queue),
             ("first step", render.stamp(found.created_at))]
    wait = found.waiting
    if wait is not None:  # parked by a durable sleep or wait: no worker holds it
        what = f"event {wait.event!r}" if wait.event else f"sleep {wait.name!r}"
        facts.append(("waiting", f"for {what} until {render.stamp(wait.until)}"))
    out.print(render.facts(facts))
    grid = render.table("#", "STEP", "STATE", "ATTEMPTS", "DURATION", "RESULT / ERROR", right=("#", "ATTEMPTS"))
    for index, record in enumerate(found.steps, 1):
        took = "-" if record.duration is None else f"{record.duration:.3f} s"
        render.row(grid, index, record.name, record.state, record.attempts, took,
                   record.error if record.state == "failed" else record.preview(80))
    out.print(grid)

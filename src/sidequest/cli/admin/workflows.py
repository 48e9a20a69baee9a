"""`sidequest workflows [list]`: the recent workflows; `show ID`: one's state and steps, and what each waits for."""

from __future__ import annotations

from typing import Any

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main


@main.command(cls=AdminCommand)
@click.argument("action", metavar="[list | show ID]", required=False)
@click.argument("workflow_id", metavar="", required=False)
@click.option("--limit", default=25, show_default=True, type=click.IntRange(min=1), help="Workflows to list.")
@json_option
@redis_url_option
@redis_errors
def workflows(action: str | None, workflow_id: str | None, limit: int, as_json: bool, redis_url: str | None) -> None:
    """List the recent workflows, or show one: its state, and each step's job, status,
    dependencies and result.

    \b
    Examples:
      sidequest workflows list                     # the newest 25: id, name, state, steps by status
      sidequest workflows show 5f2c0a9e...
      sidequest workflows show 5f2c0a9e... --json
    """
    from sidequest.api.workflows import recent_workflows, workflow_detail
    from sidequest.cli.admin import render

    if action in (None, "list"):
        if workflow_id:
            raise UserError("`workflows list` takes no ID: use `sidequest workflows show ID`")
        total, found = recent_workflows(0, limit, admin_client(redis_url))
        if as_json:
            render.emit_json({"total": total, "workflows": found})
        else:
            print_workflows(total, found)
        return
    if action != "show":
        raise UserError(f"unknown workflows action {action!r}: use `sidequest workflows list` or `show ID`")
    if not workflow_id:
        raise UserError("`workflows show` needs a workflow ID")
    detail = workflow_detail(workflow_id, admin_client(redis_url))
    if detail is None:
        raise UserError(f"no workflow {workflow_id!r} (it never existed, or expired)")
    if as_json:
        render.emit_json(detail)
        return
    print_workflow(detail)


def print_workflows(total: int, found: list[dict[str, Any]]) -> None:
    """One row a workflow, newest first: the index keeps the recent ones (see `Workflow.recent`)."""
    from sidequest.cli.admin import render

    out = render.console()
    grid = render.table("ID", "NAME", "STATE", "STEPS", "BY STATUS", "CREATED",
                        title=f"{render.plural(total, 'recent workflow')}, newest first")
    for flow in found:
        if flow.get("expired"):
            render.row(grid, flow["id"], "-", "expired", None, None, None)
            continue
        counts = ", ".join(f"{n} {s}" for s, n in flow["counts"].items() if n)
        render.row(grid, flow["id"], flow["name"] or "-", flow["state"], flow["total"], counts or "-",
                   render.stamp(flow["created_at"]))
    out.print(grid)


def print_workflow(detail: dict[str, Any]) -> None:
    from sidequest.cli.admin import render

    counts = ", ".join(f"{n} {s}" for s, n in detail["counts"].items() if n)
    out = render.console()
    out.print(render.facts([
        ("workflow", detail["id"]), ("name", detail["name"] or "-"),
        ("state", f"{detail['state']}{' (ended)' if detail['done'] else ''}"),
        ("steps", f"{render.plural(detail['total'], 'step')}: {counts or '-'}"),
        ("failed step", detail["failed_step"] or "-"), ("created", render.stamp(detail["created_at"])),
        ("finished", render.stamp(detail["finished_at"])),
    ]))
    out.print()
    grid = render.table("STEP", "JOB", "STATUS", "AFTER", "ON FAILURE", "RESULT OR ERROR")
    for step in detail["steps"]:
        policy = f"compensate: {step['compensation']}" if step["compensation"] else step["policy"]
        outcome = step["error"] or (render.brief(step["result"], 40) if step["result"] is not None else None)
        render.row(grid, step["name"], step["job"], step["status"], ", ".join(step["after"]) or "-", policy, outcome)
    out.print(grid)

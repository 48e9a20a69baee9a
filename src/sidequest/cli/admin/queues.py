"""Admin commands on the cluster as a whole: `stats`, `queues`, `enqueue`, `tasks show`.

They act only through the admin API (`sidequest.api`), the client's `push` and `Task`; each
prints aligned tables, or one JSON document with `--json`. Rendering is imported inside each
command, so `sidequest worker` never pays for loading the terminal library.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import Unreachable, UserError, main
from sidequest.errors import JobArgumentError, SidequestError
from sidequest.features.job_metrics import RETENTION

MAX_MINUTES = RETENTION // 60  # what Redis keeps: 72 h

if TYPE_CHECKING:
    from sidequest.api import Queue
    from sidequest.client.sync_client import Client

QUEUE_ACTIONS = ("list", "show", "pause", "unpause", "clear")


@main.command(cls=AdminCommand)
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 365),
              help="Days of processed/failed history to show.")
@click.option("--minutes", type=click.IntRange(1, MAX_MINUTES), default=None,
              help="Also show the runs, failures and mean run time of every job per minute, and the "
                   "longest a job started in it had waited in its queue, over this many minutes (the "
                   "dashboard's throughput and latency history; kept 72 h).")
@json_option
@redis_url_option
@redis_errors
def stats(days: int, minutes: int | None, as_json: bool, redis_url: str | None) -> None:
    """Totals, every queue, processed and failed per day, periodic entries, and the pushes debounce
    replaced and throttle dropped per job; on a Redis
    Cluster, each queue's primary and each primary's slots, keys and memory. With --minutes, the
    runs and failures of every job per UTC minute, and the longest wait of a job started in it
    (its queue's latency then).

    \b
    Examples:
      sidequest stats
      sidequest stats --minutes 10
      sidequest stats --json | jq .retry_size
    """
    from sidequest.api import Cluster, MetricsQuery, ProcessSet, Stats, flow_counts
    from sidequest.cli.admin import render, views
    from sidequest.features.periodic import status as periodic_status

    client = admin_client(redis_url)
    snapshot = Stats(client)
    history = snapshot.history(days)
    entries = periodic_status(client)
    flows = flow_counts(client)
    cluster = Cluster(client) if client.keys.cluster else None
    per_minute = MetricsQuery(client).per_minute(minutes) if minutes else None
    waits = {p.minute: p.queues for p in MetricsQuery(client).latency_per_minute(minutes)} if minutes else {}
    if as_json:
        render.emit_json({**snapshot.as_dict(), "history": {"processed": history.processed, "failed": history.failed},
                          "periodic": [e.as_dict() for e in entries], "flow": flows,
                          **({"cluster": [shard.as_dict() for shard in cluster.shards]} if cluster else {}),
                          **({"minutes": [{**asdict(p), "latency": waits.get(p.minute, {})} for p in per_minute]}
                             if per_minute is not None else {})})
        return
    out = render.console()
    out.print(views.totals(snapshot, ProcessSet(client, clean=False).total_concurrency))
    out.print()
    out.print(views.queues(snapshot.queue_summaries, nodes=cluster.queues if cluster else None)
              if snapshot.queue_summaries else "no queues")
    if cluster is not None:
        out.print()
        out.print(views.cluster(cluster.shards))
    out.print()
    out.print(views.history(history))
    if per_minute is not None:
        out.print()
        out.print(views.minutes(per_minute, waits))
    if entries:
        out.print()
        out.print(views.periodic(entries, client.clock()))
    if flows:
        out.print()
        out.print(views.flows(flows))


@main.command(cls=AdminCommand)
@click.argument("action", required=False, default="list", metavar="[list|show NAME|pause NAME|unpause NAME|clear NAME]")
@click.argument("name", required=False)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Jobs `show` lists.")
@json_option
@redis_url_option
@redis_errors
def queues(action: str, name: str | None, limit: int, as_json: bool, redis_url: str | None) -> None:
    """List queues, show one queue's jobs, pause, unpause or clear a queue.

    \b
    Examples:
      sidequest queues                       # every queue: size, latency, paused (node on a Cluster)
      sidequest queues show mail --limit 20  # its newest jobs
      sidequest queues pause mail            # every sidequest worker skips it within ~1 s
      sidequest queues clear mail            # delete every job in it
    """
    if action not in QUEUE_ACTIONS:
        raise UserError(f"unknown queues action {action!r}: "
                        "use list, show NAME, pause NAME, unpause NAME or clear NAME")
    if action == "list" and name:
        raise UserError(f"`queues list` takes no queue name; to see the jobs of {name!r}: sidequest queues show {name}")
    if action != "list" and not name:
        raise UserError(f"`queues {action}` needs a queue NAME (`sidequest queues` lists them)")
    client = admin_client(redis_url)
    if name is None:
        list_queues(client, as_json)
    elif action == "show":
        show_queue(client, name, limit, as_json)
    else:
        change_queue(client, name, action, as_json)


def list_queues(client: Client, as_json: bool) -> None:
    from sidequest.api import Stats
    from sidequest.cli.admin import render, views

    summaries = sorted(Stats(client).queue_summaries, key=lambda q: q.name)
    nodes = queue_nodes(client)
    if as_json:
        render.emit_json({"queues": [{"name": q.name, "size": q.size, "latency": q.latency, "paused": q.paused,
                                      **({"node": nodes.get(q.name)} if nodes is not None else {})}
                                     for q in summaries]})
    else:
        render.console().print(views.queues(summaries, title=None, nodes=nodes) if summaries else "no queues")


def queue_nodes(client: Client) -> dict[str, str] | None:
    """Cluster mode: each queue's primary (`host:port`); None on a single Redis or Sentinel."""
    if not client.keys.cluster:
        return None
    from sidequest.api import Cluster

    return Cluster(client, usage=False).queues


def known_queue(client: Client, name: str) -> Queue:
    """The queue of this name; a UserError if there is none (not in `queues`, and empty)."""
    from sidequest.api import Queue

    queue = Queue(name, client)
    if name not in {q.name for q in Queue.all(client)} and queue.size == 0:
        raise UserError(f"no queue named {name!r} (`sidequest queues` lists them)")
    return queue


def show_queue(client: Client, name: str, limit: int, as_json: bool) -> None:
    from sidequest.cli.admin import render, views

    queue = known_queue(client, name)
    found = queue.page(0, limit)
    size, latency, paused = queue.size, queue.latency, queue.paused
    if as_json:
        render.emit_json({"name": name, "size": size, "latency": latency, "paused": paused,
                          "jobs": [job.as_dict() for job in found]})
        return
    out = render.console()
    state = ", paused" if paused else ""
    out.print(f"queue {name}: {render.plural(size, 'job')}, latency {render.span(latency)}{state}")
    if found:
        out.print(views.jobs(found, None, client.clock()))
    if size > len(found):
        out.print(f"{len(found)} newest of {size:,} shown; --limit N for more")


def change_queue(client: Client, name: str, action: str, as_json: bool) -> None:
    from sidequest.api import Queue
    from sidequest.cli.admin import render

    result: dict[str, Any] = {"queue": name, "action": action}
    if action == "clear":
        result["deleted"] = deleted = known_queue(client, name).clear()
        message = f"deleted {render.plural(deleted, 'job')} from queue {name}"
    elif action == "pause":
        if name not in {q.name for q in Queue.all(client)}:
            click.echo(f"note: no queue named {name!r} exists yet; it is paused all the same", err=True)
        Queue(name, client).pause()
        result["paused"] = True
        message = f"paused queue {name}: sidequest workers skip it within about a second; its jobs wait"
    else:
        Queue(name, client).unpause()
        result["paused"] = False
        message = f"unpaused queue {name}"
    if as_json:
        render.emit_json(result)
    else:
        click.echo(message)


@main.command(cls=AdminCommand)
@click.argument("job_name", metavar="NAME")
@click.argument("args_json", metavar="[ARGS_JSON]", required=False, default="[]")
@click.option("-q", "--queue", help="Queue to push to (default: the job's own, else `default`).")
@click.option("--in", "delay", type=click.FloatRange(min=0), metavar="SECONDS",
              help="Run it this many seconds from now.")
@click.option("-r", "--require", "requires", multiple=True, metavar="MODULE",
              help="Module that defines the job: its options apply and the arguments are checked against it.")
@json_option
@redis_url_option
@redis_errors
def enqueue(job_name: str, args_json: str, queue: str | None, delay: float | None, requires: tuple[str, ...],
            as_json: bool, redis_url: str | None) -> None:
    """Push a job by its registered NAME, with its arguments as a JSON array.

    \b
    Examples:
      sidequest enqueue myapp.jobs.send_welcome '[42]'
      sidequest enqueue Resize '["a.png", 200]' -q images --in 60
      sidequest enqueue -r myapp.jobs myapp.jobs.send_welcome '[42]'   # its own queue and retry
    """
    from sidequest.cli.worker import require
    from sidequest.jobs.registry import default_registry

    try:
        args = json.loads(args_json)
    except ValueError as exc:
        raise UserError(f"ARGS_JSON is not JSON ({exc}); give the arguments as a JSON array, "
                        "e.g. '[42, \"text\"]'") from None
    if not isinstance(args, list):
        raise UserError(f"ARGS_JSON must be a JSON array of arguments, e.g. '[{args_json}]'")
    try:
        for module in requires:
            require(module)
    except (ModuleNotFoundError, SidequestError) as exc:
        raise UserError(f"cannot import required module: {exc}") from None
    job: Any = default_registry.get(job_name) if job_name in default_registry else job_name
    if requires and isinstance(job, str):
        raise UserError(f"no job named {job_name!r} is registered by {', '.join(requires)}")
    client = admin_client(redis_url)
    options: dict[str, Any] = {"queue": queue} if queue else {}
    try:
        jid = client.push(job, args, in_=delay, **options)
    except JobArgumentError as exc:
        raise UserError(str(exc)) from None
    if jid is None:
        raise Unreachable("client middleware stopped the job; nothing was pushed")
    target = queue or (job.payload_options().get("queue") if not isinstance(job, str) else None) or "default"
    if as_json:
        from sidequest.cli.admin import render

        render.emit_json({"jid": jid, "class_name": job_name, "args": args, "queue": target, "in": delay})
    else:
        when = f" to run in {delay:g} s" if delay else ""
        click.echo(f"enqueued {job_name} jid={jid} on queue {target}{when}")


@main.command(cls=AdminCommand)
@click.argument("action", metavar="show", required=False)
@click.argument("task_id", metavar="ID", required=False)
@click.option("--status", "only", metavar="STATUS", help="Only the jobs of this status (enqueued, working, "
              "finished, failed, error).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Jobs to list.")
@json_option
@redis_url_option
@redis_errors
def tasks(action: str | None, task_id: str | None, only: str | None, limit: int, as_json: bool,
          redis_url: str | None) -> None:
    """Show a task: its progress, counts per status, and its jobs' events.

    \b
    Examples:
      sidequest tasks show 5f2c0a9e...
      sidequest tasks show 5f2c0a9e... --status failed --json
    """
    from sidequest.cli.admin import render
    from sidequest.features.tasks import Task

    if action != "show":
        raise UserError(f"unknown tasks action {action!r}: use `sidequest tasks show ID`" if action
                        else "`tasks` needs an action: `sidequest tasks show ID`")
    if not task_id:
        raise UserError("`tasks show` needs a task ID")
    client = admin_client(redis_url)
    task = Task.find(task_id, client)
    if task is None:
        raise UserError(f"no task {task_id!r} (it never existed, or expired)")
    try:
        status = task.status()
        events = task.events(status=only, limit=limit)
    except (ValueError, LookupError) as exc:
        raise UserError(str(exc)) from None
    if as_json:
        render.emit_json({**status, "events": events})
        return
    print_task(status, events)


def print_task(status: dict[str, Any], events: list[dict[str, Any]]) -> None:
    from sidequest.cli.admin import render

    counts = ", ".join(f"{n} {s}" for s, n in status["counts"].items() if n)
    out = render.console()
    out.print(render.facts([
        ("task", status["id"]), ("name", status["name"]),
        ("progress", f"{status['percent']:.1f}% of {render.plural(status['total'], 'job')}"
                     f"{' (done)' if status['done'] else ''}{'' if status['sealed'] else ' (not sealed)'}"),
        ("counts", counts or "-"), ("created", render.stamp(status["created_at"])),
        ("completed", render.stamp(status["completed_at"])), ("meta", render.brief(status["meta"], 200)),
    ]))
    if events:
        out.print()
        grid = render.table("JID", "CLASS", "STATUS", "PARAMS", "LAST MESSAGE", "ERROR")
        for e in events:
            last = e["messages"][-1] if e["messages"] else None
            text = last.get("text", last) if isinstance(last, dict) else last
            error = f"{e['error_class']}: {e['error_message']}" if e["error_class"] else None
            render.row(grid, e["jid"], e["class"], e["status"], render.brief(e["params"], 40), text, error)
        out.print(grid)

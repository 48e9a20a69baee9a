"""`sidequest mcp`: a read-only Model Context Protocol server over stdio, so an AI assistant can
answer "why is the mail queue backed up?" from the same Redis the workers use.

Its tools read through the admin API and change nothing (each sends only read commands:
tests/cli/test_assistant.py checks Redis's command statistics):

    queues   every queue's size, latency and pause state, and the totals
    busy     every worker process and every running job
    search   one page of `api.Search` (class, jid, argument text, error, queue; a cursor for more)
    job      a job's state, where it is, its times and error, its recorded result and steps

The official `mcp` package is an optional extra (`pip install 'sidequest[mcp]'`), imported only
when the command runs. An assistant's configuration starts it as a command, for example
`{"command": "sidequest", "args": ["mcp"], "env": {"REDIS_URL": "redis://localhost:6379/0"}}`.
"""

from __future__ import annotations

from typing import Any

from sidequest.api import ProcessSet, Search, Stats, Workers, job_steps
from sidequest.api.search import PLACES
from sidequest.cli.admin.connect import admin_client, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main
from sidequest.client.sync_client import Client

INSTRUCTIONS = ("Read-only view of a sidequest (Sidekiq-compatible) job system on Redis: queues and their "
                "latency, busy processes, a search over every queued, scheduled, retrying and dead job, and "
                "one job's history. Nothing here changes anything.")


def queues(client: Client) -> dict[str, Any]:
    """Every queue (size, latency in seconds since its oldest job was enqueued, paused) and the totals."""
    return dict(Stats(client).as_dict())


def busy(client: Client) -> dict[str, Any]:
    """Every worker process and every job running now (its process, thread, queue, start time)."""
    running = [{"process": w.process_id, "thread": w.thread_id, "queue": w.queue, "run_at": w.run_at,
                "jid": w.job.jid, "class": w.job.display_class, "args": w.job.display_args} for w in Workers(client)]
    return {"processes": [dict(p.as_dict()) for p in ProcessSet(client, clean=False)], "running": running}


def search(client: Client, name: str = "", jid: str = "", args: str = "", error: str = "", queue: str = "",
           where: list[str] | None = None, cursor: str = "", limit: int = 50) -> dict[str, Any]:
    """One page of the jobs matching, in every queue, lane, scheduled, retry and dead set; `cursor`
    (from the previous page) resumes, and is null once the search is complete."""
    found = Search(name=name, jid=jid, args=args, error=error, queue=queue, where=where or PLACES, client=client)
    page = found.page(cursor or None, max(1, min(limit, 500)))
    hits = [{k: v for k, v in hit.as_dict().items() if k != "item"} for hit in page.hits]
    return {"hits": hits, "cursor": page.cursor}


def job(client: Client, jid: str) -> dict[str, Any]:
    """Job `jid`: its state, where it is, its times, retries and error, its result record, its steps."""
    from sidequest.web.pages.whereabouts import locate

    where = locate(client, jid)
    steps = job_steps(jid, client)
    stored = {k: v for k, v in where.job.as_dict().items() if k != "item"} if where.job is not None else None
    running = {"process": where.work.process_id, "thread": where.work.thread_id,
               "run_at": where.work.run_at} if where.work is not None else None
    return {"jid": jid, "state": where.state, "set": where.kind, "job": stored, "running": running,
            "record": {k: v for k, v in where.record.items() if k != "result"}, "result": where.record.get("result"),
            "steps": steps.as_dict() if steps is not None else None, "search_stopped": where.stopped}


TOOLS = (queues, busy, search, job)


def server(client: Client) -> Any:
    """The MCP server with the read-only tools bound to `client` (the `mcp` package's MCPServer)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations
    except ImportError:
        raise UserError("`sidequest mcp` needs the mcp package: pip install 'sidequest[mcp]'") from None
    served = MCPServer("sidequest", instructions=INSTRUCTIONS)
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
    for tool in TOOLS:
        served.tool(name=tool.__name__, description=tool.__doc__, annotations=read_only)(_bound(tool, client))
    return served


def _bound(tool: Any, client: Client) -> Any:
    """`tool` without its `client` parameter, with the signature the MCP SDK reads its schema from."""
    import functools
    import inspect

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> Any:
        return tool(client, *args, **kwargs)

    signature = inspect.signature(tool)
    call.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
    return call


@main.command("mcp", help="""Serve a read-only Model Context Protocol server on stdio, for an AI assistant.

    \b
    Tools: queues (sizes, latency), busy (processes, running jobs), search, job (a job's history).
    Nothing it serves changes anything. Needs: pip install 'sidequest[mcp]'.
    """)
@redis_url_option
@redis_errors
def command(redis_url: str | None) -> None:
    server(admin_client(redis_url, "`sidequest mcp` never starts")).run("stdio")

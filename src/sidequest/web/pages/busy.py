"""The Busy page: every worker process (with Quiet and Stop) and every job running, for how long.

Quiet and Stop reach a process through its signal list, which it reads with each heartbeat, so it
acts within a heartbeat interval (Sidekiq's Web UI does the same)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import Iteration, ProcessSet, Workers
from sidequest.web.render import back
from sidequest.web.site import Site, field


def routes(site: Site) -> list[Route]:
    def busy(request: Request) -> Response:
        processes = list(ProcessSet(site.client))
        works = list(Workers(site.client))
        progress = Iteration(site.client).of(works)  # the iterable jobs' cursors, by jid
        return site.page(request, "busy.html", page="busy", title="Busy", processes=processes, works=works,
                         progress=progress,
                         busy=sum(p.busy for p in processes), concurrency=sum(p.concurrency for p in processes),
                         rss_kb=sum(p.rss for p in processes),
                         controllable=any(not p.embedded for p in processes))

    def act(request: Request) -> Response:
        action = field(request, "do")
        if action not in ("quiet", "stop", "quiet_all", "stop_all"):
            return PlainTextResponse(f"unknown action {action!r}", status_code=400)
        processes = ProcessSet(site.client)
        if action.endswith("_all"):
            chosen = [p for p in processes if not p.embedded]
        else:
            found = processes.get(field(request, "identity"))
            if found is None:
                return back(request, "/busy", "That process is gone (it stopped meanwhile).", "info")
            chosen = [found]
        verb = action.removesuffix("_all")
        try:
            for process in chosen:
                if verb == "quiet":
                    process.quiet()
                else:
                    process.stop()
        except RuntimeError as exc:  # embedded in an application: controlled there
            return back(request, "/busy", str(exc), "bad")
        what = "quiet (finish running jobs, take no new ones)" if verb == "quiet" else "stop"
        count = len(chosen)
        return back(request, "/busy", f"Asked {count} process{'es' if count != 1 else ''} to {what}; "
                                      "it takes effect at the next heartbeat.")

    return [Route("/busy", busy, name="busy"), Route("/busy/actions", act, methods=["POST"])]

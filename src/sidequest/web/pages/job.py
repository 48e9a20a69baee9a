"""The job page, `/jobs/<jid>`: where one job is now, its payload, and its durable steps.

Where it is comes from `whereabouts` (the results record, else lookup's bounded search, or the
set entry a link names); its steps from `api.job_steps`. A jid found nowhere, with no record and
no step, is a 404 that says why. Actions: "reset steps" (one, or all) here; retry, run now,
delete and kill of a job in a set go to that set's own action route (`sets`), which comes back
here. Every value shown is user data and printed as text by the template.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import job_steps, reset_steps
from sidequest.web.pages.whereabouts import SEARCH_STEPS, Whereabouts, locate
from sidequest.web.render import back
from sidequest.web.site import Site, field, job_path
from sidequest.worker.retry import retry_limit

MAX_JID = 100  # longer is no jid (Sidekiq's are 24 hex characters): a 404 without a search
MAX_SHOWN = 20_000  # characters of arguments or a result shown before they are cut
STATE_TONE = {"queued": "info", "scheduled": "", "running": "accent", "retry": "warn", "dead": "bad",
              "done": "ok", "cancelled": "warn", "unknown": "", "waiting": "warn"}
STEP_TONE = {"done": "ok", "running": "accent", "failed": "bad", "waiting": "warn", "sleeping": "warn"}
LIVE = ("queued", "running", "waiting")  # states worth a live refresh


def routes(site: Site) -> list[Route]:
    def page(request: Request) -> Response:
        jid = request.path_params["jid"]
        if len(jid) > MAX_JID:
            return _missing(site, request, "This is not a job id: a jid has at most 100 characters.")
        params = request.query_params
        where = locate(site.client, jid, kind=params.get("in"), key=params.get("key"),
                       queue=params.get("queue") or None)
        steps = job_steps(jid, site.client)
        if where.state == "unknown" and not where.record and steps is None:
            return _missing(site, request, _why_missing(jid, where))
        job = where.job
        klass = (job.display_class if job else None) or (steps.klass if steps else None)
        limit = retry_limit(job.item, site.client.config.max_retries) if job and not job.invalid else None
        return site.page(request, "job.html", page="job", title=klass or jid, jid=jid, where=where, job=job,
                         klass=klass, steps=steps, max_retries=limit, tone=STATE_TONE, step_tone=STEP_TONE,
                         shown=_shown(job, where), result=_result(where.record), self_path=job_path(jid),
                         search_steps=SEARCH_STEPS, refresh=where.state in LIVE)

    def act(request: Request) -> Response:
        jid = request.path_params["jid"]
        if field(request, "do") != "reset_steps":
            return PlainTextResponse(f"unknown action {field(request, 'do')!r}", status_code=400)
        name = field(request, "step") or None
        forgotten = reset_steps(jid, name, site.client)
        if not forgotten:
            what = "step “" + name + "”" if name else "step"
            return back(request, job_path(jid), f"No recorded {what} to reset: the job has none (any more).", "info")
        what = f"step “{name}”" if name else f"{forgotten} step{'s' if forgotten != 1 else ''}"
        return back(request, job_path(jid), f"Forgot {what}: the job's next run runs {'it' if name else 'them'} again.")

    return [Route("/jobs/{jid}", page, name="job"), Route("/jobs/{jid}/actions", act, methods=["POST"])]


def _missing(site: Site, request: Request, text: str) -> Response:
    return site.not_found(request, "job", "Job not found", text, "/")


def _why_missing(jid: str, where: Whereabouts) -> str:
    if where.stopped:
        return (f"Job {jid} was not found before the search's bound: a read of each queue and set, and "
                f"{SEARCH_STEPS} more of 1,000 entries (the search stops there, so a page stays quick on a big "
                "Redis). Open it from its queue's or its set's page to go straight to it.")
    return (f"No job {jid} is queued, scheduled, running, waiting for a retry or dead, and none of its results "
            "or steps is kept. A job that ended done leaves no trace unless it was pushed with result_ttl.")


def _shown(job: Any, where: Whereabouts) -> dict[str, str]:
    """The job's arguments and payload as indented JSON, cut to `MAX_SHOWN` characters."""
    if job is None:
        return {}
    args = job.display_args
    return {"args": _cut(json.dumps(args, indent=2, ensure_ascii=False, default=str)),
            "kwargs": _cut(json.dumps(job.kwargs, indent=2, ensure_ascii=False, default=str)) if job.kwargs else "",
            "payload": _cut(json.dumps(job.item, indent=2, ensure_ascii=False, default=str))}


def _result(record: dict[str, str]) -> str | None:
    """A done job's return value as recorded (`result_ttl`), cut to `MAX_SHOWN` characters."""
    raw = record.get("result")
    if raw is None:
        return None
    try:
        return _cut(json.dumps(json.loads(raw), indent=2, ensure_ascii=False))
    except ValueError:
        return _cut(raw)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + f"… ({len(text) - MAX_SHOWN:,} more characters)"

"""`sidequest.current_job()`: what a running job knows of itself, for function and class jobs alike
(Celery's `self.request` under `bind=True`).

    @sidequest.job(retry=5)
    def sync_account(account_id):
        job = sidequest.current_job()
        log.info("sync %s, attempt %d (jid %s)", account_id, job.retry_count + 1, job.jid)

It reads the run's `job_context` (set by `JobRun.enter`, so on both runners; a timed job's thread
and an `async def` job's task get a copy of the context) and builds the `CurrentJob` only when
asked: a job that never asks costs nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidequest.jobs.payload import call_arguments
from sidequest.worker.job_run import job_context


@dataclass(frozen=True, slots=True)
class CurrentJob:
    """The running job, as its payload says."""

    jid: str
    name: str  # the wire name (the payload's `class`)
    queue: str  # the queue it was fetched from
    retry_count: int  # 0 on the first run, n on the n-th retry (Celery's `request.retries`)
    args: list[Any]
    kwargs: dict[str, Any]
    payload: dict[str, Any]  # the whole payload, as fetched (read it; changes are not kept)


def current_job() -> CurrentJob | None:
    """The job running in this context (its thread, its task), or None outside a job."""
    run = job_context.get()
    if run is None:
        return None
    name, jid, queue, _, payload = run
    # Sidekiq's `retry_count` is absent on the first run and 0 on the first retry
    count = payload.get("retry_count")
    retries = count + 1 if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
    args, kwargs = call_arguments(payload)  # an ActiveJob's are its own, not the wrapper's
    return CurrentJob(jid, name, queue, retries, list(args), dict(kwargs), payload)

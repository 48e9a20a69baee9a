"""What a worker process needs from Django: database connections handled per job, as Django
handles them per request, and the `SIDEQUEST` middleware and periodic entries.

Django closes a request's connection when it is unusable or older than `CONN_MAX_AGE` (at the
request's start and end); `CloseOldConnections` does the same around every job, on the thread
that runs it, so a job never inherits a connection the database already dropped and a worker
holds no more connections than it has busy threads. `install` is the `configure_worker` hook
the app registers; it runs only in `sidequest worker` processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import close_old_connections

from ...config import Config
from ...launcher import WorkerSetup
from ...periodic import default_periodic, entries_from_config
from ...registry import default_registry


class CloseOldConnections:
    """Server middleware: `django.db.close_old_connections()` before and after each job."""

    def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        close_old_connections()
        try:
            return call_next()
        finally:
            close_old_connections()


def installer(settings: Config) -> Callable[[WorkerSetup], None]:
    """The worker hook for `settings` (the `SIDEQUEST` setting, read)."""

    def install(worker: WorkerSetup) -> None:
        worker.config.server_middleware.prepend(CloseOldConnections)  # outermost: around every other link
        for mine, theirs in ((settings.server_middleware, worker.config.server_middleware),
                             (settings.client_middleware, worker.config.client_middleware)):
            for link in mine:
                if link not in theirs:  # a process-wide link is in both already
                    theirs.add(link)
        for entry in entries_from_config(settings.periodic, default_registry):
            default_periodic.add(entry)

    return install

"""What a worker process needs from Django: database connections handled per job, as Django
handles them per request, and the `SIDEQUEST` middleware and periodic entries.

Django closes a request's connection when it is unusable or older than `CONN_MAX_AGE` (at the
request's start and end); `CloseOldConnections` does the same around every job, on the thread
that runs it, so a job never inherits a connection the database already dropped and a worker
holds no more connections than it has busy threads. `install` is the `configure_worker` hook
the app registers; it runs only in `sidequest worker` processes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections
from django.utils.log import RequireDebugTrue

from sidequest.config import Config
from sidequest.features.periodic import default_periodic, entries_from_config
from sidequest.jobs.registry import default_registry
from sidequest.worker.launcher import WorkerSetup


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
        one_copy_of_django_lines()
        worker.config.server_middleware.prepend(CloseOldConnections)  # outermost: around every other link
        for mine, theirs in ((settings.server_middleware, worker.config.server_middleware),
                             (settings.client_middleware, worker.config.client_middleware)):
            for link in mine:
                if link not in theirs:  # a process-wide link is in both already
                    theirs.add(link)
        for entry in entries_from_config(settings.periodic, default_registry):
            default_periodic.add(entry)

    return install


def one_copy_of_django_lines() -> None:
    """Drop the console handler Django's default logging gives the `django` logger (it writes
    when DEBUG is on, as in a new project): a `django.*` line (`django.tasks`'s) also propagates
    to the root logger, where the worker writes every line with its job's context, so it came
    out twice. A handler of the project's own LOGGING is left alone."""
    django_logger = logging.getLogger("django")
    django_logger.handlers = [handler for handler in django_logger.handlers if not _django_console(handler)]


def _django_console(handler: logging.Handler) -> bool:
    return type(handler) is logging.StreamHandler and any(isinstance(f, RequireDebugTrue) for f in handler.filters)

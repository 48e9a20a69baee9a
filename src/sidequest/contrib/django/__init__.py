"""sidequest for Django (the `django` extra): an app, a management command, enqueue-on-commit,
the dashboard behind staff login, and a backend for Django's task framework.

    # settings.py
    INSTALLED_APPS = [..., "sidequest.contrib.django"]
    SIDEQUEST = {"redis_url": "redis://localhost:6379/0", "queues": ["default"]}
    TASKS = {"default": {"BACKEND": "sidequest.contrib.django.TasksBackend"}}   # optional

    # anywhere
    from sidequest.contrib.django import enqueue_on_commit
    enqueue_on_commit(send_receipt, order.pk)

    # urls.py
    urlpatterns = [path("sidequest/", include(dashboard_urls()))]

    $ python manage.py sidequest worker          # every installed app's jobs.py is imported

Parts, by role:

    apps        the app: SIDEQUEST read on ready, jobs modules found, worker hook registered
    conf        the SIDEQUEST setting -> Config; the same settings for the CLI's environment
    worker      database connections around each job; SIDEQUEST's middleware and periodic entries
    boot        Django set up in worker processes the `--processes` supervisor starts
    commit      after_commit, enqueue_on_commit
    dashboard   dashboard_urls: the Starlette dashboard served from a Django view, staff only
    backend     TasksBackend (Django's `TASKS`), on `compat`'s django.tasks or django_tasks
    management  `manage.py sidequest ...`: the sidequest CLI with Django set up

See docs/integrations-django.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sidequest.contrib.django.commit import AfterCommit, after_commit, enqueue_on_commit
from sidequest.contrib.django.conf import config_from_settings

if TYPE_CHECKING:
    from sidequest.contrib.django.backend import TasksBackend
    from sidequest.contrib.django.dashboard import dashboard_urls


def __getattr__(name: str) -> Any:
    """`TasksBackend` and `dashboard_urls` load Django's task framework and the dashboard only
    when asked for (a project that uses neither needs neither)."""
    if name == "TasksBackend":
        from sidequest.contrib.django.backend import TasksBackend

        return TasksBackend
    if name == "dashboard_urls":
        from sidequest.contrib.django.dashboard import dashboard_urls

        return dashboard_urls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AfterCommit", "TasksBackend", "after_commit", "config_from_settings", "dashboard_urls",
           "enqueue_on_commit"]

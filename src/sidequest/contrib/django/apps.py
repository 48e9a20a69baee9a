"""The Django app: `INSTALLED_APPS = [..., "sidequest.contrib.django"]`.

When Django is ready it reads `SIDEQUEST` (see `conf`) and makes it the process's default
client (what `perform_async` uses), imports each installed app's `jobs` module (as the admin
imports `admin` modules) and, when `TASKS` uses sidequest's backend, its `tasks` module (the only
tasks a worker runs are those of modules it imported: see `backend`), and registers the worker
hook (see `worker`).
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import autodiscover_modules

from sidequest.client.sync_client import configure
from sidequest.config import Config
from sidequest.contrib.django.conf import config_from_settings
from sidequest.worker.launcher import configure_worker

JOBS_MODULE = "jobs"
TASKS_MODULE = "tasks"  # where Django's `@task` functions live, when TASKS uses sidequest


class SidequestConfig(AppConfig):
    name = "sidequest.contrib.django"
    label = "sidequest"
    verbose_name = "sidequest"
    default = True
    default_auto_field = "django.db.models.AutoField"  # its one model (`models`) has no table: never a migration

    config: Config  # the SIDEQUEST setting, read
    given: dict[str, Any]  # the SIDEQUEST setting as written

    def ready(self) -> None:
        from sidequest.contrib.django.worker import installer

        self.given = dict(getattr(settings, "SIDEQUEST", None) or {})
        self.config = config_from_settings(self.given)
        configure(self.config)
        if uses_tasks_backend():
            from sidequest.contrib.django import backend  # noqa: F401  (registers the job that runs Django tasks)

            # a worker runs only tasks of modules imported here (or by -r), never one a job names
            autodiscover_modules(TASKS_MODULE)
        autodiscover_modules(JOBS_MODULE)
        configure_worker(installer(self.config))


def uses_tasks_backend() -> bool:
    """Whether a `TASKS` backend is sidequest's (its job must be registered in workers)."""
    backends = getattr(settings, "TASKS", None) or {}
    return any(str(spec.get("BACKEND", "")).startswith(__package__ or "sidequest.contrib.django")
               for spec in backends.values() if isinstance(spec, dict))

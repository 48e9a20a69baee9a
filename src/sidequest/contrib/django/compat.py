"""Django's task framework from where it lives: `django.tasks` (Django 6.0+, Python 3.12+), else
the `django-tasks` backport (`django_tasks`, for Django 5.2). Both define the same classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backport ships types; Django's own module needs Django 6 (and its stubs)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

# "Successful" is SUCCESSFUL in Django 6.0 and django-tasks 0.12, SUCCEEDED in later django-tasks
SUCCEEDED: TaskResultStatus = getattr(TaskResultStatus, "SUCCESSFUL", None) or TaskResultStatus["SUCCEEDED"]

__all__ = [
    "SUCCEEDED",
    "BaseTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

"""Tasks: many jobs under one id, each job's whole life recorded, progress and callbacks.

    from sidequest import Task, task_message

    task = Task.create("sign up 200 products", meta={"seller": 42}, on_complete=notify)
    task.add_bulk(signup, [[p] for p in product_ids])
    task.seal()                                  # no more jobs: completion may now fire
    Task.find(task.id).status()                  # {"counts": {...}, "percent": 37.5, "done": False, ...}

Parts, by role:

    task      Task, the handle: create, add jobs, seal, read status, events and the recent tasks
    feature   TaskFeature, the lifecycle feature that records each job's event in the move that
              files it; TaskRecorder and `task_message` for messages from inside a job
    lua       the tasks' Lua: the shared library, the lifecycle operation, transition and seal
    http      `tasks_app`, the JSON HTTP API (Starlette): `from sidequest.features.tasks.http import tasks_app`

The HTTP API is not imported here, so `import sidequest` does not load Starlette.
"""

from sidequest.features.tasks.feature import TaskFeature, TaskRecorder, task_message
from sidequest.features.tasks.task import FINAL, RECENT_AGE, RECENT_LIMIT, RETENTION, TTL, Task

__all__ = [
    "FINAL",
    "RECENT_AGE",
    "RECENT_LIMIT",
    "RETENTION",
    "TTL",
    "Task",
    "TaskFeature",
    "TaskRecorder",
    "task_message",
]

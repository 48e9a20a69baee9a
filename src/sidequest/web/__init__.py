"""The web dashboard: pages for queues, jobs, processes, metrics and tasks, `/metrics` for
Prometheus, and the tasks JSON API, as one ASGI app (see `app.create_app`)."""

from sidequest.web.app import create_app
from sidequest.web.security import AuthHook

__all__ = ["AuthHook", "create_app"]

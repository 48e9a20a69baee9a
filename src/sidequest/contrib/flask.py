"""Flask: an extension that configures sidequest from `app.config` and runs jobs in the app's context.

    from flask import Flask
    from sidequest.contrib.flask import Sidequest

    app = Flask(__name__)
    app.config["SIDEQUEST_REDIS_URL"] = "redis://localhost:6379/0"
    Sidequest(app)                      # or sq = Sidequest(); sq.init_app(app) in a factory

`init_app` builds a `Config` from the process environment (`REDIS_URL`, `SIDEQUEST_*`, as
everywhere in sidequest) with every `SIDEQUEST_<SETTING>` key of `app.config` on top (e.g.
`SIDEQUEST_QUEUES = ["mail", "default"]`, `SIDEQUEST_CONCURRENCY = 5`), and installs it as the
process's default client (`sidequest.configure`), so views push with `job.perform_async(...)`.

It also registers a `configure_worker` hook: a `sidequest worker` that imports the app (with
`-r`) runs every job inside `app.app_context()`, so jobs can use `current_app`, `g` and
extensions such as Flask-SQLAlchemy (whose session is removed when each job's context ends).
The worker's own settings (queues, concurrency, Redis) still come from its flags, file and
environment; it warns when its Redis is not the one the app pushes to.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    from flask import Flask, current_app
except ImportError as exc:
    raise ImportError(f"sidequest.contrib.flask needs Flask: pip install flask ({exc})") from None

from sidequest.client.sync_client import Client, configure
from sidequest.config import Config, nearest_setting
from sidequest.errors import ConfigError
from sidequest.store.connection import mask_url
from sidequest.worker.launcher import WorkerSetup, configure_worker

__all__ = ["AppContext", "Sidequest", "State", "config_from_app"]

PREFIX = "SIDEQUEST_"
EXTENSION = "sidequest"  # the key in app.extensions
# Chains are built in code (config.server_middleware.add(...)), not read from app.config.
SETTINGS = tuple(f.name for f in dataclasses.fields(Config) if f.name not in ("client_middleware", "server_middleware"))

log = logging.getLogger(__name__)


class Sidequest:
    """The Flask extension: `Sidequest(app)`, or `sq = Sidequest()` and `sq.init_app(app)` in a factory.

    Each app's configuration and client are in `app.extensions["sidequest"]`; `sq.config` and
    `sq.client` read those of `current_app`.
    """

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Configure sidequest from `app.config` and make the app's workers run jobs in its context."""
        config = config_from_app(app)
        app.extensions[EXTENSION] = State(config, configure(config))
        configure_worker(_worker_hook(app, config))

    @property
    def config(self) -> Config:
        return _state().config

    @property
    def client(self) -> Client:
        return _state().client


@dataclass(frozen=True)
class State:
    """What `init_app` leaves in `app.extensions["sidequest"]`."""

    config: Config
    client: Client  # the process's default client since init_app


def _state() -> State:
    state = current_app.extensions.get(EXTENSION)
    if not isinstance(state, State):
        raise RuntimeError(f"sidequest is not set up for the app {current_app.name!r}: call Sidequest(app) first")
    return state


class AppContext:
    """Server middleware that runs each job inside `app.app_context()`.

        config.server_middleware.prepend(AppContext, app)     # for a `Launcher` you build yourself
    """

    def __init__(self, app: Flask) -> None:
        self.app = app

    def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        with self.app.app_context():
            return call_next()


def config_from_app(app: Flask) -> Config:
    """The process environment's `Config` with the `SIDEQUEST_*` keys of `app.config` on top.

    A text value for a setting that is not text is read as the environment variable of the same
    name would be (`"5"` for concurrency, `"critical,3 default,1"` for queues).
    """
    values: dict[str, Any] = {}
    for key, value in app.config.items():
        if not key.startswith(PREFIX):
            continue
        name = key[len(PREFIX):].lower()
        if name not in SETTINGS:
            raise ConfigError(f"app.config[{key!r}] is not a sidequest setting{_nearest(name)}")
        values[name] = Config.cast_setting(name, value) if isinstance(value, str) else value
    return Config.from_env().replace(**values)


def _nearest(name: str) -> str:
    close = nearest_setting(name, SETTINGS)
    return f"; did you mean {PREFIX}{close.upper()}?" if close else ""


def _worker_hook(app: Flask, config: Config) -> Callable[[WorkerSetup], None]:
    """The hook `sidequest worker` runs after importing the app: jobs run in its context.

    Prepended, so that other server middleware (a Sentry scope, a database session) runs inside
    the context too. The link is the class, added with `app`: a second app moves it, never
    nests two contexts."""
    def hook(worker: WorkerSetup) -> None:
        worker.config.server_middleware.prepend(AppContext, app)
        if worker.config.url != config.url:
            log.warning("this worker takes jobs from %s, but the Flask app %r pushes them to %s: give both "
                        "the same Redis (REDIS_URL, or the app's SIDEQUEST_REDIS_URL)", mask_url(worker.config.url),
                        app.name, mask_url(config.url))
    return hook

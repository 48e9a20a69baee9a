"""FastAPI and Starlette: a lifespan that gives the app a sidequest client and, if asked, a worker.

    import sidequest
    from fastapi import FastAPI
    from sidequest.contrib.fastapi import lifespan

    app = FastAPI(lifespan=lifespan(worker=True))           # Starlette(lifespan=...) alike

    @app.post("/reports/{n}")
    async def create_report(n: int) -> dict[str, str | None]:
        return {"jid": await build_report.aio.perform_async(n)}

On startup the app's client becomes the default: `job.aio.*` and `sidequest.client.async_client.*` calls in the
app use it (and the blocking `job.perform_async` its sync twin), and it is `app.state.sidequest`
(an `AsyncClient`). With `config=` that configuration is installed process-wide
(`sidequest.configure`); without it, the default client is used as it is (`REDIS_URL`...).

With `worker=True` a `Launcher` works the configuration's queues on threads of this process
(`app.state.sidequest_worker`; None without a worker), set up as `sidequest worker` sets one
up: the modules of `config.require` (`SIDEQUEST_REQUIRE`) imported, the `configure_worker`
hooks run. On shutdown it stops as a worker does on TERM: no new
jobs, running ones get `config.timeout` seconds, the rest go back to the head of their queue.

`inner=` is your own lifespan, run inside this one: the client is there for all of it, and the
worker starts after your startup code and stops before your shutdown code, so jobs may use what
your lifespan opens. Or nest this one in yours: `async with lifespan(worker=True)(app): yield`.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, overload

try:
    from starlette.applications import Starlette
    from starlette.types import StatefulLifespan, StatelessLifespan
except ImportError as exc:  # pragma: no cover - starlette is a core dependency today
    raise ImportError(f"sidequest.contrib.fastapi needs starlette: pip install starlette ({exc})") from None

from sidequest.client import async_client as aio
from sidequest.client.sync_client import configure, default_client
from sidequest.config import Config
from sidequest.worker.launcher import Launcher, run_worker_hooks

__all__ = ["lifespan"]

App = TypeVar("App", bound=Starlette)


@overload
def lifespan(config: Config | None = None, *, worker: bool = False,
             inner: None = None) -> StatelessLifespan[Starlette]: ...
@overload
def lifespan(config: Config | None = None, *, worker: bool = False,
             inner: StatelessLifespan[App]) -> StatelessLifespan[App]: ...
@overload
def lifespan(config: Config | None = None, *, worker: bool = False,
             inner: StatefulLifespan[App]) -> StatefulLifespan[App]: ...


def lifespan(config: Config | None = None, *, worker: bool = False,
             inner: Any = None) -> Any:
    """The app's lifespan: a sidequest client (and a worker with `worker=True`) around `inner`.

        app = FastAPI(lifespan=lifespan(sidequest.Config(redis_url=url), worker=True, inner=mine))

    What `inner` yields (lifespan state, or nothing) is what the app gets.
    """
    def run(app: Starlette) -> AbstractAsyncContextManager[Any]:
        return _running(app, config, worker, inner)

    return run


@asynccontextmanager
async def _running(app: Starlette, config: Config | None, worker: bool, inner: Any) -> AsyncIterator[Any]:
    sync = configure(config) if config is not None else default_client()
    client = aio.default_client(sync)  # the loop's default from now on: `job.aio.*` finds this one
    app.state.sidequest = client
    app.state.sidequest_worker = None
    try:
        async with _inner(app, inner) as state:
            if not worker:
                yield state
                return
            # Launcher() and run() talk to Redis before returning: off the loop, so it keeps serving
            launcher = await asyncio.to_thread(_start_worker, sync.config)
            app.state.sidequest_worker = launcher
            try:
                yield state
            finally:  # up to config.timeout for running jobs; the rest are put back, none lost
                await asyncio.to_thread(launcher.stop)
    finally:
        await client.aclose()


@asynccontextmanager
async def _inner(app: Starlette, inner: Any) -> AsyncIterator[Any]:
    if inner is None:
        yield None
        return
    async with inner(app) as state:
        yield state


def _start_worker(config: Config) -> Launcher:
    """A worker as `sidequest worker` builds one (the `require` modules imported, then the hooks
    run), started: its threads run the jobs."""
    for module in config.require:  # dotted names; the app's own jobs are imported by the app
        importlib.import_module(module)
    setup = run_worker_hooks(config)
    launcher = Launcher(config, death_handlers=setup.death_handlers, error_handlers=setup.error_handlers)
    launcher.run()
    return launcher

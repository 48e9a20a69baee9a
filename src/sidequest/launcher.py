"""One worker process, composed: heartbeat, scheduled poller, orphan recovery, manager.

    launcher = Launcher(config)
    launcher.run()       # returns at once; work happens on threads
    ...
    launcher.stop()      # quiet, wait up to config.timeout, requeue leftovers, deregister
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from . import __version__
from .config import Config
from .connection import connect
from .executor import ThreadExecutor
from .fetch import build_fetch
from .heartbeat import Heartbeat, make_identity, rss_kb
from .manager import Manager
from .processor import Runtime
from .recovery import Recovery
from .registry import Registry, default_registry
from .retry import Retrier
from .scheduled import Poller
from .stats import Stats
from .tasks import TaskRecorder

log = logging.getLogger(__name__)

DeathHandler = Callable[[dict[str, Any], BaseException], None]
_worker_hooks: list[Callable[[WorkerSetup], None]] = []


@dataclass
class WorkerSetup:
    """What a `configure_worker` hook may change before `sidequest worker` starts."""

    config: Config  # config.server_middleware / client_middleware are chains to add to
    death_handlers: list[DeathHandler] = field(default_factory=list)


def configure_worker(hook: Callable[[WorkerSetup], None]) -> Callable[[WorkerSetup], None]:
    """Register a hook, run by `sidequest worker` after importing the `-r` modules, like
    Sidekiq's `configure_server`:

        @sidequest.configure_worker
        def setup(worker):
            worker.config.server_middleware.add(Timing)
            worker.death_handlers.append(page_someone)
    """
    _worker_hooks.append(hook)
    return hook


def run_worker_hooks(config: Config) -> WorkerSetup:
    setup = WorkerSetup(config)
    for hook in _worker_hooks:
        hook(setup)
    return setup


class Launcher:
    def __init__(self, config: Config, *, registry: Registry | None = None,
                 redis_client: redis.Redis | None = None,
                 death_handlers: list[DeathHandler] | None = None,
                 on_signal: Callable[[int], None] | None = None,
                 recycle_on_timeout: bool = False,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None) -> None:
        self.config = config
        self.redis = redis_client or connect(config.url)
        self.identity = make_identity(secrets.token_hex(6))
        self.stats = Stats()
        self.on_signal = on_signal or (lambda sig: os.kill(os.getpid(), sig))
        self.recycle_on_timeout = recycle_on_timeout
        self._recycling = False
        self.tasks = TaskRecorder(self.redis, config.task_retention, clock=clock)
        self.runtime = Runtime(
            config=config, registry=registry or default_registry, stats=self.stats,
            retrier=Retrier(config, death_handlers, clock=clock, rng=rng, tasks=self.tasks),
            executor=ThreadExecutor(on_abandon=self._abandoned), identity=self.identity, tasks=self.tasks,
        )
        self.recovery = Recovery(config, self.redis, self.identity, clock=clock, tasks=self.tasks)
        self._last_recovery = 0.0
        self.heartbeat = Heartbeat(config, self.redis, self.identity, self.stats, __version__,
                                   on_signal=self.on_signal, extra=[self._maybe_recover, self._check_limits])
        self.poller = Poller(config, self.redis, clock=clock, rng=rng)
        self.manager = Manager(self.runtime, lambda slot: build_fetch(config, self.redis, self.identity, slot,
                                                                       self.tasks))
        self.stopped = False

    def run(self) -> None:
        self.heartbeat.start()  # registered before anything is fetched
        if self.config.fetch == "reliable":
            self._maybe_recover(force=True)
        self.poller.start()
        self.manager.start()

    def _maybe_recover(self, force: bool = False) -> None:
        if self.config.fetch != "reliable":
            return
        now = time.monotonic()
        if force or now - self._last_recovery >= self.config.recovery_interval:
            self._last_recovery = now
            try:
                self.recovery.run()
            except (redis.RedisError, OSError) as exc:
                log.warning("orphan recovery skipped: %s", exc)

    def _recycle(self, reason: str) -> None:
        """Stop this process gracefully (its supervisor or service manager starts a fresh one)."""
        if not self._recycling:
            self._recycling = True
            log.warning("recycling this worker process: %s", reason)
            self.on_signal(signal.SIGTERM)

    def _abandoned(self, job: Any) -> None:
        if self.recycle_on_timeout:
            self._recycle(f"job {job.jid} passed its time limit and its thread cannot be stopped")

    def _check_limits(self) -> None:
        limit = self.config.max_jobs
        if limit is not None and self.stats.total() >= limit:
            self._recycle(f"processed {self.stats.total()} jobs (max_jobs {limit})")
        megabytes = rss_kb() / 1024
        if self.config.max_memory is not None and megabytes > self.config.max_memory:
            self._recycle(f"resident memory {megabytes:.0f} MB is over max_memory {self.config.max_memory:g} MB")

    def quiet(self) -> None:
        """Stop fetching new jobs; running ones finish. Shown as quiet in Sidekiq's UI."""
        self.manager.quiet()
        self.heartbeat.quiet = True
        self.heartbeat.beat()

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        deadline = time.monotonic() + self.config.timeout
        self.manager.quiet()
        self.heartbeat.quiet = True
        self.poller.stop()
        self.manager.stop(deadline)
        self.heartbeat.stop()
        self.runtime.executor.close()
        log.info("stopped")

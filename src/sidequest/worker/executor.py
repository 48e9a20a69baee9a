"""How a job's `perform` is called: the seam between the processor loop and a concurrency model.

Plain functions run on the processor's own thread. `async def` jobs run on one event loop
thread shared by the process, so they interleave with each other and never block the other
processors; the processor thread waits for its coroutine's result.

A plain function with a time limit (`timeout` option, or the worker's `job_timeout`) runs on a
thread of its own while the processor waits at most that long. Past the limit the processor
raises JobTimeoutError (the job takes the retry path) and moves on. Python cannot stop a thread
safely, so the abandoned call keeps running in the background until it returns by itself;
`on_abandon` lets the worker react (in a multi-process worker the child restarts itself,
which ends the stuck code). An `async def` job past its limit is cancelled for real.

One rule for a time limit, on both runners (the asyncio runner calls `time_limit` and `limited`
too): only the limit running out is a time-out. Whoever waits decides, by the clock it waits on,
never by the type of an exception: a coroutine is timed out when its deadline has expired
(`limited`), a plain function when its thread still runs at the limit (`watched`). A
`TimeoutError` the job's own code raises (an HTTP client's, its own `asyncio.timeout`) is an
ordinary exception of the job: retried as `retry_on` says, reported with its own message. (Since
Python 3.11 `asyncio.TimeoutError` and `concurrent.futures.TimeoutError` are that same builtin,
so catching "a TimeoutError" around a wait mistakes the job's own error for the limit.)
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from sidequest.config import Config
from sidequest.errors import JobTimeoutError
from sidequest.jobs.payload import NO_KWARGS


def time_limit(payload: dict[str, Any], config: Config) -> float | None:
    """The job's time limit in seconds: its `timeout` option, else the worker's `job_timeout`."""
    limit = payload.get("timeout") or config.job_timeout
    return float(limit) if isinstance(limit, (int, float)) and limit > 0 else None


def _overrun(limit: float, then: str) -> JobTimeoutError:
    """The error of a job that ran past `limit` seconds (the retry path, as any failure)."""
    return JobTimeoutError(f"job ran longer than its {limit:g} s time limit{then}")


async def limited(coroutine: Coroutine[Any, Any, Any], limit: float) -> Any:
    """`coroutine`'s value, cancelled for real past `limit` seconds (JobTimeoutError then)."""
    try:
        async with asyncio.timeout(limit) as deadline:
            return await coroutine
    except TimeoutError:
        if deadline.expired():  # the deadline cancelled it; else the TimeoutError is the job's own
            raise _overrun(limit, " (cancelled)") from None
        raise


def watched(call: Callable[[], Any], limit: float, name: str,
            on_abandon: Callable[[], None] | None = None) -> Any:
    """`call()`'s value, run on a thread of its own that sees the caller's context (log context,
    the current job). Past `limit` seconds the thread is abandoned (Python cannot stop it; it
    keeps running until it returns by itself), `on_abandon` is told, and JobTimeoutError raised."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the waiting thread below
            outcome["error"] = exc

    runner = threading.Thread(target=contextvars.copy_context().run, args=(target,), name=name, daemon=True)
    runner.start()
    runner.join(limit)
    if runner.is_alive():
        if on_abandon is not None:
            on_abandon()
        raise _overrun(limit, "; its thread was abandoned")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class Executor(Protocol):
    def run(self, job: Any, args: list[Any], timeout: float | None = None,
            kwargs: dict[str, Any] = NO_KWARGS) -> Any: ...
    def close(self) -> None: ...


class ThreadExecutor:
    """Calls sync jobs inline (or on a watched thread when timed) and coroutines on a loop."""

    def __init__(self, on_abandon: Callable[[Any], None] | None = None) -> None:
        self.on_abandon = on_abandon
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._async: dict[type, bool] = {}

    def loop(self) -> asyncio.AbstractEventLoop:
        """The process's event loop (started on first use): `async def` jobs run on it, and the
        asyncio runner (`asyncio_runner`) fetches and acknowledges on it."""
        return self._event_loop()

    def started_loop(self) -> asyncio.AbstractEventLoop | None:
        """The process's event loop if it has started (the liveness watchdog asks it), else None."""
        return self._loop

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="sidequest-asyncio", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, job: Any, args: list[Any], timeout: float | None = None,
            kwargs: dict[str, Any] = NO_KWARGS) -> Any:
        """`job.perform(*args, **kwargs)`'s value (see the module for where it runs)."""
        kind = type(job)
        is_async = self._async.get(kind)
        if is_async is None:  # looked up once per job class: this is every job's path
            is_async = self._async[kind] = inspect.iscoroutinefunction(job.perform)
        if is_async:
            return self._on_loop(job.perform(*args, **kwargs), timeout)
        if timeout is None:
            result = job.perform(*args, **kwargs)
        else:
            result = watched(lambda: job.perform(*args, **kwargs), timeout,
                                         f"sidequest-job-{getattr(job, 'jid', '')}", self._abandoning(job))
        if inspect.iscoroutine(result):  # a sync perform that returned a coroutine: run it, limited alike
            return self._on_loop(result, timeout)
        return result

    def _on_loop(self, coroutine: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
        """The coroutine's value, run on the process's loop (under the time limit's one rule,
        `limited`) while this thread waits."""
        if timeout is not None:
            coroutine = limited(coroutine, timeout)
        return asyncio.run_coroutine_threadsafe(coroutine, self._event_loop()).result()

    def _abandoning(self, job: Any) -> Callable[[], None] | None:
        on_abandon = self.on_abandon
        return None if on_abandon is None else lambda: on_abandon(job)

    def close(self) -> None:
        """Stop the event loop and, once its thread has ended, close it (its selector and its
        default executor's threads go with it)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5)
            if thread.is_alive():  # a job blocks the loop: it ends with the process
                return
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()

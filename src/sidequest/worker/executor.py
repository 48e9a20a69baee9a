"""How a job's `perform` is called: the seam between the processor loop and a concurrency model.

Plain functions run on the processor's own thread. `async def` jobs run on one event loop
thread shared by the process, so they interleave with each other and never block the other
processors; the processor thread waits for its coroutine's result.

A job with a time limit (`timeout` option, or the worker's `job_timeout`) runs on a thread of
its own while the processor waits at most that long. Past the limit the processor raises
JobTimeoutError (the job takes the retry path) and moves on. Python cannot stop a thread
safely, so the abandoned call keeps running in the background until it returns by itself;
`on_abandon` lets the worker react (in a multi-process worker the child restarts itself,
which ends the stuck code). An `async def` job past its limit is cancelled for real.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any, Protocol

from sidequest.errors import JobTimeoutError
from sidequest.jobs.payload import NO_KWARGS


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
            future = asyncio.run_coroutine_threadsafe(job.perform(*args, **kwargs), self._event_loop())
            try:
                return future.result(timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise JobTimeoutError(f"job ran longer than its {timeout:g} s time limit (cancelled)") from None
        if timeout is None:
            result = job.perform(*args, **kwargs)
            if inspect.iscoroutine(result):  # a sync perform that returned a coroutine
                return asyncio.run_coroutine_threadsafe(result, self._event_loop()).result()
            return result
        return self._run_timed(job, args, kwargs, timeout)

    def _run_timed(self, job: Any, args: list[Any], kwargs: dict[str, Any], timeout: float) -> Any:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["value"] = job.perform(*args, **kwargs)
            except BaseException as exc:  # handed to the processor thread below
                outcome["error"] = exc

        # The job thread sees this thread's context (log context, the current task job).
        context = contextvars.copy_context()
        runner = threading.Thread(target=context.run, args=(target,),
                                  name=f"sidequest-job-{getattr(job, 'jid', '')}", daemon=True)
        runner.start()
        runner.join(timeout)
        if runner.is_alive():
            if self.on_abandon is not None:
                self.on_abandon(job)
            raise JobTimeoutError(f"job ran longer than its {timeout:g} s time limit; its thread was abandoned")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

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

"""How a job's `perform` is called: the seam between the processor loop and a concurrency model.

Plain functions run on the processor's own thread. `async def` jobs run on one event loop
thread shared by the process, so they interleave with each other and never block the other
processors; the processor thread waits for its coroutine's result.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Protocol


class Executor(Protocol):
    def run(self, job: Any, args: list[Any]) -> Any: ...
    def close(self) -> None: ...


class ThreadExecutor:
    """Calls sync jobs inline and hands coroutines to a background event loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="sidequest-asyncio", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, job: Any, args: list[Any]) -> Any:
        result = job.perform(*args)
        if inspect.iscoroutine(result):
            future = asyncio.run_coroutine_threadsafe(result, self._event_loop())
            return future.result()
        return result

    def close(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None:
                    self._thread.join(5)
                self._loop = None

"""Jobs that break a worker process from inside, for the liveness probe's scenarios
(tests/scenarios/test_probes.py); workers import them with `-r probe_jobs`."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import redis

import sidequest


@sidequest.job(name="StopHeartbeat", retry=0, dead=False)
def stop_heartbeat() -> None:
    """End this process's heartbeat thread, as an error that escapes its loop would."""
    for thread in threading.enumerate():
        if thread.name == "sidequest-heartbeat" and thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit))


@sidequest.job(name="BlockLoop", retry=0, dead=False)
async def block_loop(key: str, seconds: float = 120.0) -> None:
    """Block the event loop (a sync call in an `async def` job) until `key` is set in Redis."""
    r = redis.Redis.from_url(os.environ["SQ_TEST_REDIS_URL"])
    r.set(f"{key}:started", os.getpid())
    deadline = time.monotonic() + seconds
    while not r.exists(key) and time.monotonic() < deadline:
        time.sleep(0.05)  # the job's fault on purpose: a blocking sleep holds the loop

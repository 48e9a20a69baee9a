"""What the examples share: finding Redis, an in-process worker, and a progress line.

Not an example itself. The example scripts import it only in `main()`, so that a separate
worker (`sidequest worker -r examples/<name>.py`) loads their jobs without it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import sidequest
from sidequest.launcher import Launcher
from sidequest.store import keys
from sidequest.store.dev_server import resolve_url

CONCURRENCY = 8


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """The examples' command line: `--no-worker` (add your own options before parsing)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--no-worker", action="store_true",
                        help="start no worker here: one runs elsewhere on this example's queue")
    return parser


def connect(queue: str) -> sidequest.Config:
    """Redis from REDIS_URL, else the embedded one (started if needed), as `sidequest demo` does.

    Sets the default client, so `Task.create`/`Task.find` and the jobs themselves use this
    Redis, and empties the example's queue of anything an interrupted run left behind.
    """
    base = sidequest.Config.from_env()
    url = resolve_url(base)
    config = base.replace(redis_url=url, queues=(queue,), concurrency=CONCURRENCY,
                          fetch_timeout=0.5, timeout=10.0)
    client = sidequest.configure(config)
    client.redis.delete(keys.queue(queue))
    where = url if base.redis_url else f"{url} (REDIS_URL unset: the one on this machine, or the embedded one)"
    print(f"Redis: {where}")
    return config


@contextlib.contextmanager
def worker(config: sidequest.Config, start: bool = True) -> Iterator[None]:
    """An in-process worker on the example's queue for the duration of the block."""
    queue = config.queue_names[0]
    if not start:
        print(f"no worker started here; run one: sidequest worker -r {sys.argv[0]} -q {queue}")
        yield
        return
    # The worker logs a line per failed job; keep the terminal for the progress line.
    logging.getLogger("sidequest").setLevel(logging.ERROR)
    launcher = Launcher(config)
    launcher.run()
    print(f"worker started: {config.concurrency} threads on queue {queue!r}")
    try:
        yield
    finally:
        launcher.stop()
        print("worker stopped")


def bar(status: dict[str, Any], width: int = 30) -> str:
    counts, percent = status["counts"], status["percent"]
    filled = int(width * percent / 100)
    ended = counts["finished"] + counts["failed"] + counts["error"]
    return (f"[{'#' * filled}{'.' * (width - filled)}] {percent:3.0f}% finished={counts['finished']}"
            f" failed={counts['failed']} error={counts['error']} ({ended}/{status['total']})")


def follow(task: sidequest.Task, interval: float = 0.2) -> dict[str, Any]:
    """Show the task's progress on one updating line until it is done; return its last status.

    On a terminal the line is redrawn in place; in a log or a pipe a line is printed per quarter.
    """
    tty = sys.stdout.isatty()
    quarter = -1
    while True:
        status = task.status()
        if tty:
            print(f"\r{bar(status)}", end="", flush=True)
        elif status["percent"] // 25 > quarter:
            quarter = int(status["percent"] // 25)
            print(bar(status), flush=True)
        if status["done"]:
            if tty:
                print()
            return status
        time.sleep(interval)

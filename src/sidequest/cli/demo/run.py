"""`make demo`: a real worker on a real Redis, running example jobs while you watch.

It enqueues immediate jobs, an `async def` job, a job scheduled two seconds ahead, and a job
that fails once and succeeds on its retry, then prints each event as the worker reports it
and a summary read back from Redis.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import click

from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.jobs.definition import job
from sidequest.jobs.payload import epoch
from sidequest.store import keys
from sidequest.store.dev_server import resolve_url
from sidequest.worker.launcher import Launcher
from sidequest.worker.outcome import error_class_name

QUEUE = "sidequest-demo"


@job(name="sidequest.cli.demo.run.greet", queue=QUEUE)
def greet(name: str) -> str:
    return f"hello, {name}"


@job(name="sidequest.cli.demo.run.crunch", queue=QUEUE)
def crunch(n: int) -> int:
    return sum(i * i for i in range(n))


@job(name="sidequest.cli.demo.run.fetch_page", queue=QUEUE)
async def fetch_page(page: int) -> str:
    await asyncio.sleep(0.2)  # stands in for an HTTP call
    return f"page {page}"


@job(name="sidequest.cli.demo.run.flaky", queue=QUEUE, retry=3, retry_in=lambda count, exc: 1)
def flaky(label: str) -> str:
    return f"{label} worked"


class Narrator:
    """Server middleware that prints what happens to each job, and counts finished ones."""

    finished = 0
    lock = threading.Lock()
    done = threading.Event()
    expected = 0

    def __call__(self, job_obj: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        name = payload["class"].rsplit(".", 1)[-1]
        attempt = payload.get("retry_count")
        if name == "flaky" and attempt is None:
            click.echo(f"  ▶ {name}{payload['args']}  first attempt (will raise)")
            raise ConnectionResetError("the flaky service hung up")
        started = time.monotonic()
        try:
            result = call_next()
        except Exception as exc:
            click.echo(f"  ✗ {name}{payload['args']} raised {error_class_name(exc)}")
            raise
        late = ""
        created, enqueued = epoch(payload.get("created_at")), epoch(payload.get("enqueued_at"))
        if created is not None and enqueued is not None:
            late = f" (queued {enqueued - created:.1f} s after creation)"
        retry = f" on retry {attempt + 1}" if isinstance(attempt, int) else ""  # retry_count 0: the first retry
        click.echo(f"  ✓ {name}{payload['args']} -> {result!r}{retry} in {time.monotonic() - started:.3f} s{late}")
        with Narrator.lock:
            Narrator.finished += 1
            if Narrator.finished >= Narrator.expected:
                Narrator.done.set()
        return result


def run_demo(base: Config, count: int) -> int:
    embedded = base.redis_url is None
    url = resolve_url(base)
    config = base.replace(redis_url=url, queues=(QUEUE,), concurrency=4, poll_interval=0.25,
                          heartbeat_interval=1.0, heartbeat_ttl=10.0, timeout=5.0)
    config.server_middleware.add(Narrator)
    where = f"embedded redis-server at {url} (data in {base.embedded_dir}/redis)" if embedded else url
    click.echo(f"sidequest demo: Redis is {where}")
    client = Client(config)
    client.redis.delete(keys.queue(QUEUE))
    Narrator.expected = count + 3
    launcher = Launcher(config)
    launcher.run()
    click.echo(f"worker {launcher.identity} started with {config.concurrency} threads on queue {QUEUE!r}\n")
    click.echo(f"enqueueing {count} immediate jobs, 1 async job, 1 scheduled 2 s ahead, 1 that fails once\n")
    names = ["Ada", "Grace", "Linus", "Guido", "Yukihiro", "Barbara"]
    for i in range(count):
        if i % 2:
            client.push(crunch, [10_000 * (i + 1)])
        else:
            client.push(greet, [names[i % len(names)]])
    client.push(fetch_page, [1])
    client.push(greet, ["the future"], in_=2)
    client.push(flaky, ["payment"])
    ok = Narrator.done.wait(30)
    launcher.stop()
    r = client.redis
    click.echo(
        f"\nprocessed={int(r.get(keys.STAT_PROCESSED) or 0)} failed={int(r.get(keys.STAT_FAILED) or 0)} (all time)"
        f"  queued={r.llen(keys.queue(QUEUE))} scheduled={r.zcard(keys.SCHEDULE)} retries={r.zcard(keys.RETRY)}"
        f" dead={r.zcard(keys.DEAD)}")
    if not ok:
        click.echo(f"demo: only {Narrator.finished} of {Narrator.expected} jobs finished in 30 s", err=True)
        return 1
    click.echo("demo finished: every job ran. Next: `sidequest worker -r yourapp.jobs` (see README).")
    return 0

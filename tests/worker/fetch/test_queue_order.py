"""A paused queue (`sidequest:paused`) is skipped by every running worker within about a second;
an idle blocking fetch's timeout is spread (`blocking_wait`)."""

import random
import time

import pytest
from conftest import wait_until
from helpers import beats, pause_seen, push_fillers, ran
from jobs_for_tests import echo

from sidequest.api import Queue
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.fetchers import build_fetch
from sidequest.worker.fetch.queue_order import blocking_wait


def test_a_running_worker_honours_pause_and_unpause(start, client, r):
    launcher = start(concurrency=3, queues=("default", "other"))
    client.push(echo, ["before"])
    wait_until(lambda: ran(r, "echo") == [["before"]])
    r.sadd("sidequest:paused", "default")
    pause_seen(launcher, "default")  # within about a second
    push_fillers(client, "default", 3)  # for fetches that began before it was seen
    jid = client.push(echo, ["while paused"])
    client.push(echo, ["other queue"], queue="other")
    wait_until(lambda: ["other queue"] in ran(r, "echo"), message="the unpaused queue still works")
    # give the workers the chance to take it, if they were going to: every processor fetches
    # again (default first) for the jobs of the unpaused queue behind it
    client.push_bulk(echo, [["after", n] for n in range(12)], queue="other")
    wait_until(lambda: sum(1 for x in ran(r, "echo") if x[0] == "after") == 12, message="the later jobs")
    assert ["while paused"] not in ran(r, "echo") and Queue("default", client).find_job(jid) is not None
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ["while paused"] in ran(r, "echo"), 15, message="the job after unpause")


def test_a_worker_whose_every_queue_is_paused_idles_without_spinning(start, client, r):
    r.sadd("sidequest:paused", "default")
    launcher = start(concurrency=2, fetch="basic")
    client.push(echo, ["held"])
    beats(r, launcher.identity, 2)  # every processor has looked at the queues again since
    assert not ran(r) and r.llen("queue:default") == 1 and launcher.runners[0].alive() == 2
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ran(r, "echo") == [["held"]], 15)


class Highest(random.Random):
    """A random source whose `random()` is always at the top of its range: the shortest wait."""

    def random(self) -> float:
        return 1.0


@pytest.mark.parametrize("fetch", ["basic", "reliable"])
def test_an_idle_blocking_fetch_times_out_after_a_random_share_of_its_bound(config, r, fetch):
    """Issue 41 item 2: every idle processor blocked for the same second, so a process's
    processors woke together, handing the GIL round just as a job could arrive. Each blocking
    fetch now ends after 75-100% of the bound, drawn from the fetch's random source."""
    waits = [blocking_wait(1.0, random.Random(seed)) for seed in range(20)]
    assert all(0.75 <= wait <= 1.0 for wait in waits) and max(waits) - min(waits) > 0.1
    setting = config.replace(fetch=fetch, fetch_timeout=1.0)
    scripts = Scripts(r)
    taker = build_fetch(setting, r, "host:1:jitter", scripts)
    taker.rng = Highest()
    sent: list[str] = []
    # what the fetch asked Redis for, read from Redis: a wall clock's upper bound is the machine's
    with r.monitor() as watch:
        began = time.monotonic()
        assert taker.retrieve_work() is None  # nothing queued: one blocking fetch, to its timeout
        waited = time.monotonic() - began
        for seen in watch.listen():
            if seen["command"].lower().startswith(("blmove", "brpop")):
                sent.append(seen["command"])
                break
    assert sent and sent[0].split()[-1] in {"0.75", '"0.75"'}, sent  # 0.75 s, not the full second
    assert waited > 0.7  # and Redis held it that long

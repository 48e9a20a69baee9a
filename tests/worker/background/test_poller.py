"""The poller: due jobs move atomically, promptly, and without hammering Redis."""

import json
import threading
import time

from conftest import wait_until
from helpers import queue_items, ran
from jobs_for_tests import echo, stamp

from sidequest.worker.background.poller import Poller
from sidequest.worker.launcher import Launcher


def test_due_jobs_move_to_their_queue_with_a_fresh_enqueued_at(config, client, r):
    jid = client.push(echo, ["soon"], in_=60)
    client.push(echo, ["later"], in_=3600)
    clock = [time.time() + 61]
    poller = Poller(config, r, clock=lambda: clock[0])
    assert poller.enqueue_due() == 1
    [p] = queue_items(r)
    assert p["jid"] == jid and p["enqueued_at"] == clock[0] and "at" not in p
    assert r.zcard("schedule") == 1 and r.smembers("queues") == {b"default"}


def test_retry_set_is_polled_too(config, client, r):
    r.zadd("retry", {json.dumps({"class": "Echo", "args": [1], "jid": "a" * 24, "queue": "q2",
                                 "retry_count": 0}): time.time() - 1})
    assert Poller(config, r).enqueue_due() == 1
    assert queue_items(r, "q2")[0]["retry_count"] == 0 and r.zcard("retry") == 0


def test_many_pollers_racing_move_each_job_exactly_once(config, client, r):
    jids = client.push_bulk(echo, [[i] for i in range(600)], at=time.time() + 30)

    def clock() -> float:
        return time.time() + 31

    pollers = [Poller(config, r.__class__.from_url(config.url), clock=clock) for _ in range(4)]
    threads = [threading.Thread(target=p.enqueue_due) for p in pollers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    moved = [p["jid"] for p in queue_items(r)]
    assert sorted(moved) == sorted(jids) and r.zcard("schedule") == 0


def test_a_malformed_scheduled_entry_does_not_stall_the_poller(config, client, r):
    r.zadd("schedule", {b"\xffnot json": time.time() - 5})
    jid = client.push(echo, [1], at=time.time() + 30)
    Poller(config, r, clock=lambda: time.time() + 31).enqueue_due()
    assert r.zcard("schedule") == 0
    items = r.lrange("queue:default", 0, -1)
    assert b"\xffnot json" in items  # unchanged; the processor files it in the dead set
    assert any(json.loads(x)["jid"] == jid for x in items if x.startswith(b"{"))


def test_wait_is_until_the_next_due_job_but_capped(config, client, r):
    poller = Poller(config.replace(poll_interval=1.0), r)
    assert 0.8 <= poller.next_wait() <= 1.0  # nothing scheduled: the cap
    client.push(echo, [1], in_=0.3)
    assert poller.next_wait() <= 0.3


def test_a_scheduled_job_starts_within_a_second_of_its_time(config, client, r, monkeypatch, redis_url):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launcher = Launcher(config.replace(poll_interval=1.0))
    launcher.run()
    try:
        due = time.time() + 1.5
        client.push(stamp, ["on time"], at=due)
        [[label, started]] = wait_until(lambda: ran(r, "stamp"), 30, message="the scheduled job to run")
        assert label == "on time"
        assert due <= started < due + 1.0
    finally:
        launcher.stop()

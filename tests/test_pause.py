"""A paused queue (`sidequest:paused`) is skipped by every running worker within about a second."""

import time

from conftest import wait_until
from helpers import ran
from jobs_for_tests import echo


def test_a_running_worker_honours_pause_and_unpause(start, client, r):
    start(concurrency=3, queues=("default", "other"))
    client.push(echo, ["before"])
    wait_until(lambda: ran(r, "echo") == [["before"]])
    r.sadd("sidequest:paused", "default")
    time.sleep(1.5)  # the pause takes effect within about a second, even for a fetch already blocked
    client.push(echo, ["while paused"])
    client.push(echo, ["other queue"], queue="other")
    wait_until(lambda: ["other queue"] in ran(r, "echo"), message="the unpaused queue still works")
    time.sleep(1.0)
    assert ["while paused"] not in ran(r, "echo") and r.llen("queue:default") == 1
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ["while paused"] in ran(r, "echo"), 5, message="the job after unpause")


def test_a_worker_whose_every_queue_is_paused_idles_without_spinning(start, client, r):
    r.sadd("sidequest:paused", "default")
    launcher = start(concurrency=2, fetch="basic")
    client.push(echo, ["held"])
    time.sleep(1.5)
    assert not ran(r) and r.llen("queue:default") == 1 and launcher.manager.alive() == 2
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ran(r, "echo") == [["held"]], 5)

"""A paused queue (`sidequest:paused`) is skipped by every running worker within about a second."""

import time

from conftest import wait_until
from helpers import pause_seen, push_fillers, ran
from jobs_for_tests import echo

from sidequest.api import Queue


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
    time.sleep(1.0)  # give a worker the chance to take it, if it were going to
    assert ["while paused"] not in ran(r, "echo") and Queue("default", client).find_job(jid) is not None
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ["while paused"] in ran(r, "echo"), 15, message="the job after unpause")


def test_a_worker_whose_every_queue_is_paused_idles_without_spinning(start, client, r):
    r.sadd("sidequest:paused", "default")
    launcher = start(concurrency=2, fetch="basic")
    client.push(echo, ["held"])
    time.sleep(1.5)
    assert not ran(r) and r.llen("queue:default") == 1 and launcher.manager.alive() == 2
    r.srem("sidequest:paused", "default")
    wait_until(lambda: ran(r, "echo") == [["held"]], 15)

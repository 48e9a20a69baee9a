"""A paused queue (`sidequest:paused`) is skipped by every running worker within about a second."""


from conftest import wait_until
from helpers import beats, pause_seen, push_fillers, ran
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

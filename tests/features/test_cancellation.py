"""`sidequest.cancel(jid)`: a waiting job is removed and never runs; a running one is asked to
stop, and stops at its next `sidequest.cancelled()`, ending as cancelled rather than failed."""

from __future__ import annotations

import json
import time

from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import cooperative, echo

import sidequest
from sidequest import Task, cancel, cancelled
from sidequest.features.cancellation import CHECK_EVERY, FLAG_TTL


def marker_runs(client, r, tag: str, in_: float | None = None) -> None:
    """Push an Echo (due `in_` s from now) and wait for it to run: jobs due before it (and
    queued before it) have had their turn by then."""
    client.push(echo, [tag], in_=in_)
    wait_until(lambda: [tag] in ran(r, "echo"), 15, 0.05, f"the {tag} marker to run")


def test_a_queued_job_is_removed_and_never_runs(start, client, r):
    keep = client.push(echo, ["before"])
    jid = client.push(echo, ["cancelled"])
    client.push(echo, ["after"], queue="other")
    assert cancel(jid, client) is True
    assert [json.loads(x)["jid"] for x in r.lrange("queue:default", 0, -1)] == [keep]
    assert cancel(jid, client) is False  # gone: nothing left to cancel
    start(queues=("default", "other"))
    marker_runs(client, r, "marker")
    assert ["cancelled"] not in ran(r, "echo") and ["before"] in ran(r, "echo")


def test_a_scheduled_job_is_removed_and_never_runs(start, client, r):
    jid = client.push(echo, ["scheduled"], in_=1)
    assert r.zcard("schedule") == 1
    assert cancel(jid, client) is True
    assert r.zcard("schedule") == 0
    start()
    marker_runs(client, r, "marker", in_=1.5)  # due after it, so it would have run first
    assert ["scheduled"] not in ran(r, "echo")


def test_a_retrying_job_is_removed_and_never_runs(start, client, r):
    payload = {"class": "Echo", "args": ["retrying"], "queue": "default", "jid": "ab" * 12, "retry": True,
               "created_at": time.time(), "failed_at": time.time(), "retry_count": 0,
               "error_class": "ValueError", "error_message": "x"}
    other = dict(payload, jid="cd" * 12, args=["other", "ab" * 12])  # names the jid in its args only
    r.zadd("retry", {json.dumps(payload): time.time() + 0.5, json.dumps(other): time.time() + 60})
    assert cancel("ab" * 12, client) is True
    assert [json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)] == ["cd" * 12]
    start()
    marker_runs(client, r, "marker", in_=1.0)
    assert ["retrying"] not in ran(r, "echo")


def test_an_unknown_jid_is_not_found(client, r):
    client.push(echo, ["x"])
    assert cancel("0" * 24, client) is False
    assert cancel("", client) is False
    assert r.llen("queue:default") == 1
    assert not r.exists("sidequest:cancel:" + "0" * 24)


def test_a_running_job_stops_at_its_next_check_and_ends_as_cancelled(start, client, r):
    launcher = start(concurrency=2)
    jid = client.push(cooperative, ["long"])
    wait_until(lambda: ran(r, "coop-start"), 30, 0.02, "the job to start")
    assert cancel(jid, client) is True
    flagged = time.monotonic()
    assert 0 < r.ttl(f"sidequest:cancel:{jid}") <= FLAG_TTL
    wait_until(lambda: ran(r, "coop-cancelled"), 15, 0.02, "the job to see it was cancelled")
    [[_, _, last_clear]] = ran(r, "coop-cancelled")
    # every check from then on saw it: late by the cache's age at most (None: the first check did)
    assert last_clear is None or last_clear < flagged + CHECK_EVERY
    assert not ran(r, "coop-done")
    wait_until(lambda: not reserved(r, launcher.identity), 15, 0.05, "the job to be acknowledged")
    launcher.stop()
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.llen("queue:default") == 0
    assert int(r.get("stat:failed") or 0) == 0 and int(r.get("stat:processed")) == 1


def test_a_running_job_under_basic_fetch_is_found_through_its_process(start, client, r):
    start(concurrency=1, fetch="basic", heartbeat_interval=0.1)
    jid = client.push(cooperative, ["basic"])
    wait_until(lambda: ran(r, "coop-start"), 30, 0.02, "the job to start")
    wait_until(lambda: cancel(jid, client), 15, 0.05, "the heartbeat to show the job running")
    wait_until(lambda: ran(r, "coop-cancelled"), 15, 0.02, "the job to see it was cancelled")


def test_a_cancelled_task_job_ends_the_task_with_an_error_event(client, r):
    task = Task.create("cancel me", client=client)
    jid = task.add(echo, "in a task")
    task.seal()
    assert cancel(jid, client) is True
    events = Task.find(task.id, client).events()
    assert events[0]["status"] == "error" and events[0]["messages"][-1]["text"] == "cancelled"
    assert Task.find(task.id, client).status()["done"]


def test_cancelled_is_false_outside_a_job():
    assert cancelled() is False
    assert issubclass(sidequest.Cancelled, sidequest.SidequestError)


def test_cancel_finds_a_job_in_the_lane_of_one_of_5000_held_groups_and_keeps_the_counts_true(client, r):
    from store.lanes.test_lua import hold

    from sidequest.api import pause_group
    from sidequest.store.lanes import WAITING_PAGE, LaneKeys

    hold(r, "default", 5_000)  # 5,000 paused groups, walked a page of groups at a time
    pause_group("default", "late", client=client)
    jids = [client.push(echo, [n], group="late") for n in range(2)]
    lane = LaneKeys(client.keys.lanes("default"))
    assert 2 * WAITING_PAGE < 5_000 and r.llen(lane.lane(5, "late")) == 2 and r.llen("queue:default") == 0
    assert cancel(jids[1], client=client) is True
    assert r.llen(lane.lane(5, "late")) == 1 and r.hget(lane.waiting, "late") == b"1"
    assert cancel(jids[0], client=client) is True
    assert r.hget(lane.waiting, "late") is None and r.zscore(lane.held(5), "late") is None
    assert r.zcard(lane.held(5)) == 5_000 and r.hlen(lane.waiting) == 5_000
    assert cancel(jids[0], client=client) is False  # gone: found nowhere

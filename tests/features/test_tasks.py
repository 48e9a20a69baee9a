"""Tasks: events per job, the tracking semantics, callbacks exactly once, status for front ends."""

import json
import time

import pytest
from conftest import STARTUP, wait_until
from helpers import WorkerProcess, ran
from jobs_for_tests import (
    AlwaysBroken,
    FlakyOnce,
    blocker,
    noop,
    on_complete,
    on_success,
    signup,
)

from sidequest import Task
from sidequest.features import tasks


def test_create_add_and_read_before_any_worker(client, r):
    task = Task.create("sign up 3 products", meta={"seller": 42}, client=client)
    jids = task.add_bulk(signup, [[1], [2]])
    jid3 = task.add(signup.set(queue="signups"), 3)
    found = Task.find(task.id, client=client)
    status = found.status()
    assert status["name"] == "sign up 3 products" and status["meta"] == {"seller": 42}
    assert status["total"] == 3 and status["counts"]["enqueued"] == 3 and status["percent"] == 0.0
    assert status["done"] is False and status["sealed"] is False and status["completed_at"] is None
    events = found.events()
    assert [e["jid"] for e in events] == [*jids, jid3]
    assert events[0]["params"] == [1] and events[0]["status"] == "enqueued" and events[0]["messages"] == []
    payload = json.loads(r.lrange("queue:signups", 0, -1)[0])
    assert payload["task_id"] == task.id and payload["jid"] == jid3
    assert Task.find("0" * 24, client=client) is None
    with pytest.raises(ValueError, match="status must be one of"):
        found.events(status="lost")


def test_finished_failed_and_messages(start, client, r):
    task = Task.create("signups", client=client, on_complete=on_complete, on_success=on_success)
    task.add_bulk(signup, [[1], [2], [3], [4], [5], [6]])
    task.seal()
    start()
    wait_until(lambda: Task.find(task.id, client=client).status()["done"], message="the task to complete")
    status = task.status()
    assert status["counts"] == {"enqueued": 0, "working": 0, "finished": 4, "failed": 2, "error": 0}
    assert status["percent"] == 100.0 and status["completed_at"] >= status["created_at"]
    failed = task.events(status="failed")
    assert [e["params"] for e in failed] == [[3], [6]]
    assert failed[0]["error_class"] == "sidequest.errors.JobFailed"
    assert "seller is not qualified" in failed[0]["error_message"]
    assert failed[0]["messages"][-1]["text"].startswith("failed: product 3")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # business failures are not retried
    done = task.events(status="finished")[0]
    texts = [m["text"] for m in done["messages"]]
    assert texts == ["working", "product 1 signed up", "finished"]
    assert done["progress"] == {"done": 1, "of": 1}
    assert done["started_at"] <= done["finished_at"]
    wait_until(lambda: ran(r, "on_complete"))
    assert ran(r, "on_complete") == [[task.id]] and ran(r, "on_success") == []


def test_error_with_retry_goes_back_to_enqueued_then_finishes(start, client, r):
    task = Task.create("flaky", client=client, on_success=on_success)
    task.add_bulk(FlakyOnce, [[7]])
    task.seal()
    start()
    wait_until(lambda: ran(r, "on_success"), message="on_success after the retry worked")
    [event] = task.events()
    texts = [m["text"] for m in event["messages"]]
    assert texts[0] == "working" and texts[1].startswith("error: ConnectionError: upstream hiccup 7; waiting for retry")
    assert texts[2:] == ["working", "finished"] and event["status"] == "finished"
    assert task.status()["counts"]["finished"] == 1


def test_error_without_retries_left_is_error_and_completes(start, client, r):
    task = Task.create("broken", client=client, on_complete=on_complete, on_success=on_success)
    task.add(AlwaysBroken)
    task.seal()
    start()
    wait_until(lambda: ran(r, "on_complete"))
    [event] = task.events(status="error")
    assert event["error_class"] == "RuntimeError" and event["messages"][-1]["text"].endswith("no retries left")
    assert r.zcard("dead") == 1 and ran(r, "on_success") == []


def test_unknown_job_in_a_task_ends_in_error(start, client, r):
    task = Task.create("typo", client=client, on_complete=on_complete)
    task.add("NotAJob", retry=0)
    task.seal()
    start()
    wait_until(lambda: ran(r, "on_complete"))
    assert task.status()["counts"]["error"] == 1


def test_seal_after_everything_ran_fires_callbacks_at_seal(start, client, r):
    task = Task.create("late seal", client=client, on_complete=on_complete, on_success=on_success)
    task.add_bulk(noop, [[1], [2]])
    start()
    wait_until(lambda: task.status()["counts"]["finished"] == 2)
    assert not task.status()["done"] and ran(r, "on_complete") == []
    task.seal()
    # two callback jobs, run in either order
    wait_until(lambda: ran(r, "on_success") and ran(r, "on_complete"), message="both callbacks")
    assert ran(r, "on_complete") == ran(r, "on_success") == [[task.id]] and task.status()["done"]


def test_created_tasks_are_listed_newest_first(client, r):
    first = Task.create("first", client=client)
    second = Task.create("second <b>", meta={"n": 2}, client=client)
    second.add_bulk(noop, [[1], [2]])
    total, listed = Task.recent(client=client)
    assert total == 2 and [t["id"] for t in listed] == [second.id, first.id]
    assert listed[0] == second.status() and listed[0]["total"] == 2 and listed[1]["name"] == "first"
    total, listed = Task.recent(offset=1, limit=5, client=client)
    assert total == 2 and [t["id"] for t in listed] == [first.id]
    r.delete(f"sidequest:task:{first.id}")  # its records expired: it is listed as such, not dropped
    assert Task.recent(client=client)[1][1] == {"id": first.id, "expired": True}


def test_the_recent_tasks_index_is_bounded_by_count_and_age(client, r):
    index = "sidequest:tasks"
    now = time.time()
    r.zadd(index, {f"old-{i}": now - 100 - i for i in range(tasks.RECENT_LIMIT)})
    r.zadd(index, {"ancient": now - tasks.RECENT_AGE - 60})
    kept = Task.create("the newest", client=client)
    assert r.zcard(index) == tasks.RECENT_LIMIT  # the oldest went, in the call that created the task
    assert r.zscore(index, kept.id) is not None and r.zscore(index, "ancient") is None
    assert r.zscore(index, f"old-{tasks.RECENT_LIMIT - 1}") is None and r.zscore(index, "old-0") is not None


def test_completed_task_expires_after_retention(start, client, r):
    task = Task.create("short-lived", client=client, retention=120)
    task.add(noop, 1)
    task.seal()
    start(task_retention=120)
    wait_until(lambda: task.status()["done"])
    for key in r.scan_iter(f"sidequest:task:{task.id}*"):
        assert 0 < r.ttl(key) <= 120, key


def task_ttls(r, task) -> dict[str, int]:
    return {key.decode(): r.ttl(key) for key in r.scan_iter(f"sidequest:task:{task.id}*")}


def test_a_task_never_sealed_expires_after_its_ttl(client, r):
    task = Task.create("abandoned", client=client, ttl=1)
    task.add_bulk(noop, [[1], [2]])
    assert set(task_ttls(r, task).values()) == {1}
    wait_until(lambda: Task.find(task.id, client=client) is None, 5, message="the abandoned task to expire")
    assert task_ttls(r, task) == {}
    with pytest.raises(LookupError, match="does not exist"):
        task.seal()  # and sealing it does not bring back a record that would never expire
    assert not r.exists(f"sidequest:task:{task.id}")


def test_every_change_keeps_an_unfinished_task_for_task_ttl(client, r, start):
    assert client.config.task_ttl == 7 * 24 * 3600
    task = Task.create("refreshed", client=client)
    task.add(noop, 1)
    for key in task_ttls(r, task):
        r.expire(key, 60)  # as if the task had last changed nearly task_ttl ago
    start(task_ttl=500)
    wait_until(lambda: task.status()["counts"]["finished"] == 1)
    ttls = task_ttls(r, task)  # the `finished` index is new: it expires with the others
    assert f"sidequest:task:{task.id}:status:finished" in ttls and all(490 < t <= 500 for t in ttls.values())
    task.seal()  # completes: the retention time replaces it
    assert all(0 < t <= task.retention for t in task_ttls(r, task).values())


def test_a_job_scheduled_past_the_ttl_keeps_its_task(client, r):
    task = Task.create("far ahead", client=client, ttl=100)
    task.add(noop, 1, in_=10_000)
    task.add(noop, 2)  # a later add never shortens it
    assert all(10_090 < t <= 10_100 for t in task_ttls(r, task).values())


def test_interrupted_job_is_error_then_enqueued_again(redis_url, r, client):
    task = Task.create("interrupted", client=client)
    task.add(blocker, "never-set")
    task.seal()
    w = WorkerProcess(redis_url, "-t", "0.5")
    try:
        w.wait_registered(r)
        wait_until(lambda: task.status()["counts"]["working"] == 1)
        wait_until(lambda: ran(r, "blocker-start"), message="the job to be running, not just taken")
    finally:
        out = w.stop()
    [event] = task.events()
    assert event["status"] == "enqueued", (event, out)
    assert event["messages"][-1]["text"] == "error: interrupted by shutdown; requeued"
    assert task.status()["counts"] == {"enqueued": 1, "working": 0, "finished": 0, "failed": 0, "error": 0}


def test_callbacks_fire_exactly_once_across_processes(redis_url, r, client):
    task = Task.create("many", client=client, on_complete=on_complete, on_success=on_success)
    task.add_bulk(noop, [[i] for i in range(600)])
    task.seal()
    workers = [WorkerProcess(redis_url, "-c", "5") for _ in range(3)]
    try:
        wait_until(lambda: task.status()["done"], 2 * STARTUP, message="600 jobs over 3 processes")  # as they start
        wait_until(lambda: ran(r, "on_success") and ran(r, "on_complete"))
    finally:
        for w in workers:
            w.stop()  # each finishes its running jobs first: a duplicate callback would have run, or wait
    assert ran(r, "on_complete") == [[task.id]] and ran(r, "on_success") == [[task.id]]
    assert r.llen("queue:default") == 0 and r.zcard("schedule") == 0 and r.zcard("retry") == 0
    status = task.status()
    assert status["counts"]["finished"] == 600 and sum(status["counts"].values()) == 600
    assert len(task.events(status="finished", limit=1000)) == 600
    assert [e["params"] for e in task.events(offset=100, limit=3)] == [[100], [101], [102]]


def test_http_api_serves_status_and_events(client, r):
    from starlette.testclient import TestClient

    from sidequest.features.tasks.http import tasks_app

    task = Task.create("http", client=client, meta={"who": "<script>"})
    task.add_bulk(signup, [[1], [2], [3]])
    http = TestClient(tasks_app(client))
    body = http.get(f"/tasks/{task.id}").json()
    assert body["id"] == task.id and body["total"] == 3 and body["meta"] == {"who": "<script>"}
    listed = http.get(f"/tasks/{task.id}/events", params={"status": "enqueued", "offset": 1, "limit": 1}).json()
    assert [e["params"] for e in listed["events"]] == [[2]]
    assert http.get("/tasks/ffffffffffffffffffffffff").status_code == 404
    assert http.get("/tasks/ffffffffffffffffffffffff/events").status_code == 404
    bad = http.get(f"/tasks/{task.id}/events", params={"status": "nope"})
    assert bad.status_code == 400 and "status must be one of" in bad.json()["error"]
    assert http.get(f"/tasks/{task.id}/events", params={"limit": "x"}).status_code == 400


def test_a_payload_naming_a_task_it_was_not_added_to_changes_nothing(start, client, r):
    """Issue 28 item 11: `task_id` steers the task feature; a push cannot set it (see
    jobs/test_definition), and a job another producer wrote naming a task, with a jid the task
    did not add, changes none of its counts and completes nothing."""
    import sidequest

    task = Task.create("one job", client=client, on_complete=on_complete)
    task.add(blocker, "test:task:held")  # its one job waits, so the task cannot complete meanwhile
    task.seal()
    forged = "f" * 24
    r.lpush("queue:default", json.dumps({"class": "Noop", "args": [], "queue": "default", "jid": forged,
                                         "retry": False, "result_ttl": 60, "task_id": task.id,
                                         "created_at": 1.0, "enqueued_at": 1.0}))
    start()
    wait_until(lambda: sidequest.status(forged, client=client) == "done", STARTUP, 0.05, "the forged job")
    status = task.status()
    assert status["total"] == 1 and status["counts"]["finished"] == 0 and not status["done"]
    assert forged not in [e["jid"] for e in task.events()] and ran(r, "on_complete") == []
    r.lpush("test:task:held", "go")
    wait_until(lambda: task.status()["done"], STARTUP, 0.05, "the task to complete")
    assert task.status()["counts"]["finished"] == 1

"""Expiring jobs (`expires_in`, Sidekiq Pro's option): the push stores the deadline, a worker
drops a job taken after it, unstarted, with one log line, and counts it per job."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
from conftest import wait_until
from helpers import ran, zset_items
from jobs_for_tests import FastBoom, echo
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from sidequest import Client, JobArgumentError
from sidequest.api import MetricsQuery
from sidequest.features.job_metrics import read
from sidequest.jobs.payload import overdue
from sidequest.web import create_app


def queued(r, queue: str = "default") -> list[dict]:
    return [json.loads(raw) for raw in r.lrange(f"queue:{queue}", 0, -1)]


def test_the_push_stores_the_deadline_from_the_jobs_own_time(client, r):
    now = time.time()
    client.push(echo, [1], expires_in=60)
    client.push(echo, [2], expires_in=timedelta(minutes=5))
    client.push(echo, [3], in_=3600, expires_in=60)  # scheduled: an hour and a minute from now
    echo.set(client=client, expires_in=60).set(expires_in=None).perform_async(4)  # off for one push
    first, second, off = queued(r)[::-1]
    assert first["expires_in"] == 60 and first["expires_at"] == pytest.approx(first["created_at"] + 60)
    assert second["expires_in"] == 300.0 and second["expires_at"] == pytest.approx(now + 300, abs=5)
    assert "expires_at" not in off
    [(later, at)] = zset_items(r, "schedule")
    assert later["expires_at"] == pytest.approx(at + 60)


@pytest.mark.parametrize("bad", [0, -1, 2_000_000_000, "1h", float("nan"), timedelta(0), True])
def test_a_deadline_that_is_not_a_duration_is_refused(client, r, bad):
    with pytest.raises(JobArgumentError, match="option 'expires_in' must be a duration"):
        client.push(echo, [1], expires_in=bad)
    assert r.dbsize() == 0


def test_a_deadline_is_read_in_seconds_or_milliseconds():
    assert overdue({"expires_at": 1_000.0}, 1_005.0) == 5.0
    assert overdue({"expires_at": 1_700_000_000_000}, 1_700_000_002.0) == 2.0  # Sidekiq 8's unit
    assert overdue({"expires_at": 1_000.0}, 999.0) is None and overdue({}, 1e12) is None


def test_a_job_taken_after_its_deadline_is_dropped_unstarted_and_counted(start, config, client, r, caplog):
    caplog.set_level(logging.INFO, logger="sidequest")
    # pushed a minute ago, by a producer's clock, with ten seconds to start: past its deadline
    stale = Client(config, clock=lambda: time.time() - 60).push(echo, ["stale"], expires_in=10)
    client.push(echo, ["fresh"], expires_in=3600)
    start()
    wait_until(lambda: ran(r, "echo") == [["fresh"]], message="the fresh job to run")
    found = wait_until(lambda: (m := read(r, minutes=5)).get("Echo") and m["Echo"].expired == 1 and m,
                       message="the expired job counted")
    assert found["Echo"].runs == 1 and MetricsQuery(client).for_job("Echo", 5).expired == 1
    assert ran(r, "echo") == [["fresh"]] and r.llen("queue:default") == 0 and r.zcard("dead") == 0
    lines = [rec.getMessage() for rec in caplog.records if stale in rec.getMessage()]
    assert len(lines) == 1 and "Echo" in lines[0] and "expired" in lines[0] and "dropped" in lines[0]
    http = TestClient(create_app(client))
    scraped = {f.name: f.samples for f in text_string_to_metric_families(http.get("/metrics").text)}
    [sample] = [s for s in scraped["sidequest_job_expired"] if s.labels["job"] == "Echo"]
    assert sample.name == "sidequest_job_expired_total" and sample.value == 1


def test_a_retry_due_after_the_deadline_is_dropped(start, client, r):
    """The deadline is the job's, not one attempt's: a retry that comes too late does not run."""
    start()
    jid = FastBoom.set(client=client, expires_in=0.3, retry=5).perform_async("late")  # retries 50 ms apart
    wait_until(lambda: (m := read(r, minutes=5).get("FastBoom")) is not None and m.expired == 1,
               message="the late retry dropped and counted")
    runs = ran(r, "fastboom")
    assert jid is not None and 1 <= len(runs) < 6  # dropped before its retries ran out
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.llen("queue:default") == 0


def test_an_expired_task_job_ends_its_event_with_the_reason(start, config, r):
    from sidequest import Task

    stale = Client(config, clock=lambda: time.time() - 60)  # the push happened a minute ago
    task = Task.create("digest", client=stale)
    task.add(echo, "digest", expires_in=10)
    task.seal()
    start()
    [event] = wait_until(lambda: task.events(status="error"), message="the expired job's event")
    assert "expired: not started before its deadline" in json.dumps(event), event
    assert ran(r, "echo") == [] and task.status()["done"]

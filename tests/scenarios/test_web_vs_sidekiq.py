"""The dashboard and Sidekiq's Web UI show the same numbers for one Redis.

Sidekiq's Web UI renders `Sidekiq::Stats`, `Queue`, `ProcessSet` and `Workers` (tests/ruby/api.rb
calls exactly those); the dashboard renders `/api/stats`. Both are read from one Redis holding
real work: done and failed jobs, retries, dead and scheduled jobs, queued jobs and a busy worker.
"""

from __future__ import annotations

from conftest import wait_until
from helpers import fetches_blocked, ran
from jobs_for_tests import FastBoom, boom, echo, work
from ruby_peer import ruby_api
from starlette.testclient import TestClient

from sidequest.web import create_app


def test_the_dashboard_and_sidekiqs_api_agree(ruby, start, client, r, redis_url):
    launcher = start(concurrency=2, queues=("default", "slow"))
    client.push_bulk(echo, [[n] for n in range(5)])
    client.push(FastBoom, ["to dead"])
    client.push(boom, ["to retry"])
    wait_until(lambda: len(ran(r, "echo")) == 5 and r.zcard("dead") == 1 and r.zcard("retry") == 1)
    client.push(work, [1, 30, "gate:compare"], queue="slow")  # keeps one processor busy
    wait_until(lambda: ran(r, "work-start"), message="the busy job")
    launcher.quiet()  # nothing else is taken: the queued jobs below stay queued
    wait_until(lambda: fetches_blocked(r) == 0, message="the fetches begun before the quiet to end")
    client.push_bulk(echo, [["queued"]] * 3)
    client.push(echo, ["later"], in_=3600)
    wait_until(lambda: int(r.get("stat:processed") or 0) >= 8, message="stats flushed by a beat")
    wait_until(lambda: r.hlen(f"{launcher.identity}:work") == 1, message="the busy job in the work hash")

    dashboard = TestClient(create_app(client))
    ours = dashboard.get("/api/stats").json()
    theirs = ruby_api(redis_url)  # seconds later on a busy machine: Ruby starts up first
    ours_after = dashboard.get("/api/stats").json()
    assert ours["processed"] == theirs["processed"] and ours["failed"] == theirs["failed"]
    assert ours["enqueued"] == theirs["enqueued"] == 3
    assert ours["retries"] == theirs["retry_size"] == 1 and ours["dead"] == theirs["dead_size"] == 1
    assert ours["scheduled"] == theirs["scheduled_size"] == 1
    assert ours["processes"] == theirs["processes_size"] == 1
    assert ours["busy"] == theirs["workers_size"] == 1
    assert {q["name"]: q["size"] for q in ours["queues"]} == {q["name"]: q["size"] for q in theirs["queues"]}
    # A queue's latency grows while the readers run, so Sidekiq's reading lies between ours
    # before and after it (give or take our rounding to the millisecond).
    theirs_latency = {q["name"]: q["latency"] for q in theirs["queues"]}
    after_latency = {q["name"]: q["latency"] for q in ours_after["queues"]}
    for queue in ours["queues"]:
        name = queue["name"]
        assert queue["latency"] - 0.01 <= theirs_latency[name] <= after_latency[name] + 0.01, (ours, theirs)
    r.set("gate:compare", 1)

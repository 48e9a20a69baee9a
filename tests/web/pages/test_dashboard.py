"""The Dashboard page over HTTP (Starlette's TestClient): the throughput and latency charts' history
on first paint, read from the per-minute metrics a real worker wrote to Redis."""

from __future__ import annotations

import json
import re

from helpers import waited_for_minutes, worked_for_minutes
from starlette.testclient import TestClient

from sidequest.features.job_metrics import JobMetricsFeature, minute_of
from sidequest.web import create_app
from sidequest.web.pages.dashboard import LATENCY_QUEUES, RATE_HISTORY
from sidequest.worker.outcome import Outcome


def served(client, name: str) -> tuple[str, object]:
    """The page's HTML and the JSON block `name` it was served with."""
    page = TestClient(create_app(client), headers={"Accept": "text/html"}).get("/")
    assert page.status_code == 200
    block = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', page.text, re.S)
    assert block, f"no #{name} block"
    return page.text, json.loads(block.group(1))


def test_the_first_paint_holds_the_minutes_the_workers_ran(config, client, r):
    """Issue 42 item 2: opened after workers ran for 10 minutes, the page carries those 10 minutes'
    runs and failures, per minute, in its first HTML, for the throughput chart to start from."""
    expected = worked_for_minutes(config, client, r, minutes=10)
    text, history = served(client, "rate-history")
    assert "last hour (per minute, then live)" in text
    assert len(history) == RATE_HISTORY  # the finished minutes of the last hour, oldest first
    assert [row[0] for row in history] == sorted(row[0] for row in history)
    ran = [row for row in history if row[1]]
    assert [tuple(row) for row in ran] == expected  # exactly the worker's minutes: runs and failures
    assert sum(row[2] for row in ran) == 4  # minutes 0, 3, 6 and 9 each had one failure


def test_with_no_job_in_the_hour_the_chart_starts_live_and_the_history_stays_escaped_and_bounded(client, r):
    _, history = served(client, "rate-history")
    assert history == []  # no run in the hour: the chart shows the last 5 minutes as readings come in
    at = client.clock() - 120
    feature = JobMetricsFeature(clock=lambda: at)  # two minutes ago, a job name holding markup
    feature.observe("finished", {"class": "</script><script>alert(1)</script>"}, Outcome.done(0.01))
    pipe = r.pipeline()
    JobMetricsFeature.write(pipe, feature.take())
    pipe.execute()
    text, history = served(client, "rate-history")
    assert "<script>alert(1)" not in text  # names never reach the block: only times and counts
    assert len(history) == RATE_HISTORY and [row[1] for row in history].count(1) == 1
    assert next(row for row in history if row[1])[0] == float(int(at) // 60 * 60)
    assert minute_of(history[-1][0]) < minute_of(client.clock())  # the current minute is the live part


def test_a_live_refresh_reads_no_history_and_keeps_what_the_first_paint_drew(client, r):
    """The page refreshes its content every poll (`X-Sidequest-Fragment`); the chart and its
    caption are kept from the first paint, so the refresh does not read the hour's minutes again."""
    http = TestClient(create_app(client), headers={"Accept": "text/html"})
    http.get("/")  # the first paint: its reads, once

    def hgetalls(command: str = "hgetall") -> int:
        return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))
    before, zranges = hgetalls(), hgetalls("zrange")
    fragment = http.get("/", headers={"X-Sidequest-Fragment": "1"})
    assert fragment.status_code == 200 and 'id="chart-rate-span" data-keep' in fragment.text
    assert 'id="rate-history"' not in fragment.text and hgetalls() == before
    assert 'id="latency-history"' not in fragment.text and 'id="chart-latency-span" data-keep' in fragment.text
    assert hgetalls("zrange") == zranges  # nor each queue's waits
    served(client, "rate-history")  # a whole page reads the hour's minutes and the current one
    assert hgetalls() == before + RATE_HISTORY + 1 and hgetalls("zrange") == zranges + RATE_HISTORY + 1


def test_the_first_paint_holds_each_queues_longest_wait_per_minute(config, client, r):
    """Issue 42 item 2: the latency chart starts filled too. A real worker took jobs that had
    waited 20 s (default) and 3 s (mail), then 45 s (mail): the page carries those waits in the
    minutes the jobs started, per queue, the longest-waiting queue first, a gap (null) elsewhere."""
    found = waited_for_minutes(config, r, [{"default": 20.0, "mail": 3.0}, {"mail": 45.0}])
    text, latency = served(client, "latency-history")
    assert "data-keep>age of each queue's oldest job, last hour (per minute, then live)" in text
    assert latency["queues"] == ["mail", "default"]  # 45 s is the hour's longest
    rows = latency["minutes"]
    assert len(rows) == RATE_HISTORY and [row[0] for row in rows] == sorted(row[0] for row in rows)
    waited = {row[0]: row[1:] for row in rows if row[1:] != [None, None]}
    (first, first_waits), (second, second_waits) = found
    assert waited == {first: [first_waits["mail"], first_waits["default"]], second: [second_waits["mail"], None]}
    assert 20 <= first_waits["default"] < 25 and 45 <= second_waits["mail"] < 50


def test_the_latency_history_is_empty_without_jobs_bounded_in_queues_and_escaped(client, r):
    _, latency = served(client, "latency-history")
    assert latency == {}  # no job started in the hour: the chart shows the last 5 minutes, live
    at = client.clock() - 120
    feature = JobMetricsFeature(clock=lambda: at)
    names = [f"q{n}" for n in range(LATENCY_QUEUES + 2)] + ["</script><script>alert(1)</script>"]
    for n, queue in enumerate(names):  # the markup queue waited longest
        feature.observe("finished", {"class": "J", "queue": queue, "enqueued_at": at - 1 - n}, Outcome.done(0.01))
    pipe = r.pipeline()
    JobMetricsFeature.write(pipe, feature.take())
    pipe.execute()
    text, latency = served(client, "latency-history")
    assert "<script>alert(1)" not in text  # tojson: the name is served as text, never as markup
    assert latency["queues"] == [names[-1], *reversed(names[-LATENCY_QUEUES:-1])]  # the longest waits only
    [row] = [row for row in latency["minutes"] if any(wait is not None for wait in row[1:])]
    assert len(row) == LATENCY_QUEUES + 1 and row[0] == float(int(at) // 60 * 60)
    assert all(wait is not None and wait > 0 for wait in row[1:])

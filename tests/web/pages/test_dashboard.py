"""The Dashboard page over HTTP (Starlette's TestClient): the throughput chart's history on first
paint, read from the per-minute metrics a real worker wrote to Redis."""

from __future__ import annotations

import json
import re

from helpers import worked_for_minutes
from starlette.testclient import TestClient

from sidequest.features.job_metrics import JobMetricsFeature, minute_of
from sidequest.web import create_app
from sidequest.web.pages.dashboard import RATE_HISTORY
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

    def hgetalls() -> int:
        return int(r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))
    before = hgetalls()
    fragment = http.get("/", headers={"X-Sidequest-Fragment": "1"})
    assert fragment.status_code == 200 and 'id="chart-rate-span" data-keep' in fragment.text
    assert 'id="rate-history"' not in fragment.text and hgetalls() == before
    served(client, "rate-history")  # a whole page reads the hour's minutes and the current one
    assert hgetalls() == before + RATE_HISTORY + 1

"""`sidequest stats --minutes N` (cli/admin/queues.py) in-process with click's CliRunner, on the
per-minute metrics a real worker wrote to Redis."""

from __future__ import annotations

import json
import re
import time

from helpers import cli_ok, waited_for_minutes, worked_for_minutes


def test_stats_minutes_prints_the_per_minute_history_the_dashboard_starts_from(cli, config, client, r):
    expected = worked_for_minutes(config, client, r, minutes=3)
    data = json.loads(cli_ok(cli("stats", "--json", "--minutes", "5")))
    minutes = data["minutes"]
    assert len(minutes) == 5  # the last 5 minutes, the current one last
    assert [(m["at"], m["runs"], m["failed"]) for m in minutes if m["runs"]] == expected
    assert all(m["total_ms"] > 0 for m in minutes if m["runs"])
    text = cli_ok(cli("stats", "--minutes", "5"))
    assert "MINUTE (UTC)" in text and "MEAN RUN TIME" in text
    lines = [line for line in text.splitlines() if re.match(r"\s*\d{4}-\d\d-\d\d \d\d:\d\d ", line)]
    assert len(lines) == 5
    ran = [line.split()[2:4] for line in lines if line.split()[2] != "0"]
    assert ran == [["2", "1"], ["2", "0"], ["3", "0"]]  # runs and failed in the worker's 3 minutes
    assert "MINUTE (UTC)" not in cli_ok(cli("stats"))  # only when asked


def test_stats_minutes_shows_the_longest_wait_of_each_minute_with_its_queue(cli, config, r):
    found = waited_for_minutes(config, r, [{"default": 12.0, "mail": 70.0}, {"default": 30.0}])
    data = json.loads(cli_ok(cli("stats", "--json", "--minutes", "4")))
    waited = {m["at"]: m["latency"] for m in data["minutes"] if m["latency"]}
    assert waited == dict(found)  # every queue's longest wait, in the minute its job started
    text = cli_ok(cli("stats", "--minutes", "4"))
    assert "LATENCY" in text
    rows = {}  # by the minute each row names: a minute that ends meanwhile shifts the window, not them
    for line in text.splitlines():
        if (label := re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line)) is not None:
            rows[label.group()] = line.rstrip(" │")
    mail, default = (time.strftime("%Y-%m-%d %H:%M", time.gmtime(at)) for at, _ in found)
    assert len(rows) == 4 and rows[mail].endswith(" 1m 10s (mail)") and rows[default].endswith(" 30s (default)"), rows
    assert all(line.endswith(" -") for label, line in rows.items() if label not in (mail, default))  # no job started


def test_stats_minutes_is_bounded_by_what_redis_keeps(cli):
    result = cli("stats", "--minutes", "4321")
    assert result.exit_code == 2 and "4321 is not in the range 1<=x<=4320" in result.output

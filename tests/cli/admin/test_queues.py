"""`sidequest stats --minutes N` (cli/admin/queues.py) in-process with click's CliRunner, on the
per-minute metrics a real worker wrote to Redis."""

from __future__ import annotations

import json
import re

from helpers import cli_ok, worked_for_minutes


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


def test_stats_minutes_is_bounded_by_what_redis_keeps(cli):
    result = cli("stats", "--minutes", "4321")
    assert result.exit_code == 2 and "4321 is not in the range 1<=x<=4320" in result.output

"""Malformed payloads in a queue: one clear log line, the dead set, and the worker keeps going."""

import json

import pytest

from conftest import wait_until
from helpers import ran, zset_items
from sidequest.launcher import Launcher

from jobs_for_tests import echo


@pytest.fixture
def launcher(config, monkeypatch, redis_url):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launcher = Launcher(config.replace(concurrency=1))
    launcher.run()
    yield launcher
    launcher.stop()


@pytest.mark.parametrize("raw, reason, annotated", [
    (b"{this is not json", "not valid JSON", False),
    (b"[1, 2, 3]", "JSON list, not an object", False),
    (b"\xff\xfe\x00garbage", "not UTF-8", False),
    (b'{"args": [1], "jid": "abc"}', "no 'class'", True),
    (b'{"class": "Echo", "jid": "abc"}', "no 'args'", True),
    (b'{"class": "Echo", "args": "nope", "jid": "abc"}', "'args' is a JSON str", True),
])
def test_malformed_payload_goes_to_dead_and_the_next_job_runs(launcher, client, r, caplog, raw, reason, annotated):
    r.lpush("queue:default", raw)
    client.push(echo, ["after the bad one"])
    wait_until(lambda: ran(r, "echo"), message="the good job after the bad one")
    [dead] = r.zrange("dead", 0, -1)
    if annotated:
        data = json.loads(dead)
        original = json.loads(raw)
        assert {k: data[k] for k in original} == original  # everything it had, unchanged
        assert data["error_class"] == "sidequest.errors.PayloadError" and reason in data["error_message"]
    else:
        assert dead == raw  # not an object: kept byte for byte
    lines = [rec for rec in caplog.records if "is not a job" in rec.getMessage()]
    assert len(lines) == 1 and reason in lines[0].getMessage()
    wait_until(lambda: r.llen(f"sidequest:reserved:{launcher.identity}") == 0)
    assert r.llen("queue:default") == 0


def test_unknown_job_name_is_retried_then_runs_nothing(launcher, client, r):
    client.push("Nope.NotRegistered", [])
    client.push(echo, ["still working"])
    wait_until(lambda: ran(r, "echo"))
    wait_until(lambda: r.zcard("retry") == 1)
    [(p, _)] = zset_items(r, "retry")
    assert p["error_class"] == "sidequest.errors.UnknownJobError"

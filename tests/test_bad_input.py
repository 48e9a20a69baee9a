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


@pytest.mark.parametrize("raw, reason, kept", [
    (b"{this is not json", "not valid JSON", "raw"),
    (b"[1, 2, 3]", "JSON list, not an object", "wrapped"),
    (b"null", "JSON NoneType, not an object", "wrapped"),
    (b"\xff\xfe\x00garbage", "not UTF-8", "raw"),
    (b'{"args": [1], "jid": "abc"}', "no 'class'", "annotated"),
    (b'{"class": "Echo", "jid": "abc"}', "no 'args'", "annotated"),
    (b'{"class": "Echo", "args": "nope", "jid": "abc"}', "'args' is a JSON str", "annotated"),
])
def test_malformed_payload_goes_to_dead_and_the_next_job_runs(launcher, client, r, caplog, raw, reason, kept):
    r.lpush("queue:default", raw)
    client.push(echo, ["after the bad one"])
    wait_until(lambda: ran(r, "echo"), message="the good job after the bad one")
    [dead] = r.zrange("dead", 0, -1)
    if kept == "raw":
        assert dead == raw  # not JSON: kept byte for byte (Sidekiq's API shows it as invalid)
    else:
        data = json.loads(dead)
        assert data["error_class"] == "sidequest.errors.PayloadError" and reason in data["error_message"]
        if kept == "annotated":
            original = json.loads(raw)
            assert {k: data[k] for k in original} == original  # everything it had, unchanged
        else:  # JSON but not an object: wrapped so Sidekiq's DeadSet can read it, text kept exactly
            assert data["class"] == "sidequest.InvalidPayload" and data["args"] == [raw.decode()]
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

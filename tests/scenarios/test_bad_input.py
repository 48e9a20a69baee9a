"""Malformed payloads in a queue: one clear log line, the dead set, and the worker keeps going."""

import base64
import json

import pytest
from conftest import wait_until
from helpers import ran, reserved, zset_items
from jobs_for_tests import echo

from sidequest.worker.launcher import Launcher


@pytest.fixture
def launcher(config, monkeypatch, redis_url):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launcher = Launcher(config.replace(concurrency=1))
    launcher.run()
    yield launcher
    launcher.stop()


@pytest.mark.parametrize("raw, reason", [
    (b"{this is not json", "not valid JSON"),
    (b"[1, 2, 3]", "JSON list, not an object"),
    (b"null", "JSON NoneType, not an object"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b'{"args": [1], "jid": "abc"}', "no 'class'"),
    (b'{"class": "Echo", "jid": "abc"}', "no 'args'"),
    (b'{"class": "Echo", "args": "nope", "jid": "abc"}', "'args' is a JSON str"),
    (b'{"class": "Echo", "args": [], "kwargs": [1], "jid": "abc"}', "'kwargs' is a JSON list, not an object"),
    (b'{"class": "Echo", "args": [NaN], "jid": "abc"}', "NaN is not JSON"),
    (b'{"class": "Echo", "args": [1e999], "jid": "abc"}', "too large for a float"),
    (b'{"class": "Echo", "args": [' + b"9" * 5000 + b'], "jid": "abc"}', "not valid JSON"),
    (b'{"class": "Echo", "args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
])
def test_malformed_payload_goes_to_dead_and_the_next_job_runs(launcher, client, r, caplog, raw, reason):
    r.lpush("queue:default", raw)
    client.push(echo, ["after the bad one"])
    wait_until(lambda: ran(r, "echo"), message="the good job after the bad one")
    [dead] = r.zrange("dead", 0, -1)
    data = json.loads(dead)  # a wrapper Sidekiq's DeadSet reads, the original bytes inside, unchanged
    assert data["class"] == "sidequest.InvalidPayload" and data["retry"] is False
    assert data["error_class"] == "sidequest.errors.PayloadError" and reason in data["error_message"]
    if data.get("encoding") == "base64":
        assert base64.b64decode(data["args"][0]) == raw
    else:
        assert data["args"] == [raw.decode()]
    lines = [rec for rec in caplog.records if "is not a job" in rec.getMessage()]
    assert len(lines) == 1 and reason in lines[0].getMessage()
    wait_until(lambda: not reserved(r, launcher.identity))
    assert r.llen("queue:default") == 0


def test_unknown_job_name_is_retried_then_runs_nothing(launcher, client, r):
    client.push("Nope.NotRegistered", [])
    client.push(echo, ["still working"])
    wait_until(lambda: ran(r, "echo"))
    wait_until(lambda: r.zcard("retry") == 1)
    [(p, _)] = zset_items(r, "retry")
    assert p["error_class"] == "sidequest.errors.UnknownJobError"

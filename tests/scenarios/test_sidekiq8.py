"""Sidekiq 7/8 neighbours on one Redis.

Sidekiq 8 writes a payload's `created_at`, `enqueued_at`, `failed_at` and `retried_at` as
integer epoch milliseconds (Sidekiq 6/7: float epoch seconds) and tells the two apart by type;
the `schedule`, `retry` and `dead` scores stay float epoch seconds. sidequest reads both units,
adds failure and move times in the unit the payload already uses, and with
`sidekiq_version=8` writes milliseconds itself. The payloads below have the shape Sidekiq 8's
client pushes (its Job-Format wiki page; `Client#atomic_push` sets `enqueued_at` from
`CLOCK_REALTIME, :millisecond`): the job's options (`retry`, `queue`), `args`, `class`, `jid`,
`created_at`, then `enqueued_at`, as compact JSON, in the field order Sidekiq 6.4 also uses.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest
from conftest import wait_until
from helpers import queue_items, ran, zset_items
from jobs_for_tests import FastBoom, boom, echo  # importing registers Echo, Boom and FastBoom

from sidequest import Client, Config
from sidequest.errors import ConfigError
from sidequest.jobs.payload import epoch, in_millis, stamp
from sidequest.worker.background.poller import Poller
from sidequest.worker.retry import Retrier

JID = "0123456789abcdef01234567"


def millis(t: float | None = None) -> int:
    """Epoch milliseconds as Sidekiq 8's `Process.clock_gettime(CLOCK_REALTIME, :millisecond)`."""
    return int((time.time() if t is None else t) * 1000)


def sidekiq8_raw(klass: str, args: list, *, retry: object = True, queue: str = "default", jid: str = JID,
                 created_at: int | None = None, enqueued_at: int | None = None, scheduled: bool = False) -> str:
    """The exact text Sidekiq 8's client pushes (a scheduled job has no `enqueued_at`)."""
    created = millis() if created_at is None else created_at
    compact = json.dumps(args, separators=(",", ":"))
    text = (f'{{"retry":{json.dumps(retry)},"queue":{json.dumps(queue)},"args":{compact},'
            f'"class":{json.dumps(klass)},"jid":"{jid}","created_at":{created}')
    if not scheduled:
        text += f',"enqueued_at":{created + 1 if enqueued_at is None else enqueued_at}'
    return text + "}"


def push_raw(r, text: str, queue: str = "default") -> None:
    r.sadd("queues", queue)
    r.lpush(f"queue:{queue}", text)


def test_stamp_and_unit_detection():
    assert stamp(1700000000.1239, False) == 1700000000.1239
    assert stamp(1700000000.1239, True) == 1700000000123 and type(stamp(1.5, True)) is int
    assert in_millis({"created_at": 1700000000123}) and in_millis({"enqueued_at": 1700000000123})
    assert not in_millis({"created_at": 1700000000.123, "enqueued_at": 1700000000.5})
    assert not in_millis({"created_at": 1700000000})  # integer seconds are still seconds
    assert not in_millis({"created_at": True}) and not in_millis({})
    assert epoch(1700000000123) == pytest.approx(1700000000.123) and epoch(1700000000.5) == 1700000000.5


def test_sidekiq_version_setting():
    assert Config().sidekiq_version == 7
    for good in (6, 7, 8):
        assert Config(sidekiq_version=good).sidekiq_version == good
    for bad in (5, 9, True, 8.0, "8"):
        with pytest.raises(ConfigError, match="sidekiq_version"):
            Config(sidekiq_version=bad)
    assert Config.from_env({"SIDEQUEST_SIDEKIQ_VERSION": "8"}).sidekiq_version == 8


def test_sidekiq_version_from_yaml(tmp_path):
    path = tmp_path / "sidekiq.yml"
    path.write_text(":concurrency: 3\n:sidekiq_version: 8\n")
    assert Config.from_file(path).sidekiq_version == 8


def decide(payload: dict, config: Config | None = None):
    retrier = Retrier(config or Config(), clock=lambda: 1700000000.25, rng=random.Random(3))
    return retrier.decide(None, payload, json.dumps(payload).encode(), "default", ValueError("no"))


def test_failure_times_follow_the_payloads_unit_else_the_setting():
    ms_payload = json.loads(sidekiq8_raw("X", [1], created_at=1699999999000))
    filed = json.loads(decide(dict(ms_payload)).blob)  # default setting: the payload's unit wins
    assert filed["failed_at"] == 1700000000250 and type(filed["failed_at"]) is int
    again = json.loads(decide(filed).blob)
    assert again["retried_at"] == 1700000000250 and again["failed_at"] == 1700000000250
    floats = {"class": "X", "args": [], "jid": JID, "queue": "default", "retry": True,
              "created_at": 1699999999.5, "enqueued_at": 1699999999.5}
    assert json.loads(decide(dict(floats)).blob)["failed_at"] == 1700000000.25
    assert json.loads(decide(dict(floats), Config(sidekiq_version=6)).blob)["failed_at"] == 1700000000.25
    eight = decide(dict(floats), Config(sidekiq_version=8))
    assert json.loads(eight.blob)["failed_at"] == 1700000000250
    assert type(eight.at) is float and 1700000015 <= eight.at <= 1700000025  # the score: seconds


def test_a_sidekiq8_payload_runs_and_reaches_the_job_unchanged(config, start, r):
    seen = []

    class Capture:
        def __call__(self, job, payload, queue, call_next):
            seen.append(dict(payload))
            return call_next()

    config.server_middleware.add(Capture)
    text = sidekiq8_raw("Echo", ["from sidekiq 8", 1, {"k": [2.5, None]}])
    push_raw(r, text)
    launcher = start()
    wait_until(lambda: ran(r, "echo"), 30, message="the Sidekiq 8 job to run")
    assert ran(r, "echo") == [["from sidekiq 8", 1, {"k": [2.5, None]}]]
    assert seen == [json.loads(text)]
    assert all(type(seen[0][key]) is int for key in ("created_at", "enqueued_at"))
    # the process hash carries `concurrency` as its own field (Sidekiq 8.1.2+ reads it there)
    wait_until(lambda: r.hget(launcher.identity, "concurrency") == b"4", 15, message="concurrency field")
    assert json.loads(r.hget(launcher.identity, "info"))["concurrency"] == 4


def test_a_failing_sidekiq8_job_is_filed_in_its_own_unit(start, r):
    text = sidekiq8_raw("Boom", ["bad luck"])
    original = json.loads(text)
    before = time.time()
    push_raw(r, text)
    start()
    wait_until(lambda: r.zcard("retry") == 1, 30, message="the retry entry")
    after = time.time()
    [(entry, score)] = zset_items(r, "retry")
    for key, value in original.items():  # every field it came with, value and type, untouched
        assert entry[key] == value and type(entry[key]) is type(value), key
    assert set(entry) - set(original) == {"error_message", "error_class", "retry_count", "failed_at"}
    assert entry["error_class"] == "ValueError" and entry["retry_count"] == 0
    assert type(entry["failed_at"]) is int and millis(before) <= entry["failed_at"] <= millis(after) + 1
    # the score is float epoch seconds, Sidekiq's backoff for a first failure: 15 to 24 s
    assert before + 15 <= score <= after + 25


def test_a_sidekiq8_job_retried_to_death_keeps_milliseconds(start, r):
    text = sidekiq8_raw("FastBoom", ["three strikes"], retry=2)
    original = json.loads(text)
    start()
    before = time.time()
    push_raw(r, text)
    wait_until(lambda: r.zcard("dead") == 1, 15, message="the job in the dead set")
    after = time.time()
    assert [row[1] for row in ran(r, "fastboom")] == [None, 0, 1]
    [(dead, score)] = zset_items(r, "dead")
    assert dead["retry_count"] == 2 and dead["created_at"] == original["created_at"]
    for key in ("failed_at", "retried_at", "enqueued_at"):  # the poller's moves kept the unit too
        assert type(dead[key]) is int and millis(before) <= dead[key] <= millis(after) + 1, key
    assert dead["retried_at"] >= dead["failed_at"]
    assert isinstance(score, float) and before <= score <= after + 1


def test_a_scheduled_sidekiq8_job_is_moved_with_enqueued_at_in_milliseconds(config, r):
    text = sidekiq8_raw("Echo", ["later"], scheduled=True)
    r.zadd("schedule", {text: time.time() + 60})  # Sidekiq 8's score: float epoch seconds
    floats = json.dumps({"retry": True, "queue": "default", "args": ["six"], "class": "Echo", "jid": "f" * 24,
                         "created_at": time.time()})  # a Sidekiq 6/7 neighbour's
    r.zadd("schedule", {floats: time.time() + 60})
    clock = [time.time() + 61]
    assert Poller(config, r, clock=lambda: clock[0]).enqueue_due() == 2
    moved = {p["jid"]: p for p in queue_items(r)}
    assert moved[JID]["enqueued_at"] == int(clock[0] * 1000) and type(moved[JID]["enqueued_at"]) is int
    assert moved[JID]["created_at"] == json.loads(text)["created_at"]
    assert moved["f" * 24]["enqueued_at"] == clock[0]  # seconds stay seconds under the default setting


def test_sidekiq_version_8_poller_writes_milliseconds(config, r):
    floats = json.dumps({"retry": True, "queue": "default", "args": [], "class": "Echo", "jid": JID,
                         "created_at": time.time()})
    r.zadd("schedule", {floats: time.time() - 1})
    clock = [time.time()]
    assert Poller(config.replace(sidekiq_version=8), r, clock=lambda: clock[0]).enqueue_due() == 1
    [moved] = queue_items(r)
    assert moved["enqueued_at"] == int(clock[0] * 1000)


def test_sidekiq_version_8_client_writes_milliseconds_and_a_worker_runs_them(config, start, r):
    client = Client(config.replace(sidekiq_version=8))
    before = millis()
    client.push(echo, ["one"])
    client.push_bulk(echo, [["two"], ["three"]])
    client.push(echo, ["four"], in_=0.3)
    after = millis()
    raws = [raw.decode() for raw in r.lrange("queue:default", 0, -1)]
    assert len(raws) == 3
    for raw in raws:  # Sidekiq 8's text: integers, no decimal point
        assert re.search(r'"created_at":\d{13},"enqueued_at":\d{13}}$', raw), raw
        item = json.loads(raw)
        assert before <= item["created_at"] <= item["enqueued_at"] <= after
    [(scheduled, score)] = zset_items(r, "schedule")
    assert type(scheduled["created_at"]) is int and "enqueued_at" not in scheduled
    assert isinstance(score, float) and before / 1000 < score < after / 1000 + 1
    start(sidekiq_version=8)
    wait_until(lambda: len(ran(r, "echo")) == 4, 30, message="four jobs to run")
    assert sorted(row[0] for row in ran(r, "echo")) == ["four", "one", "three", "two"]

    client.push(FastBoom, ["eight"])
    wait_until(lambda: r.zcard("dead") == 1, 15, message="FastBoom in the dead set")
    [(dead, _)] = zset_items(r, "dead")
    assert all(type(dead[key]) is int for key in ("created_at", "enqueued_at", "failed_at", "retried_at"))


def test_sidekiq64_api_reads_default_format_entries(ruby, client, start, r, redis_url):
    """Under the default setting sidequest still writes what Sidekiq 6.4's API reads."""
    from ruby_peer import ruby_api

    before = time.time()
    start()
    client.push("Echo", ["waiting"], queue="elsewhere")  # a queue nobody works
    jid = client.push(boom, ["kaboom"])
    wait_until(lambda: r.zcard("retry") == 1, 30, message="Boom to be filed for retry")
    after = time.time()
    api = ruby_api(redis_url)
    [entry] = api["retries"]
    assert entry["jid"] == jid and entry["klass"] == "Boom" and entry["retry_count"] == 0
    for key in ("failed_at", "created_at", "enqueued_at"):
        assert isinstance(entry[key], float) and before - 1 <= entry[key] <= after + 1, key
    assert entry["at"] >= entry["failed_at"] + 14  # Ruby's Time from our float-seconds score
    assert 0 <= entry["latency"] < 60
    [elsewhere] = [q for q in api["queues"] if q["name"] == "elsewhere"]
    assert elsewhere["size"] == 1 and 0 <= elsewhere["latency"] < 60

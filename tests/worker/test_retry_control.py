"""Retry control through a real worker, on both runners: `sidequest.Retry` raised by a job, the
`retry_on` / `discard_on` options, and `retry_in` returning "kill" or "discard" (worker/retry.py
decides them all; tests/worker/test_current.py covers `current_job()`)."""

from __future__ import annotations

import itertools
import logging
import time

import pytest
from conftest import wait_until
from helpers import ran, reserved, zset_items
from jobs_for_tests import record

import sidequest
from sidequest.features.job_metrics import read
from sidequest.jobs.middleware import Chain


@sidequest.job(name="AskAgain", retry=2)
def ask_again(seconds):
    record("ask-again", sidequest.current_job().retry_count, time.time())
    raise sidequest.Retry(in_=seconds)


@sidequest.job(name="AsyncAskAgain", retry=2)
async def async_ask_again(seconds):
    record("ask-again", sidequest.current_job().retry_count, time.time())
    raise sidequest.Retry(in_=seconds, exc=TimeoutError("the API is busy"))


class ChattyExhausted(sidequest.Job, abstract=True):
    def retries_exhausted(self, payload, exc):
        record("exhausted", payload["jid"], type(exc).__name__)


class AskAgainCapped(ChattyExhausted, name="AskAgainCapped", retry=2):
    def perform(self, seconds):
        record("capped", sidequest.current_job().retry_count, time.time())
        raise sidequest.Retry(seconds)


class Picky(ChattyExhausted, name="Picky", retry=3, retry_on=(ConnectionError,), discard_on=(LookupError,)):
    def perform(self, kind):
        record("picky", kind, sidequest.current_job().retry_count)
        raise {"conn": ConnectionError, "key": KeyError, "value": ValueError}[kind](kind)

    def retry_in(self, count, exc):
        return 0.05


class Verdict(ChattyExhausted, name="Verdict", retry=5):
    def perform(self, what):
        record("verdict", what)
        raise ValueError(what)

    def retry_in(self, count, exc):
        return str(exc)


@sidequest.job(name="VerdictFn", retry=5, retry_in=lambda count, exc: str(exc),
               retries_exhausted=lambda payload, exc: record("exhausted", payload["jid"], type(exc).__name__))
def verdict_fn(what):
    record("verdict", what)
    raise ValueError(what)


RUNNERS = ["threads", "asyncio"]


@pytest.fixture
def config(config):
    """No process-wide middleware another test may have left: async jobs then run on the loop."""
    return config.replace(server_middleware=Chain())


def _stats(r):
    return int(r.get("stat:processed") or 0), int(r.get("stat:failed") or 0)


@pytest.mark.parametrize("runner,job", [("threads", ask_again), ("asyncio", async_ask_again)])
def test_retry_reschedules_at_exactly_now_plus_in_without_a_failure(start, client, r, caplog, runner, job):
    caplog.set_level(logging.INFO, logger="sidequest")
    reported = []
    start(runner=runner, error_handlers=[lambda exc, context: reported.append(exc)])
    jid = client.push(job, [120])
    wait_until(lambda: r.zcard("retry") == 1, message="the job in the retry set")
    [(p, score)] = zset_items(r, "retry")
    [[count, ran_at]] = ran(r, "ask-again")
    assert count == 0 and p["jid"] == jid and p["retry_count"] == 0 and p["queue"] == "default"
    assert ran_at + 120 <= score <= ran_at + 123  # now + in_ (the run's end): no back-off, no jitter
    cause = "sidequest.errors.Retry" if runner == "threads" else "TimeoutError"  # error_class: exc's, when given
    assert p["error_class"] == cause
    wait_until(lambda: _stats(r)[0] == 1, message="the heartbeat to count it processed")
    assert _stats(r) == (1, 0)  # processed, not failed
    assert reported == []  # an error tracker hears of no failure
    lines = [rec for rec in caplog.records if rec.name in ("sidequest.worker.job_run", "sidequest.worker.retry")
             and rec.getMessage() != "start"]
    assert [rec.getMessage() for rec in lines] == ["retry requested, again in 120 s"]
    assert lines[0].levelno == logging.INFO and lines[0].exc_info is None


@pytest.mark.parametrize("runner", RUNNERS)
def test_retry_counts_against_the_cap_then_the_job_is_dead(start, client, r, runner):
    launcher = start(runner=runner)
    jid = client.push(AskAgainCapped, [0.3])
    wait_until(lambda: r.zcard("dead") == 1, message="the job in the dead set past its cap")
    wait_until(lambda: ran(r, "exhausted"), message="retries_exhausted, run once the dead entry is written")
    runs = ran(r, "capped")
    assert [count for count, _ in runs] == [0, 1, 2]  # retry=2: two retries, then dead
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(runs)]
    assert all(0.3 <= gap < 20 for gap in gaps), gaps  # never before in_; late only on a loaded machine
    [(p, _)] = zset_items(r, "dead")
    assert p["jid"] == jid and p["retry_count"] == 2 and p["error_class"] == "sidequest.errors.Retry"
    assert ran(r, "exhausted") == [[jid, "Retry"]]
    wait_until(lambda: not reserved(r, launcher.identity))
    wait_until(lambda: _stats(r)[0] == 3, message="three runs counted processed")
    assert _stats(r) == (3, 1)  # only the run that ended dead is a failure
    metrics = wait_until(lambda: (m := read(r, minutes=5).get("AskAgainCapped")) and m.runs == 3 and m,
                         message="the job's metrics flushed")
    assert metrics.failed == 1  # the dashboard's per-job failures agree


@pytest.mark.parametrize("runner", RUNNERS)
def test_retry_on_retries_only_those_and_kills_the_rest_discard_on_drops(start, client, r, caplog, runner):
    caplog.set_level(logging.INFO, logger="sidequest")
    launcher = start(runner=runner)
    conn = client.push(Picky, ["conn"])
    wait_until(lambda: r.zcard("dead") == 1, message="ConnectionError retried 3 times, then dead")
    assert [x[1] for x in ran(r, "picky")] == [0, 1, 2, 3]
    [(p, _)] = zset_items(r, "dead")
    assert p["jid"] == conn and p["retry_count"] == 3
    value = client.push(Picky, ["value"])
    wait_until(lambda: r.zcard("dead") == 2, message="a ValueError (not in retry_on) dead at once")
    dead = {p["jid"]: p for p, _ in zset_items(r, "dead")}
    assert dead[value]["retry_count"] == 0 and dead[value]["error_class"] == "ValueError"
    client.push(Picky, ["key"])
    wait_until(lambda: len(ran(r, "picky")) == 6, message="the KeyError run")
    wait_until(lambda: not reserved(r, launcher.identity))
    wait_until(lambda: len(ran(r, "exhausted")) == 2)
    assert r.zcard("dead") == 2 and r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert sorted(ran(r, "exhausted")) == sorted([[conn, "ConnectionError"], [value, "ValueError"]])
    wait_until(lambda: "discard_on" in caplog.text, message="the discard logged")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("job", [Verdict, verdict_fn], ids=["class", "function"])
def test_retry_in_may_kill_or_discard(start, client, r, runner, job):
    launcher = start(runner=runner)
    killed = client.push(job, ["kill"])
    wait_until(lambda: r.zcard("dead") == 1, message="'kill': dead at the first failure")
    wait_until(lambda: ran(r, "exhausted"))
    [(p, _)] = zset_items(r, "dead")
    assert p["jid"] == killed and p["retry_count"] == 0
    assert ran(r, "exhausted") == [[killed, "ValueError"]]
    client.push(job, ["discard"])
    wait_until(lambda: ran(r, "verdict") == [["kill"], ["discard"]])
    wait_until(lambda: not reserved(r, launcher.identity))
    assert r.zcard("dead") == 1 and r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert len(ran(r, "exhausted")) == 1  # a discard runs no exhaustion hook


def test_retry_refuses_a_delay_that_is_not_a_duration():
    with pytest.raises(sidequest.JobArgumentError, match="seconds"):
        sidequest.Retry(in_=-1)
    with pytest.raises(sidequest.JobArgumentError, match="seconds"):
        sidequest.Retry(in_="soon")
    from datetime import timedelta

    assert sidequest.Retry(in_=timedelta(minutes=2)).seconds == 120.0

"""Redis going away mid-run: the worker logs once, waits, reconnects, and loses nothing."""

import logging
import signal

import pytest
import redis
from conftest import RedisServer, wait_until
from helpers import WorkerProcess, ran
from jobs_for_tests import echo, waits_for_file

from sidequest import Client, Config
from sidequest.store.dev_server import server_binary
from sidequest.store.outage import RedisOutage


@pytest.fixture
def durable_redis():
    server = RedisServer(server_binary(), ["--appendonly", "yes", "--appendfsync", "always"])
    yield server
    server.stop()


def test_worker_survives_a_redis_restart_mid_job(durable_redis, tmp_path):
    url = durable_redis.url(0)
    client = Client(Config(redis_url=url))
    r = client.redis
    w = WorkerProcess(url, "-c", "2")
    gate = tmp_path / "outage-over"
    try:
        w.wait_registered(r)
        client.push(waits_for_file, [str(gate), "through the outage"])
        wait_until(lambda: ran(r, "file-start"), message="the job to start")
        durable_redis.halt()  # the job is still running, through the whole outage
        assert w.proc.poll() is None
        # stay down long enough for several fetch timeouts and retries
        wait_until(lambda: "Redis is unavailable" in w.output, 30, 0.1, "the outage to be logged")
        durable_redis.start()
        r = Client(Config(redis_url=url)).redis
        gate.touch()  # the job ends only now: its record and acknowledgement need Redis back
        wait_until(lambda: ran(r, "file-done"), 30, message="the job to finish")
        client = Client(Config(redis_url=url))
        client.push(echo, ["after the outage"])
        wait_until(lambda: ran(r, "echo"), 20, message="a new job after Redis came back")
        wait_until(lambda: not any(r.llen(k) for k in r.scan_iter("sidequest:reserved:*")),
                   message="no job left reserved")
    finally:
        w.signal(signal.SIGTERM)
        out = w.finish()
    assert w.proc.returncode == 0, out
    assert out.count("Redis is unavailable") == 1, out  # logged once, not in a tight loop
    assert "Redis answers again after" in out
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0



def test_a_stop_during_an_outage_never_says_redis_answers_again(caplog):
    """Issue 28 item 15: "Redis answers again" was logged at a stop when Redis never did: a
    success reported without a call reaching Redis (a job already in hand, handed out) counted
    as Redis answering, and the stop logged the end of the outage on that alone. At a stop, the
    process's last call (clearing its heartbeat) says whether Redis answers now."""
    now = [0.0]
    outage = RedisOutage(settle=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="sidequest.store.outage")
    outage.down(redis.ConnectionError("Connection refused."))
    now[0] = 2.0
    outage.up(began=1.5)  # a job in hand, taken without a call: Redis may well still be down
    now[0] = 3.0
    outage.settle(answered=False)  # the stop's last call failed: Redis does not answer
    assert [r.getMessage() for r in caplog.records][1:] == [
        "stopped during a Redis outage of 3.0 s (1 failed calls)"]

    caplog.clear()
    outage = RedisOutage(settle=5.0, clock=lambda: now[0])
    outage.down(redis.ConnectionError("Connection refused."))
    now[0] = 4.0
    outage.settle(answered=True)  # no success came before the stop, but its last call reached Redis
    assert [r.getMessage() for r in caplog.records][1:] == [
        "Redis answers again after 1.0 s (1 failed calls meanwhile)"]

    caplog.clear()
    outage = RedisOutage(settle=5.0, clock=lambda: now[0])
    outage.settle(answered=False)  # no outage: nothing to say
    assert caplog.records == []


def test_failures_just_after_redis_answers_again_are_the_same_outage(caplog):
    """A failover fails the connections made before it one by one, after the first call has
    reached the new primary: one outage, two lines, and the failed calls counted in the second."""
    now = [100.0]
    outage = RedisOutage(settle=1.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="sidequest.store.outage")
    failure = redis.ConnectionError("Connection closed by server.")
    outage.down(failure)
    now[0] = 103.5
    outage.up(began=100.0)  # a call that began before the failure proves nothing
    outage.up(began=103.4)  # Redis answers: the outage is settling
    now[0] = 103.6
    outage.down(failure)  # a stale connection fails: the same outage
    outage.down(failure)
    now[0] = 104.0
    outage.up(began=103.9)
    now[0] = 104.9
    outage.up(began=104.8)  # 0.9 s of successes: not settled yet
    assert [r.getMessage() for r in caplog.records] == [
        "Redis is unavailable (ConnectionError: Connection closed by server.); retrying with back-off until it answers"]
    now[0] = 105.0
    outage.up(began=104.95)
    assert caplog.records[-1].getMessage() == "Redis answers again after 4.0 s (3 failed calls meanwhile)"
    outage.down(failure)  # a failure after that is a new outage
    now[0] = 106.0
    outage.up(began=105.5)
    assert len(caplog.records) == 3
    outage.settle(answered=True)  # a stop logs its end at once, without waiting out the second
    outage.settle(answered=True)
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING", "ERROR", "WARNING"]
    assert caplog.records[-1].getMessage() == "Redis answers again after 1.0 s (1 failed calls meanwhile)"


def test_a_failure_long_after_redis_answered_is_a_new_outage_even_with_no_success_between(caplog):
    """A busy worker may make no call that reports a success for a while (every slot holds a long
    job): the next failure ends the settled outage before it starts its own."""
    now = [0.0]
    outage = RedisOutage(settle=1.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="sidequest.store.outage")
    outage.down(redis.ConnectionError("first"))
    now[0] = 2.0
    outage.up(began=1.5)
    now[0] = 600.0
    outage.down(redis.ConnectionError("second"))
    assert [r.getMessage() for r in caplog.records] == [
        "Redis is unavailable (ConnectionError: first); retrying with back-off until it answers",
        "Redis answers again after 2.0 s (1 failed calls meanwhile)",
        "Redis is unavailable (ConnectionError: second); retrying with back-off until it answers"]


def test_an_error_reply_is_a_refusal_not_an_outage(caplog):
    """Issue 28 item 3: Redis that answers a core call with an error (OOM here) refuses the call:
    the same back-off and one line for the episode, but never "Redis is unavailable"."""
    now = [0.0]
    outage = RedisOutage(settle=1.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="sidequest.store.outage")
    refused = redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    outage.down(refused)
    outage.down(refused)
    now[0] = 3.0
    outage.up(began=2.0)
    now[0] = 4.0
    outage.up(began=3.5)
    assert [r.getMessage() for r in caplog.records] == [
        "Redis refuses a call (OutOfMemoryError: command not allowed when used memory > 'maxmemory'.); "
        "it is retried with back-off until Redis accepts it",
        "Redis accepts the calls again after 3.0 s (2 failed calls meanwhile)"]

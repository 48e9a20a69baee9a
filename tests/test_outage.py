"""Redis going away mid-run: the worker logs once, waits, reconnects, and loses nothing."""

import signal

import pytest
from conftest import RedisServer, wait_until
from helpers import WorkerProcess, ran
from jobs_for_tests import echo, waits_for_file

from sidequest import Client, Config
from sidequest.embedded import server_binary


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


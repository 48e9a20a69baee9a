"""worker/background/loop.py: the one loop behind the poller, recovery, the periodic scheduler, limiter leases
and the heartbeat."""

from __future__ import annotations

import logging
import socket
import threading

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from sidequest.worker.background.loop import Background


def unreachable() -> redis.Redis:
    """A client of a port nothing listens on: each call meets a real connection refusal."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))


def test_an_outage_is_logged_once_and_the_duty_goes_on_when_redis_answers(caplog):
    down = unreachable()
    passes: list[str] = []
    done = threading.Event()

    def step() -> float:
        passes.append("pass")
        if len(passes) <= 3:
            down.ping()  # refused: an outage
        if len(passes) == 5:
            done.set()
        return 0.01

    duty = Background("test-duty", step, what="test duty", retry=0.01, outage=(redis.ConnectionError,), loud=True)
    with caplog.at_level(logging.WARNING, logger="sidequest.worker.background.loop"):
        duty.start()
        assert done.wait(10)
        duty.stop()
    assert not duty.running
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("test duty failed (") and "trying again every 0.01 s" in lines[0]


def test_an_error_of_the_step_is_logged_with_its_traceback_and_the_next_pass_runs(caplog):
    calls: list[int] = []
    again = threading.Event()

    def step() -> float:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("a bad pass")
        again.set()
        return 60.0

    duty = Background("test-duty", step, what="test duty", retry=0.01)
    with caplog.at_level(logging.ERROR, logger="sidequest.worker.background.loop"):
        duty.start()
        assert again.wait(10)
        duty.stop()
    [record] = caplog.records
    assert record.getMessage() == "test duty failed" and record.exc_info is not None


def test_wake_runs_the_next_pass_now_and_stop_ends_a_long_wait():
    calls: list[int] = []
    first, second = threading.Event(), threading.Event()

    def step() -> float:
        calls.append(1)
        (first if len(calls) == 1 else second).set()
        return 3600.0  # without a wake, the next pass would be an hour away

    duty = Background("test-duty", step, what="test duty", retry=1.0)
    duty.start()
    assert first.wait(10)
    duty.wake()
    assert second.wait(10)
    duty.stop(timeout=10)
    assert not duty.running  # the hour's wait ended at the stop

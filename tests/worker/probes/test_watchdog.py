"""The liveness watchdog (`worker/probes/watchdog.py`): a background thread that ended or is stuck,
and an event loop whose callback waits past `liveness_timeout`, make the process not live; a duty
stopped on purpose does not. Time moves by a clock offset, so nothing waits the threshold out."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest
from conftest import wait_until

from sidequest import Config
from sidequest.worker.background.loop import Background
from sidequest.worker.probes.state import LiveReport
from sidequest.worker.probes.watchdog import Watchdog


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
def config(tmp_path) -> Config:
    return Config(liveness_timeout=5, health_dir=str(tmp_path))


def watchdog(config, duties, loop=None, clock=None) -> Watchdog:
    clock = clock or Clock()
    report = LiveReport(config, "host:1:abc", stale_after=6, clock=clock)
    return Watchdog(config, report, duties, lambda: loop, ready=lambda: True, clock=clock, redis_bound=0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the SystemExit below
def test_a_duty_thread_that_ended_or_is_stuck_is_not_live(config):
    release = threading.Event()
    began = threading.Event()

    def stuck() -> float:
        began.set()
        release.wait(30)
        return 30  # then waits: due again in 30 s

    def dies() -> float:
        raise SystemExit  # escapes the loop's `except Exception`: the thread ends

    clock = Clock()
    slow, dead = Background("t-slow", stuck, what="heartbeat", retry=0.05), Background("t-dead", dies, what="heartbeat",
                                                                                     retry=0.05)
    dog = watchdog(config, {"heartbeat": slow}, clock=clock)
    other = watchdog(config, {"poller": slow}, clock=clock)  # many Redis calls a pass: only its end or a missed wake
    slow.start()
    try:
        began.wait(10)
        assert dog.check().ok  # in a pass, not yet past the threshold
        clock.offset = 6
        verdict = dog.check()
        assert not verdict.ok and "heartbeat thread is stuck" in verdict.reason and "host:1:abc" in verdict.reason
        assert other.check().ok
        release.set()
        clock.offset = 0
        wait_until(lambda: slow.pass_began is None, 10, message="the pass to end")
        assert dog.check().ok and other.check().ok  # waiting again, on time
        clock.offset = 36
        for judge in (dog, other):  # ... but not waking when due: stuck as well
            verdict = judge.check()
            assert not verdict.ok and "thread is stuck" in verdict.reason
    finally:
        release.set()
        slow.stop()
    assert dog.check().ok  # stopped on purpose: the process is stopping, not stuck

    dead.start()
    wait_until(lambda: not dead.running, 10, message="the thread to end")
    verdict = watchdog(config, {"heartbeat": dead}).check()
    assert not verdict.ok and verdict.reason.endswith("the heartbeat thread has stopped")


def test_an_event_loop_blocked_past_the_threshold_is_not_live(config):
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    blocked, release = threading.Event(), threading.Event()

    def block() -> None:  # what an `async def` job calling time.sleep does to the loop
        blocked.set()
        release.wait(30)

    clock = Clock()
    dog = watchdog(config, {}, loop=loop, clock=clock)
    try:
        dog._pass()
        wait_until(lambda: dog.check().ok and dog._asked is None, 10, message="the loop to answer")
        loop.call_soon_threadsafe(block)
        blocked.wait(10)
        dog._pass()  # posts a callback, which waits behind the blocking one
        clock.offset = 4
        assert dog.check().ok  # under liveness_timeout
        clock.offset = 6
        verdict = dog.check()
        assert not verdict.ok and "event loop is blocked" in verdict.reason and "liveness_timeout 5 s" in verdict.reason
        release.set()
        wait_until(lambda: dog.check().ok, 10, message="the loop to run again")
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()
    dog._pass()  # a closed loop (the process stopping) is not asked
    assert dog.check().ok


def test_the_verdict_goes_stale_when_nobody_judges(config, tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])  # a process killed before it removed its file
    gone.wait()
    (tmp_path / f"{gone.pid}.json").write_text("{}")
    clock = Clock()
    dog = watchdog(config, {}, clock=clock)
    dog._pass()
    assert not (tmp_path / f"{gone.pid}.json").exists()  # swept: its pid may be another process's one day
    assert dog.report.live().ok and dog.report.path.exists() and dog.report.path.parent == tmp_path
    clock.offset = 7  # past stale_after: the watchdog itself is stuck, or the process frozen
    verdict = dog.report.live()
    assert not verdict.ok and "last judged" in verdict.reason
    dog.stop()
    assert not dog.report.path.exists()

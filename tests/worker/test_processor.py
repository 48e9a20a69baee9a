"""The worker in-process: processors, the job path, middleware, async jobs, stats."""


import pytest
from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import Resize, async_echo, async_wait, echo

from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.fetchers import BasicFetch
from sidequest.worker.launcher import Launcher


@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_jobs_run_with_their_args_and_are_acknowledged(start, client, r, fetch):
    launcher = start(fetch=fetch, queues=("default", "images"))
    jids = client.push_bulk(echo, [[i, {"n": [i]}] for i in range(50)])
    jid = client.push(Resize, ["a.png", 300])
    wait_until(lambda: len(ran(r)) == 51, message="51 jobs")
    assert sorted(x[0] for x in ran(r, "echo")) == list(range(50))
    assert ran(r, "resize") == [["a.png", 300, jid]]
    assert r.llen("queue:default") == 0 and r.llen("queue:images") == 0
    wait_until(lambda: not reserved(r, launcher.identity), message="acks")
    assert len(jids) == 50
    launcher.stop()
    assert int(r.get("stat:processed")) == 51 and int(r.get("stat:failed") or 0) == 0


def test_concurrency_runs_jobs_in_parallel(start, client, r):
    start(concurrency=4)
    client.push_bulk("Blocker", [["go:a"], ["go:b"], ["go:c"], ["go:d"]])
    wait_until(lambda: len(ran(r, "blocker-start")) == 4, message="4 jobs running at once")
    for key in ("go:a", "go:b", "go:c", "go:d"):
        r.rpush(key, 1)
    wait_until(lambda: len(ran(r, "blocker-done")) == 4)


def test_async_jobs_run_on_an_event_loop_without_blocking_processors(start, client, r):
    start(concurrency=2)
    client.push(async_wait, ["go:async"])
    wait_until(lambda: ran(r, "async-wait-start"), message="async job to start")
    client.push(echo, ["while async waits"])
    wait_until(lambda: ran(r, "echo"), message="sync job to run beside the waiting async job")
    assert not ran(r, "async-wait-done")
    r.set("go:async", 1)
    wait_until(lambda: ran(r, "async-wait-done"))
    client.push(async_echo, ["x"])
    wait_until(lambda: ran(r, "async"))
    assert ran(r, "async")[0][1] == "sidequest-asyncio"


def test_server_middleware_wraps_the_job_and_sees_the_instance(config, start, client, r):
    seen = []

    class Around:
        def __call__(self, job, payload, queue, call_next):
            seen.append(("before", type(job).__name__, payload["jid"], queue, job.jid))
            result = call_next()
            seen.append(("after", payload["class"]))
            return result

    config.server_middleware.add(Around)
    start()
    jid = client.push(echo, [1])
    wait_until(lambda: len(seen) == 2)
    assert seen == [("before", "echo", jid, "default", jid), ("after", "Echo")]


def test_middleware_can_skip_a_job_which_is_then_acknowledged(config, start, client, r):
    config.server_middleware.add(lambda job, payload, queue, call_next: None)
    launcher = start()
    client.push(echo, [1])
    wait_until(lambda: r.llen("queue:default") == 0 and not reserved(r, launcher.identity))
    assert ran(r) == []


def test_strict_queue_order_drains_the_first_queue_first(start, client, r):
    client.push_bulk("Echo", [["low"]] * 5, queue="low")
    client.push_bulk("Echo", [["high"]] * 5, queue="high")
    start(concurrency=1, queues=("high", "low"))
    wait_until(lambda: len(ran(r)) == 10)
    assert [x[0] for x in ran(r)] == ["high"] * 5 + ["low"] * 5


def test_a_processor_that_dies_is_replaced(config, monkeypatch, redis_url, client, r, caplog):
    """A fault outside any job (injected at the Fetch seam) kills only that thread."""
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    faults = {"left": 1}

    class FaultyFetch(BasicFetch):
        def retrieve_work(self):
            if faults["left"]:
                faults["left"] -= 1
                raise RuntimeError("fetch exploded")
            return super().retrieve_work()

    launcher = Launcher(config.replace(concurrency=2, fetch="basic"))
    launcher.runners[0].make_fetch = lambda slot: FaultyFetch(launcher.config, launcher.redis, Scripts(launcher.redis))
    launcher.run()
    try:
        wait_until(lambda: "fetch exploded" in caplog.text, message="the processor to die")
        client.push_bulk(echo, [["first"], ["second"]])
        wait_until(lambda: len(ran(r)) == 2, message="both jobs despite the dead processor")
        assert launcher.runners[0].alive() == 2
        assert "processor 0 died (RuntimeError: fetch exploded); replacing it in 0.5 s" in caplog.text
    finally:
        launcher.stop()

"""The asyncio runner (`asyncio_runner`): `async def` jobs fetched, run and acknowledged on one loop.

In-process workers on the test Redis; the kill -9 test of the runner is scenarios/test_reliability's
(parametrized over both runners)."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import async_boom, async_echo, async_held, async_slow, echo, stamp

import sidequest
from sidequest import Config
from sidequest.jobs.middleware import Chain
from sidequest.jobs.registry import Registry
from sidequest.worker.asyncio_runner import AsyncioRunner


@pytest.fixture
def config(config):
    """Without the process-wide links another test may have left (Sentry's, OpenTelemetry's): with
    server middleware, async jobs take the thread pool (see the last test)."""
    return config.replace(server_middleware=Chain())


def only(*jobs) -> Registry:
    registry = Registry()
    for job in jobs:
        registry.register(getattr(job, "job_class", job))
    return registry


def capsule_of(launcher) -> AsyncioRunner:
    assert launcher.runner == "asyncio"
    assert isinstance(launcher.runners[0], AsyncioRunner)
    return launcher.runners[0]


def test_auto_runs_an_all_async_worker_on_the_loop_and_any_other_on_threads(start, r):
    on_loop = start(registry=only(async_echo, async_held), async_jobs=50)
    threads = start(registry=only(async_echo, echo))
    forced = start(registry=only(async_echo), runner="threads")
    assert (on_loop.runner, threads.runner, forced.runner) == ("asyncio", "threads", "threads")
    # Sidekiq's process record shows the jobs it can run at once: 50 on the loop
    info = json.loads(r.hget(on_loop.identity, "info"))
    assert info["concurrency"] == 50
    assert json.loads(r.hget(threads.identity, "info"))["concurrency"] == 4


def test_asyncio_is_refused_with_basic_fetch(config):
    from sidequest.worker.launcher import Launcher

    with pytest.raises(sidequest.ConfigError, match="runner asyncio needs reliable fetch"):
        Launcher(config.replace(runner="asyncio", fetch="basic"))


def test_a_runner_that_is_not_one_is_refused_in_one_line():
    with pytest.raises(sidequest.ConfigError, match="runner must be one of auto, threads, asyncio; got 'fibers'"):
        Config(runner="fibers")


def test_hundreds_of_jobs_run_at_once_on_one_thread(start, client, r):
    """300 jobs in flight together, all on the loop's thread, no processor thread in sight.
    Issue 28 item 17: under load this timed out waiting for the count; the jobs made blocking
    round trips on the loop (so the runner's connect timed out on it) and 300 polls a second
    each. Now the jobs never block the loop, and the waits for the acknowledgements and the
    heartbeat's count are start-up-like deadlines: a count reached late is still the count."""
    start(runner="asyncio", async_jobs=300)
    client.push_bulk(async_held, [[n, "test:gate"] for n in range(300)])
    wait_until(lambda: len(ran(r, "held-start")) == 300, 30, 0.05, "300 jobs to be running at once")
    assert len({ident for _, ident in ran(r, "held-start")}) == 1  # one thread: the event loop's
    assert not ran(r, "held-done")
    r.set("test:gate", 1)
    wait_until(lambda: len(ran(r, "held-done")) == 300, 30, 0.05, "every job to end")
    wait_until(lambda: not reserved(r), 30, 0.01, "every success to be acknowledged")
    wait_until(lambda: r.get("stat:processed") == b"300", 30, 0.02, "the heartbeat to count 300 processed")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0


def test_no_more_than_async_jobs_run_at_once(start, client, r):
    start(runner="asyncio", async_jobs=7)
    client.push_bulk(async_held, [[n, "test:gate"] for n in range(20)])
    wait_until(lambda: len(ran(r, "held-start")) == 7, 10, 0.02, "seven jobs to start")
    # the fetch took exactly the free places, and takes again only when a job ends: the other 13
    # wait in their queue, and only the 7 running are reserved
    assert len(reserved(r)) == 7 and r.llen("queue:default") == 13 and len(ran(r, "held-start")) == 7
    r.set("test:gate", 1)
    wait_until(lambda: len(ran(r, "held-done")) == 20, 10, 0.02, "all twenty to run")


def test_failures_time_limits_sync_jobs_and_bad_payloads_take_the_designed_paths(start, client, r):
    launcher = start(runner="asyncio")
    client.push(async_boom, ["no luck"])
    client.push(async_slow)
    client.push(echo, ["from a thread"])  # a sync job: run on the runner's thread pool
    r.lpush("queue:default", b"{not json")
    client.push("NoSuchJob", [1])

    def retry_classes():
        return sorted(json.loads(raw)["error_class"] for raw in r.zrange("retry", 0, -1))
    wait_until(lambda: len(retry_classes()) == 3, 10, 0.02, "three failures in retry")
    assert retry_classes() == ["ValueError", "sidequest.errors.JobTimeoutError", "sidequest.errors.UnknownJobError"]
    assert ran(r, "slow-cancelled") == [[]]  # cancelled for real at its limit
    assert ran(r, "echo") == [["from a thread"]]
    wait_until(lambda: r.zcard("dead") == 1, 5, 0.02, "the bad payload in dead")
    dead = json.loads(r.zrange("dead", 0, -1)[0])
    assert dead["class"] == "sidequest.InvalidPayload" and dead["args"] == ["{not json"]
    wait_until(lambda: not reserved(r), 5, 0.01, "nothing left reserved")
    assert launcher.counters.failed.value >= 4


def test_an_idle_worker_starts_a_pushed_job_within_a_round_trip(start, client, r):
    """Idle, it waits in BLMOVE on the queue, not in a poll: each job starts well within the
    blocking timeout (1 s here) of its push."""
    start(runner="asyncio", registry=only(async_echo, stamp), fetch_timeout=5)
    def blocked() -> bool:  # the worker waits in BLMOVE on the queue
        return any(c.get("cmd") == "blmove" for c in r.client_list())

    for label in range(5):
        wait_until(blocked, 5, 0.005, "the idle worker to wait in BLMOVE")
        sent = time.time()
        client.push(async_echo, [label])
        wait_until(lambda label=label: [label, "sidequest-asyncio"] in ran(r, "async"), 5, 0.005, "the job")
        assert time.time() - sent < 0.5
    wait_until(lambda: not reserved(r), 5, 0.01, "every success to be acknowledged")


def test_a_stop_puts_back_what_is_still_running_at_the_deadline_and_cancels_it(start, client, r):
    launcher = start(runner="asyncio", timeout=0.5)
    jid = client.push(async_held, [1, "test:never"])
    wait_until(lambda: ran(r, "held-start"), 10, 0.02, "the job to start")
    launcher.stop()
    assert ran(r, "held-cancelled") == [[1]]
    [raw] = r.lrange("queue:default", 0, -1)
    assert json.loads(raw)["jid"] == jid and not reserved(r)


def test_a_job_in_the_batch_list_whose_reply_was_lost_is_run(start, client, r):
    """A call whose reply is lost may have moved a job into the batch list: the runner reads the
    list back and runs what it did not know of (as the threads' hub does)."""
    launcher = start(runner="asyncio")
    capsule = capsule_of(launcher)
    wait_until(lambda: r.sismember("sidequest:reservations", capsule.batch), 5, 0.01, "the batch list registered")
    payload = client.build(async_echo, [["adopted"]], [None], time.time(), {})[0][0][0]
    r.lpush(capsule.batch, json.dumps(payload))
    capsule.hub.lost_reply()
    wait_until(lambda: ran(r, "async") == [["adopted", "sidequest-asyncio"]], 10, 0.02, "the adopted job to run")
    wait_until(lambda: not reserved(r), 5, 0.01, "its success acknowledged")


def test_server_middleware_wraps_async_jobs_through_the_thread_path(start, client, r):
    seen = []

    def link(job, payload, queue, call_next):
        seen.append(payload["class"])
        return call_next()

    config_changes = {"runner": "asyncio"}
    launcher = start(**config_changes)
    launcher.config.server_middleware.add(link)
    client.push(async_echo, ["wrapped"])
    wait_until(lambda: ran(r, "async"), 10, 0.02, "the job")
    assert seen == ["AsyncEcho"]


def test_an_async_job_uses_the_workers_redis_through_sidequest_aio_redis(start, client, r, monkeypatch):
    """`sidequest.client.async_client.redis()`: redis.asyncio's methods and replies (reply callbacks included),
    on the worker's Redis, from a hundred jobs at once (no pool cap)."""
    from jobs_for_tests import async_count

    monkeypatch.setattr(sidequest.client.sync_client, "_default", client)  # what `sidequest worker` sets up
    start(runner="asyncio")
    client.push_bulk(async_count, [["test:count"]] * 150)
    wait_until(lambda: len(ran(r, "counted")) == 150, 10, 0.02, "every job to count")
    assert sorted(n for n, _, _ in ran(r, "counted")) == list(range(1, 151))
    assert all(seen == {"b'seen'": "b'1'"} for _, seen, _ in ran(r, "counted"))  # bytes, as json.dumps shows them
    assert {ok for _, _, ok in ran(r, "counted")} == {True}


def test_sidequest_aio_redis_outside_a_worker_is_the_default_clients(client, monkeypatch):
    import asyncio

    monkeypatch.setattr(sidequest.client.sync_client, "_default", client)

    async def use() -> list:
        own = sidequest.client.async_client.redis()
        assert own is sidequest.client.async_client.redis()  # one per loop
        async with own.pipeline(transaction=True) as pipe:  # redis-py's own pipeline
            pipe.incr("test:n")
            pipe.incr("test:n")
            counted = await pipe.execute()
        return [counted, await own.get("test:n"), await own.exists("nope"), await own.lpush("test:l", "a", "b")]

    assert asyncio.run(use()) == [[1, 2], b"2", 0, 2]


# -- issue 28 ---------------------------------------------------------------------------------------
import asyncio  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402

import redis  # noqa: E402
from conftest import RedisServer  # noqa: E402
from jobs_for_tests import record  # noqa: E402

from sidequest.client import async_client as aio  # noqa: E402
from sidequest.store.direct import AsyncDirectPath  # noqa: E402
from sidequest.worker.launcher import Launcher  # noqa: E402


class QueueSeen(sidequest.Job, name="QueueSeen"):
    """Records the queue the worker says it took the job from (its log context)."""

    async def perform(self, label):
        from sidequest.worker.job_run import job_context

        record("seen", label, job_context.get()[2])


class Span(sidequest.Job, name="Span"):
    """Records its start and end (epoch seconds), `seconds` apart."""

    async def perform(self, label, seconds):
        record("span", label, "start", time.time())
        await asyncio.sleep(seconds)  # the job's own work: the span whose overlaps are checked
        record("span", label, "end", time.time())


# Keeps Redis busy for ARGV[1] seconds: every client waits, and replies already made are sent after it.
# Holds the server ARGV[1] seconds. From Redis 7.2, and in Valkey, TIME inside a script answers
# the script's start time every time (redis/redis#10300), so a loop waiting for it never ends:
# there the loop counts the server's CPU seconds (`os.clock`, Redis 7+ and Valkey), at least as
# long in wall time. Redis 6.2 and 7.0 have no `os` in scripts, and their TIME moves.
STALL = ("local ok, clock = pcall(function() return os.clock end) "
         "if ok and clock then local stop = clock() + ARGV[1] repeat until clock() >= stop return 1 end "
         "local t = redis.call('TIME') local stop = t[1] * 1000000 + t[2] + ARGV[1] * 1000000 "
         "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop return 1")


def blocked_on(r, count: int = 1) -> bool:
    return sum(1 for c in r.client_list() if c.get("cmd") == "blmove") >= count


def test_a_blocking_call_whose_reply_comes_late_drops_its_connection(r, redis_url):
    """Issue 28 item 7: a BLMOVE still blocked in Redis when its caller stops reading (its reading
    bound passed) must never leave its reply for the next call on that connection: the late call
    raises a timeout, and the next BLMOVE (another queue) reads its own reply, not the job."""
    async def scenario() -> list:
        lane = AsyncDirectPath(aio.connect(redis_url))
        try:
            late = asyncio.create_task(lane.exchange([("BLMOVE", "queue:a", "test:got", "RIGHT", "LEFT", 10)],
                                                     timeout=0.3))
            with pytest.raises(redis.TimeoutError):
                await late
            r.lpush("queue:a", "job-of-a")  # the first BLMOVE, if still waiting in Redis, takes it now
            return await lane.exchange([("BLMOVE", "queue:b", "test:got", "RIGHT", "LEFT", 0.2)], timeout=2)
        finally:
            await lane.close()

    assert asyncio.run(scenario()) == [None]
    assert r.lrange("queue:a", 0, -1) == [b"job-of-a"]  # its BLMOVE ended with its connection


def test_a_job_moved_by_a_blmove_whose_reply_came_late_runs_once_as_its_own_queues(start, client, r):
    """Issue 28 item 7: Redis stalls just after a BLMOVE moved a job of queue a into the batch
    list, so the reply comes after the runner stopped waiting for it. The job must run once, as
    queue a's (not read by the next BLMOVE, on queue b), and nothing stays reserved."""
    launcher = start(runner="asyncio", registry=only(QueueSeen), queues=["a", "b"], fetch_timeout=1)
    capsule_of(launcher).hub.grace = 0.2  # the reading bound past the blocking timeout (5 s by default)
    for n in range(3):
        wait_until(lambda: blocked_on(r, 2), 10, 0.005, "both queues waited on")
        payload = client.build(QueueSeen, [[f"a{n}"]], [None], time.time(), {"queue": "a"})[0][0][0]
        pipe = r.pipeline(transaction=False)
        pipe.lpush("queue:a", json.dumps(payload))
        pipe.eval(STALL, 0, 1.5)
        pipe.execute()
        client.push(QueueSeen, [f"b{n}"], queue="b")
        wait_until(lambda n=n: len(ran(r, "seen")) == 2 * (n + 1), 20, 0.02, "both jobs to run")
    assert sorted(map(tuple, ran(r, "seen"))) == sorted(
        (f"{q}{n}", q) for n in range(3) for q in "ab")
    wait_until(lambda: not reserved(r), 10, 0.02, "nothing left reserved")


@pytest.fixture
def denied_blmove(private_redis: RedisServer) -> str:
    """A user of `private_redis` that may run everything but BLMOVE: every blocking fetch fails."""
    admin = redis.Redis.from_url(private_redis.url())
    admin.execute_command("ACL", "SETUSER", "noblock", "on", ">pw", "~*", "&*", "+@all", "-blmove")
    admin.close()
    return f"redis://noblock:pw@127.0.0.1:{private_redis.port}/0"


def blmove_denials(url: str) -> int:
    admin = redis.Redis.from_url(url.replace("noblock:pw@", ""))
    try:
        return sum(int(e["count"]) for e in admin.acl_log() if e.get("object") == "blmove")
    finally:
        admin.close()


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_a_failing_blocking_fetch_backs_off(start, denied_blmove, runner, monkeypatch):
    """Issue 28 item 7: a blocking fetch that fails (here BLMOVE refused by ACL, every other call
    answered) is an outage with back-off on both runners: a few tries in a second and a half,
    not a tight loop (the asyncio runner tried thousands of times)."""
    monkeypatch.setenv("SQ_TEST_REDIS_URL", denied_blmove)
    start(redis_url=denied_blmove, runner=runner, registry=only(async_echo), concurrency=2)
    wait_until(lambda: blmove_denials(denied_blmove), 20, 0.02, "a BLMOVE refused")
    began = blmove_denials(denied_blmove)
    # A rate, so an observation window: the back-off (0.5 s, then 1 s, 2 s...) lets a fetcher try
    # at most 3 times in 1.5 s, 6 for the threads runner's two processors (a late look only
    # lengthens the gaps); a loop without it tries hundreds of times.
    time.sleep(1.5)
    assert blmove_denials(denied_blmove) - began <= 6


@pytest.mark.parametrize("arrival", ["with-others", "while-idle", "two-suspects"])
def test_a_suspect_runs_alone_on_the_asyncio_runner(start, client, r, arrival):
    """Issue 28 item 7: a job in flight at two crashes (`recovery_count` 2, see `isolation`) runs alone
    on the asyncio runner as on the threads: no other job's start-end span overlaps its own,
    whether it came with others in one fetch, to an idle worker whose other queues then get
    jobs, or with another suspect."""
    def push(label: str, seconds: float, queue: str, suspect: bool = False) -> None:
        payload = client.build(Span, [[label, seconds]], [None], time.time(), {"queue": queue})[0][0][0]
        if suspect:
            payload["recovery_count"] = 2
        r.lpush(f"queue:{queue}", json.dumps(payload))

    suspects = ["S1", "S2"] if arrival == "two-suspects" else ["S1"]
    others = [f"n{i}" for i in range(6)]
    if arrival != "while-idle":
        for i, label in enumerate(others):
            push(label, 0.3, "a")
            if i == 2:
                for s in suspects:
                    push(s, 0.5, "a", suspect=True)
        start(runner="asyncio", registry=only(Span), queues=["a", "b"])
    else:
        start(runner="asyncio", registry=only(Span), queues=["a", "b"], fetch_timeout=1)
        wait_until(lambda: blocked_on(r, 2), 10, 0.005, "both queues waited on")
        push("S1", 1.0, "a", suspect=True)
        wait_until(lambda: ran(r, "span"), 10, 0.005, "the suspect to start")
        for label in others:
            push(label, 0.1, "b")
    labels = suspects + others
    wait_until(lambda: len(ran(r, "span")) == 2 * len(labels), 30, 0.02, "every job to run")
    spans: dict[str, list[float]] = {}
    for label, _, at in ran(r, "span"):
        spans.setdefault(label, []).append(at)
    for s in suspects:
        s_start, s_end = spans[s]
        beside = [label for label, (a, b) in spans.items() if label != s and a < s_end and b > s_start]
        assert not beside, f"{s} ran beside {beside}"


def test_a_suspect_still_waiting_at_a_stop_goes_back_and_never_runs(start, client, r):
    """Issue 28 item 7 (found in review of the merged runners): a suspect waiting for a long job to
    end is put back at a stop, never started beside it, as a processor's `gate.isolate` gives up
    at quiet; before, the loop's suspect started once the stop's hard deadline passed, while the
    stop put it back: two runs, no crash."""
    def push(label: str, seconds: float, suspect: bool = False) -> bytes:
        payload = client.build(Span, [[label, seconds]], [None], time.time(), {"queue": "a"})[0][0][0]
        if suspect:
            payload["recovery_count"] = 2
        raw = json.dumps(payload).encode()
        r.lpush("queue:a", raw)
        return raw

    launcher = start(runner="asyncio", registry=only(Span), queues=["a"], timeout=0.5)
    push("long", 5.0)
    wait_until(lambda: ran(r, "span"), 10, 0.005, "the long job to start")
    suspect = push("S", 0.1, suspect=True)
    wait_until(lambda: r.llen("queue:a") == 0, 10, 0.005, "the suspect to be taken")
    launcher.stop()
    assert [label for label, *_ in ran(r, "span")] == ["long"]  # the suspect never started
    assert suspect in r.lrange("queue:a", 0, -1)
    assert not reserved(r)


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_starting_and_stopping_a_launcher_leaves_no_thread_or_file_open(config, client, r, redis_url, monkeypatch,
                                                                       runner):
    """Issue 28 item 7: each start and stop of an asyncio-runner Launcher in one process left 4
    threads and about 11 file descriptors behind. Three cycles (each running an async job, a sync
    job and a job with a `result_ttl`) leave as many threads and open files as before them, with
    no garbage collection to close what a stop left open."""
    from jobs_for_tests import compute_async

    monkeypatch.setattr(sidequest.client.sync_client, "_default", client)
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    registry = only(async_echo, echo, compute_async)

    def cycle(n: int) -> None:
        launcher = Launcher(config.replace(runner=runner), registry=registry)
        launcher.run()
        client.push(async_echo, [n])
        client.push(echo, [n])
        jid = client.push(compute_async, [n])
        # done first: a result still awaited would open this test's client a connection of its own
        wait_until(lambda: sidequest.status(jid, client=client) == "done", 20, 0.02, "the result")
        assert sidequest.result(jid, client=client) == n * 10
        wait_until(lambda: len(ran(r)) == 2 * (n + 1), 20, 0.02, "the jobs")
        wait_until(lambda: not reserved(r), 10, 0.02, "acknowledged")
        launcher.stop()

    def counts() -> tuple[int, int]:
        return threading.active_count(), len(os.listdir("/proc/self/fd"))

    cycle(0)  # what a first use makes once per process (a test job's own client) is made here
    # the test jobs' own client (`record`) grows its pool when two jobs record at once (one on the
    # loop, one on a pool thread): grown now, it keeps what it has
    from jobs_for_tests import _r

    pool = _r().connection_pool
    for conn in [pool.get_connection() for _ in range(4)]:
        pool.release(conn)
    before = counts()
    for n in range(1, 4):
        cycle(n)
    try:
        wait_until(lambda: counts() <= before, 10, 0.05, f"threads and files back to {before}")
    except AssertionError:
        raise AssertionError(f"{counts()} > {before}: {sorted(t.name for t in threading.enumerate())}") from None



@pytest.mark.parametrize("option", [{"result_ttl": 60}, {"expires_in": 600}])
def test_async_jobs_with_a_feature_at_taken_run_async_jobs_at_once(start, client, r, option):
    """Issue 28 item 8: async jobs with `result_ttl` or `expires_in` (feature operations when taken)
    ran `concurrency` (4 here) at a time, through the thread pool. They run on the loop: all 60
    start before any ends (peak from start/end records), and their results are kept."""
    start(runner="asyncio", async_jobs=100, registry=only(async_held))
    jids = [client.push(async_held, [n, "test:gate"], **option) for n in range(60)]
    wait_until(lambda: len(ran(r, "held-start")) == 60, 30, 0.02, "sixty jobs running at once")
    assert not ran(r, "held-done")
    r.set("test:gate", 1)
    wait_until(lambda: len(ran(r, "held-done")) == 60, 30, 0.02, "every job to end")
    wait_until(lambda: not reserved(r), 10, 0.02, "acknowledged")
    if "result_ttl" in option:
        assert {sidequest.status(jid, client=client) for jid in jids} == {"done"}


@pytest.mark.parametrize("suspect_on", ["loop", "threads"])
def test_a_suspect_runs_alone_across_the_loop_and_a_capsule_on_threads(start, client, r, suspect_on):
    """Issue 28 item 7: the loop and a capsule's processor threads in one process pass one gate:
    a suspect on either runs with nothing running on the other."""
    from sidequest.config import Capsule

    def push(label: str, seconds: float, queue: str, suspect: bool = False) -> None:
        payload = client.build(Span, [[label, seconds]], [None], time.time(), {"queue": queue})[0][0][0]
        if suspect:
            payload["recovery_count"] = 2
        r.lpush(f"queue:{queue}", json.dumps(payload))

    # the other side's jobs still run when the suspect is taken: the loop's all at once, the
    # capsule's two at a time
    home, other, seconds = ("a", "c", 0.8) if suspect_on == "loop" else ("c", "a", 2.0)
    for i in range(4):
        push(f"{home}{i}", 0.3, home)
        push(f"{other}{i}", seconds, other)
    push("S", 0.5, home, suspect=True)
    for i in range(4, 8):
        push(f"{other}{i}", seconds, other)
    start(runner="asyncio", registry=only(Span), queues=["a"], capsules=[Capsule("side", ["c"], 2)])
    wait_until(lambda: len(ran(r, "span")) == 2 * 13, 30, 0.02, "every job to run")
    spans: dict[str, list[float]] = {}
    for label, _, at in ran(r, "span"):
        spans.setdefault(label, []).append(at)
    s_start, s_end = spans["S"]
    beside = [label for label, (a, b) in spans.items() if label != "S" and a < s_end and b > s_start]
    assert not beside, f"the suspect ran beside {beside}"

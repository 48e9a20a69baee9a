"""Jobs used by the tests; imported by worker subprocesses with `-r jobs_for_tests`."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import redis as redis_lib

import sidequest

_redis = {}


def _r() -> redis_lib.Redis:
    url = os.environ["SQ_TEST_REDIS_URL"]
    if url not in _redis:
        _redis[url] = redis_lib.Redis.from_url(url)
    return _redis[url]


def _ar():
    """A redis.asyncio client of the test Redis for the running event loop (one per loop)."""
    import redis.asyncio

    key = (os.environ["SQ_TEST_REDIS_URL"], id(asyncio.get_running_loop()))
    if key not in _redis:
        _redis[key] = redis.asyncio.Redis.from_url(key[0], max_connections=1000)  # redis-py 8 caps a pool at 100
    return _redis[key]


def record(kind: str, *values) -> None:
    """Append what a job saw to the `test:ran` list, for the test to read."""
    import json

    _r().rpush("test:ran", json.dumps([kind, *values]))


@sidequest.job(name="Echo")
def echo(*args):
    record("echo", *args)


@sidequest.job(name="Plain", queue="default", retry=3, backtrace=True, tags=["t1"], custom={"a": 1})
def plain(x):
    return x


class Resize(sidequest.Job, name="Resize", queue="images"):
    def perform(self, path, width):
        record("resize", path, width, self.jid)


@sidequest.job(name="AsyncEcho")
async def async_echo(value, delay=0.0):
    await asyncio.sleep(delay)  # the job's own work, if asked for
    record("async", value, threading.current_thread().name)


@sidequest.job(name="Boom", retry=2, backtrace=3)
def boom(message):
    record("boom", message)
    raise ValueError(message)


@sidequest.job(name="NoRetry", retry=False)
def no_retry():
    record("noretry")
    raise RuntimeError("no second chance")


@sidequest.job(name="NoDead", retry=0, dead=False)
def no_dead():
    raise RuntimeError("vanish")


class CustomDelay(sidequest.Job, name="CustomDelay", retry=1):
    def perform(self):
        raise KeyError("custom")

    def retry_in(self, count, exc):
        return 1000 + count

    def retries_exhausted(self, payload, exc):
        record("exhausted", payload["jid"], type(exc).__name__)


@sidequest.job(name="Sleepy")
def sleepy(seconds, tag=""):
    record("sleepy-start", tag)
    time.sleep(seconds)  # the job's own work: a job that takes this long
    record("sleepy-done", tag)


@sidequest.job(name="WaitsForFile")
def waits_for_file(path, tag=""):
    """Runs until the file `path` exists (at most 60 s): it needs no Redis while it waits, so it
    can span an outage and end when the test says."""
    record("file-start", tag)
    end = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.02)  # the job's own poll of the test's file: no Redis while it waits
    record("file-done", tag)


def _wait_push(key, limit=60.0):
    """Wait until the test pushes to the list `key` (at most `limit` seconds), in blocking pops
    of a second: redis-py 8 cuts a single blocking call after 5 s (a TimeoutError, which would
    end the job early on a machine slow enough to keep a test from pushing within 5 s)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and _r().blpop([key], timeout=1) is None:
        pass


@sidequest.job(name="Blocker")
def blocker(key):
    """Runs until the test pushes to `key` (or 60 s pass)."""
    record("blocker-start", key)
    _wait_push(key)
    record("blocker-done", key)


@sidequest.job(name="Noop")
def noop(*args):
    pass


@sidequest.job(name="ExitHard")
def exit_hard():
    os._exit(3)


@sidequest.job(name="Spin")
def spin(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    record("spin", n > 0)


@sidequest.job(name="RubyEcho")
def ruby_echo(*args):
    """Same wire name as the Ruby job in tests/ruby/jobs.rb: a job pushed by Ruby runs here."""
    record("ruby-echo", *args)


@sidequest.job(name="AsyncWait")
async def async_wait(key):
    """Awaits (without blocking any thread) until the test sets `key` in Redis."""
    record("async-wait-start", key)
    while not _r().exists(key):
        await asyncio.sleep(0.01)  # the job's own poll of the test's key, yielding the loop
    record("async-wait-done", key)


class FastBoom(sidequest.Job, name="FastBoom", retry=2):
    def perform(self, message):
        record("fastboom", message, self.payload.get("retry_count"))
        raise ValueError(message)

    def retry_in(self, count, exc):
        return 0.05

    def retries_exhausted(self, payload, exc):
        record("exhausted", payload["jid"], type(exc).__name__, payload["retry_count"])


@sidequest.job(name="Stamp")
def stamp(label):
    """Records when it started, to measure scheduling latency."""
    record("stamp", label, time.time())


@sidequest.job(name="Work")
def work(n, seconds=0.0, gate=None):
    """Records ("work-start", n, pid) and ("work-done", n, pid), so a test can count runs per job.

    With `gate`, it waits until the test creates that key (at most `seconds`, else 60 s)
    instead of sleeping: a job the test can hold in flight for as long as it likes.
    """
    record("work-start", n, os.getpid())
    if gate:
        end = time.monotonic() + (seconds or 60.0)
        while not _r().exists(gate) and time.monotonic() < end:
            time.sleep(0.01)  # the job's own poll of the test's gate
    elif seconds:
        time.sleep(seconds)  # the job's own work
    record("work-done", n, os.getpid())


@sidequest.job(name="Timed")
def timed(n, seconds, gate=None):
    """Records ("timed-start"|"timed-done", n, pid, epoch seconds): which runs ended before a kill.
    With `gate`, it ends only once the test has set that key too (after `seconds`)."""
    record("timed-start", n, os.getpid(), time.time())
    time.sleep(seconds)  # the job's own work
    _wait_for(gate, limit=600.0)
    record("timed-done", n, os.getpid(), time.time())


# -- jobs for task tests ------------------------------------------------------------------------
@sidequest.job(name="Signup")
def signup(product_id):
    """The seed's bulk sign-up: every third product fails for a business reason."""
    if product_id % 3 == 0:
        raise sidequest.JobFailed(f"product {product_id}: seller is not qualified")
    sidequest.task_message(f"product {product_id} signed up", progress={"done": 1, "of": 1})
    record("signup", product_id)


class FlakyOnce(sidequest.Job, name="FlakyOnce", retry=2):
    def perform(self, n):
        if self.payload.get("retry_count") is None:
            raise ConnectionError(f"upstream hiccup {n}")
        record("flaky-ok", n)

    def retry_in(self, count, exc):
        return 0.05


class AlwaysBroken(sidequest.Job, name="AlwaysBroken", retry=1):
    def perform(self):
        raise RuntimeError("bug in the importer")

    def retry_in(self, count, exc):
        return 0.05


@sidequest.job(name="OnComplete")
def on_complete(task_id):
    record("on_complete", task_id)


@sidequest.job(name="OnSuccess")
def on_success(task_id):
    record("on_success", task_id)


# -- a worker hook: `sidequest worker -r jobs_for_tests` runs it -------------------------------
class Tagger:
    """Server middleware added by the hook below: records each job it wraps."""

    def __call__(self, job, payload, queue, call_next):
        if payload["class"] == "HookedEcho":
            record("middleware", payload["jid"])
        return call_next()


@sidequest.configure_worker
def _setup(worker):
    worker.config.server_middleware.add(Tagger)
    worker.death_handlers.append(lambda payload, exc: record("death-handler", payload["jid"], type(exc).__name__))


@sidequest.job(name="HookedEcho", retry=0)
def hooked_echo(fail=False):
    if fail:
        raise LookupError("to the dead set")


@sidequest.job(name="FailsInPid", retry=3)
def fails_in_pid(n, gate, pid_key):
    """Waits for `gate`, then raises only in the process whose pid the test stored at `pid_key`."""
    record("fip-start", n, os.getpid())
    _wait_for(gate, limit=600.0)
    if int(_r().get(pid_key) or 0) == os.getpid():
        record("fip-fail", n, os.getpid())
        raise RuntimeError(f"failing in {os.getpid()}")
    record("fip-done", n, os.getpid())


class WithHooks(sidequest.Job, name="WithHooks", retry=1):
    """Per-job hooks (the reliable-queue seed's afterSucceeded/afterFailed)."""

    def perform(self, fail):
        if fail:
            raise ValueError("asked to fail")

    def retry_in(self, count, exc):
        return 0.05

    def after_succeeded(self, *args):
        record("after-ok", *args)

    def after_failed(self, exc, *args):
        record("after-fail", type(exc).__name__, self.payload.get("retry_count"), *args)


def _fn_ok(*args):
    record("fn-after-ok", *args)


def _fn_fail(exc, *args):
    record("fn-after-fail", str(exc), *args)
    raise RuntimeError("a broken hook is logged, not a job failure")


@sidequest.job(name="FnWithHooks", retry=0, dead=False, after_succeeded=_fn_ok, after_failed=_fn_fail)
def fn_with_hooks(fail):
    if fail:
        raise KeyError("fn asked to fail")


# -- periodic jobs (features/test_periodic) -------------------------------------------------------------
class Tick(sidequest.Job, name="Tick"):
    """Records ("tick", label, entry id, tick time, enqueued_at, pid) for each run."""

    def perform(self, label):
        payload = self.payload
        record("tick", label, payload.get("periodic"), payload.get("periodic_at"), payload.get("enqueued_at"),
               os.getpid())


# Only workers started with SQ_TEST_PERIODIC=1 run it, so other tests' workers enqueue nothing.
if os.environ.get("SQ_TEST_PERIODIC") == "1":
    from datetime import timedelta

    sidequest.periodic(job=Tick, every=timedelta(seconds=1), args=["every-second"])


# -- rate limits and cancel (features/test_limiter, features/test_cancellation) ----------------------------------------
_limiters: dict = {}


def _limiter(kind: str, name: str, limit: int, seconds: float):
    """One limiter per (kind, name, limit, seconds) and process, on the tests' Redis."""
    url = os.environ["SQ_TEST_REDIS_URL"]
    key = (kind, name, limit, seconds, url)
    if key not in _limiters:
        client = sidequest.Client(sidequest.Config(redis_url=url))
        _limiters[key] = getattr(sidequest.limiter, kind)(name, limit, seconds, client=client)
    return _limiters[key]


class Limited(sidequest.Job, name="Limited", retry=3):
    """Holds a slot of a concurrent limiter for `hold` s, or with a `gate` until the test pushes
    to that list; records its start and end times, both inside the slot."""

    def perform(self, n, name, limit, hold, lease=60.0, gate=None):
        with _limiter("concurrent", name, limit, lease):
            record("limited-start", n, os.getpid(), time.time(), self.payload.get("retry_count"),
                   self.payload.get("snoozed"))
            if gate is None:
                time.sleep(hold)  # the job's own work, inside the slot
            else:
                _wait_push(gate)
            record("limited-end", n, os.getpid(), time.time())


@sidequest.job(name="Windowed", retry=3)
def windowed(n, name, limit, per):
    with _limiter("window", name, limit, per):
        record("windowed-start", n, time.time())


@sidequest.job(name="Bucketed", retry=3)
def bucketed(n, name, limit, interval):
    """Records Redis's clock just before and just after entering a bucket limiter: it admitted
    this job in between."""
    limiter = _limiter("bucket", name, limit, interval)
    before = _redis_seconds(limiter.redis)
    with limiter:
        payload = sidequest.current_job().payload
        record("bucketed-start", n, before, _redis_seconds(limiter.redis), payload.get("retry_count"),
               payload.get("snoozed"))


def _redis_seconds(client) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


@sidequest.job(name="HoldSlot")
def hold_slot(name, limit, lease, gate):
    """Holds a concurrent slot until the test pushes to the list `gate` (at most 60 s)."""
    with _limiter("concurrent", name, limit, lease):
        record("hold-slot", os.getpid())
        _wait_push(gate)


@sidequest.job(name="Cooperative", retry=3)
def cooperative(tag):
    """Works in small steps, asking `sidequest.cancelled()` before each (for 30 s at most).
    Cancelled, it records when (time.monotonic(), one clock for every process on this host)
    the last check that answered False began."""
    record("coop-start", tag)
    end = time.monotonic() + 30
    steps, last_clear = 0, None
    while time.monotonic() < end:
        asked = time.monotonic()
        if sidequest.cancelled():
            record("coop-cancelled", tag, steps, last_clear)
            raise sidequest.Cancelled()
        last_clear = asked
        steps += 1
        time.sleep(0.02)  # one step of the job's own work
    record("coop-done", tag)


# -- jobs for unique, status and result tests (features/test_unique, features/test_lookup, client/test_async_client) --
def _wait_for(gate, limit=30.0):
    """Until the test creates the key `gate` (at most `limit` s), woken by the key's keyspace
    event (the suite's redis-server sends them, see conftest): subscribed before the first look,
    so a key set in between is seen. Without events it still ends, looking every half second."""
    if not gate:
        return
    r = _r()
    listener = r.pubsub(ignore_subscribe_messages=True)
    listener.subscribe(f"__keyspace@{r.connection_pool.connection_kwargs.get('db', 0)}__:{gate}")
    try:
        end = time.monotonic() + limit
        while not r.exists(gate) and (left := end - time.monotonic()) > 0:
            listener.get_message(timeout=min(left, 0.5))
    finally:
        listener.close()


@sidequest.job(name="UniqueWork", unique_for=60)
def unique_work(n, gate=None):
    """Unique per `n`; with `gate`, it runs until the test creates that key."""
    record("unique-start", n)
    _wait_for(gate)
    record("unique-done", n)


@sidequest.job(name="UniqueAtStart", unique_for=60, unique_until="start")
def unique_at_start(n, gate=None):
    record("unique-start", n)
    _wait_for(gate)


@sidequest.job(name="UniqueBoom", unique_for=60, retry=0)
def unique_boom(n):
    raise ValueError(f"unique boom {n}")


class UniqueRetry(sidequest.Job, name="UniqueRetry", unique_for=60, retry=3):
    def perform(self, n):
        raise ConnectionError(f"upstream down {n}")

    def retry_in(self, count, exc):
        return 1000


@sidequest.job(name="Compute", result_ttl=60)
def compute(n, gate=None):
    """Returns a JSON value; with `gate`, only once the test creates that key."""
    _wait_for(gate)
    return {"n": n, "double": 2 * n, "items": [n, None, True]}


@sidequest.job(name="ComputeAsync", result_ttl=60)
async def compute_async(n):
    await asyncio.sleep(0.01)  # the job's own (awaited) work
    return n * 10


@sidequest.job(name="ComputeBoom", result_ttl=60, retry=0)
def compute_boom(n):
    raise ValueError(f"cannot compute {n}")


class ComputeRetry(sidequest.Job, name="ComputeRetry", result_ttl=60, retry=3):
    def perform(self, n):
        raise TimeoutError(f"slow upstream {n}")

    def retry_in(self, count, exc):
        return 1000


@sidequest.job(name="ComputeNotJSON", result_ttl=60)
def compute_not_json():
    return {1, 2, 3}


@sidequest.job(name="CountWithSidequestRedis")
def count_with_sidequest_redis(n):
    """Counts its runs with the worker's own Redis (`sidequest.redis()`)."""
    sidequest.redis().incr("visits")


# -- jobs for topology tests (Redis itself fails over: what ran is kept outside it) --------------
@sidequest.job(name="Logged")
def logged(n, seconds=0.0):
    """Appends "n pid epoch" to the file $SQ_TEST_RUN_LOG (one write, under PIPE_BUF: whole lines even
    from many processes), so a count of runs survives whatever Redis loses in a failover."""
    if seconds:
        time.sleep(seconds)  # the job's own work
    fd = os.open(os.environ["SQ_TEST_RUN_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {os.getpid()} {time.time():.3f}\n".encode())
    finally:
        os.close(fd)


# -- capsule jobs
@sidequest.job(name="CapsuleSpan")
def capsule_span(n, queue, seconds=0.0):
    """Records ("span-start", n, pid) as it starts and ("span", n, queue, pid, start, end) once done
    (`queue`: the one it was pushed to), so a test sees overlaps and what was in flight."""
    record("span-start", n, os.getpid())
    start = time.time()
    if seconds:
        time.sleep(seconds)  # the job's own work: spans that can overlap
    record("span", n, queue, os.getpid(), start, time.time())


@sidequest.job(name="BulkAt")
def bulk_at(n):
    """Records ("bulk-at", n, when it ran)."""
    record("bulk-at", n, time.time())


# -- iterable jobs (tests/features/test_iteration.py) --------------------------------------------------------
class IterCount(sidequest.IterableJob, name="IterCount"):
    """Pushes each number of range(n) to the list `key`: the list is the record of what ran."""

    checkpoint_every = 50

    def build_enumerator(self, n, key, pause=0.0005, *, cursor):
        return sidequest.iteration.range_items(0, n, cursor=cursor)

    def each_iteration(self, item, n, key, pause=0.0005):
        time.sleep(pause)  # the item's work: long enough that a signal lands mid-iteration
        sidequest.redis().rpush(key, item)


class IterEveryItem(IterCount, name="IterEveryItem"):
    """IterCount saving its cursor after every item (the cancel test counts single items)."""

    checkpoint_every = 1


class IterSliced(IterCount, name="IterSliced"):
    """IterCount in slices of at most 0.3 s; each slice's start is pushed to `key`:slices."""

    max_iteration_runtime = 0.3

    def on_start(self):
        sidequest.redis().rpush(f"{self.payload['args'][1]}:slices", f"start {self.cursor}")

    def on_resume(self):
        sidequest.redis().rpush(f"{self.payload['args'][1]}:slices", f"resume {self.cursor}")

    def on_complete(self):
        sidequest.redis().rpush(f"{self.payload['args'][1]}:slices", "complete")


# -- workflow jobs ---------------------------------------------------------------------------------
@sidequest.job(name="WfAdd")
def wf_add(x, y, tag):
    """Records its run under `tag`; returns x + y (in a chain, x is the previous step's result, as
    Celery passes it: first)."""
    record("wf", tag, "add", x, y)
    return x + y


@sidequest.job(name="WfSub")
def wf_sub(x, y):
    """Celery's example: `chain(sub.s(10, 1), sub.s(100))` runs sub(9, 100) = -91."""
    return x - y


@sidequest.job(name="WfSum")
def wf_sum(values, tag):
    """A chord's callback: records the list it got (first, as Celery passes it) and returns its sum
    (None counts as 0)."""
    record("wf", tag, "sum", values)
    return sum(v or 0 for v in values)


@sidequest.job(name="WfNotify")
def wf_notify(results, channel, *, urgent=False):
    """A chord's callback as Celery's `notify.s("ops")`: returns what it was given, in order."""
    return [results, channel, urgent]


class WfPayloadKwargs(sidequest.Job, name="WfPayloadKwargs"):
    """Returns its payload's positional arguments and its "kwargs" key (where keyword arguments travel)."""

    def perform(self, *args, **kwargs):
        return {"args": self.payload["args"], "kwargs": self.payload.get("kwargs")}


@sidequest.job(name="WfStep")
def wf_step(*given):
    """Records that step `name` ran, with what came before its own arguments (a mutable step's
    dependencies' results, first); returns the name (markup and all). Its own arguments are the
    last two: `.s(tag, name)`."""
    *previous, tag, name = given
    record("wf", tag, name, *previous)
    return name


@sidequest.job(name="WfFail", retry=False)
def wf_fail(*given):
    """Fails for good at once (a business failure, never retried); `.s(tag, name)` as wf_step."""
    *previous, tag, name = given
    record("wf", tag, name, *previous)
    raise sidequest.JobFailed(f"step {name} <failed> on purpose")


@sidequest.job(name="WfFlaky", retry=0)
def wf_flaky(tag, name):
    """Fails (straight to the dead set: retry=0) until `test:ok:<tag>` is set, then returns its name."""
    record("wf", tag, name)
    if not _r().exists(f"test:ok:{tag}"):
        raise RuntimeError(f"step {name} fails until test:ok:{tag} is set")
    return name


@sidequest.job(name="WfGate")
def wf_gate(tag, n):
    """Waits (in the job) until `test:gate:<tag>` is set, so that many finish at the same moment."""
    while not _r().exists(f"test:gate:{tag}"):
        time.sleep(0.005)  # the job's own poll of the test's gate, short so that all see it at once
    record("wf", tag, "gate", n)
    return n


@sidequest.job(name="WfUntilCancelled")
def wf_until_cancelled(tag):
    """Runs until its workflow is cancelled, then ends as cancelled."""
    record("wf", tag, "started")
    while not sidequest.cancelled():
        time.sleep(0.05)  # the job's own work between its checks, as a cooperative job's
    record("wf", tag, "saw cancel")
    raise sidequest.Cancelled()


# -- jobs for the asyncio runner (worker/test_asyncio_runner; scenarios/test_reliability's kill test) -----------------
@sidequest.job(name="AsyncTimed")
async def async_timed(n, seconds, gate=None):
    """`Timed` as a coroutine: ("timed-start"|"timed-done", n, pid, epoch seconds), `gate` too."""
    record("timed-start", n, os.getpid(), time.time())
    await asyncio.sleep(seconds)  # the job's own work
    while gate and not await _ar().exists(gate):
        await asyncio.sleep(0.02)  # the job's own poll of the test's gate, yielding the loop
    record("timed-done", n, os.getpid(), time.time())


async def _arecord(kind: str, *values) -> None:
    """`record` without blocking the loop: hundreds of jobs that each made a blocking round trip
    held the loop for seconds on a loaded machine, long enough for the runner's own connect to
    time out on it (issue 28 item 17)."""
    import json

    await _ar().rpush("test:ran", json.dumps([kind, *values]))


_gates: dict = {}  # (loop, gate key) -> [the task polling that key for the loop's jobs, how many wait]


async def _gate_opened(gate: str) -> None:
    """Until the test sets `gate`: one poll per loop and gate, however many jobs await it (one
    per job was 6,000 commands a second for 300 jobs, a load of its own)."""
    async def poll() -> None:
        while not await _ar().exists(gate):
            await asyncio.sleep(0.05)  # the jobs' poll of the test's gate, yielding the loop

    loop = asyncio.get_running_loop()
    watch = _gates.get((loop, gate))
    if watch is None or watch[0].done():
        watch = _gates[(loop, gate)] = [loop.create_task(poll()), 0]
    watch[1] += 1
    try:
        await asyncio.shield(watch[0])  # a job cancelled leaves the poll to the others
    finally:
        watch[1] -= 1
        if not watch[1] and not watch[0].done():  # the last waiter was cancelled
            watch[0].cancel()


@sidequest.job(name="AsyncHeld")
async def async_held(n, gate):
    """Records its start and the thread it runs on, then awaits until the test sets `gate`;
    a cancellation (a hard stop) is recorded too."""
    await _arecord("held-start", n, threading.get_ident())
    try:
        await _gate_opened(gate)
    except asyncio.CancelledError:
        record("held-cancelled", n)  # blocking: an await here could be cancelled in its turn
        raise
    await _arecord("held-done", n)


@sidequest.job(name="AsyncBoom", retry=2)
async def async_boom(message):
    await asyncio.sleep(0)  # a real suspension before it raises
    raise ValueError(message)


@sidequest.job(name="AsyncSlow", retry=1, timeout=0.2)
async def async_slow():
    """Past its 0.2 s time limit: cancelled; records only a cancellation."""
    try:
        await asyncio.sleep(30)  # far past its time limit: cancelled long before
    except asyncio.CancelledError:
        record("slow-cancelled")
        raise


@sidequest.job(name="AsyncCount")
async def async_count(key):
    """Counts through the worker's own Redis on the loop (`sidequest.client.async_client.redis()`)."""
    r = sidequest.client.async_client.redis()
    await r.hset(key, mapping={"seen": 1})
    seen = {str(k): str(v) for k, v in (await r.hgetall(key)).items()}
    record("counted", await r.incr(f"{key}:n"), seen, await r.set(f"{key}:s", "x"))


# -- keyword arguments (worker/test_executor, scenarios/test_ruby_client) -------------------------------
@sidequest.job(name="KwSync")
def kw_sync(user_id, *, template="welcome", extra=None):
    record("kw", "sync", user_id, template, extra)


@sidequest.job(name="KwAsync")
async def kw_async(user_id, *, template="welcome", extra=None):
    await asyncio.sleep(0)  # a real suspension: it runs as a coroutine
    record("kw", "async", user_id, template, extra)


@sidequest.job(name="KwTimed", timeout=30)
def kw_timed(user_id, *, template="welcome", extra=None):
    """Timed: runs on a thread of its own (`executor.ThreadExecutor._run_timed`)."""
    record("kw", "timed", user_id, template, extra)


@sidequest.job(name="KwTimedAsync", timeout=30)
async def kw_timed_async(user_id, *, template="welcome", extra=None):
    await asyncio.sleep(0)  # a real suspension: it runs as a coroutine
    record("kw", "timed-async", user_id, template, extra)


class KwClass(sidequest.Job, name="KwClass", retry=0, dead=False):
    """A Job class given keyword arguments; its hooks get them too."""

    def perform(self, user_id, template="welcome", *, fail=False, **rest):
        record("kw", "class", user_id, template, rest)
        if fail:
            raise ValueError("asked to fail")

    def after_succeeded(self, *args, **kwargs):
        record("kw-after-ok", list(args), kwargs)

    def after_failed(self, exc, *args, **kwargs):
        record("kw-after-fail", type(exc).__name__, list(args), kwargs)


def _kw_fn_ok(*args, **kwargs):
    record("kw-fn-after-ok", list(args), kwargs)


@sidequest.job(name="KwFnHooks", retry=0, dead=False, after_succeeded=_kw_fn_ok)
def kw_fn_hooks(user_id, *, template="welcome"):
    record("kw", "fn-hooks", user_id, template, None)


@sidequest.job(name="KwEcho")
def kw_echo(*args, **kwargs):
    """Same wire name as the Ruby job in tests/ruby/jobs.rb, which records what Ruby passes to perform."""
    record("kw-echo", list(args), kwargs)


# -- durable steps (tests/scenarios/test_steps_crash.py) -------------------------------------------
def _step_body(n, name, gate=None, kill=False):
    """A step's body: records ("step-start"|"step-end", n, name, pid, attempt); with `gate`, it
    waits for that key (the test kills the worker meanwhile); with `kill`, it kills its process."""
    current = sidequest.current_step()
    record("step-start", n, name, os.getpid(), current.attempt)
    if kill:
        os.kill(os.getpid(), 9)
    if gate:
        _wait_for(gate, limit=60.0)
    record("step-end", n, name, os.getpid(), current.attempt)
    return {"n": n, "step": name, "key": current.idempotency_key}


@sidequest.job(name="StepsOrder")
def steps_order(n, gate_step=None, gate=None):
    """Three steps; `gate_step`'s body waits for the key `gate`."""
    keys = [sidequest.step(name, _step_body, n, name, gate if name == gate_step else None)["key"]
            for name in ("charge", "receipt", "crm")]
    record("steps-done", n, os.getpid(), keys)


@sidequest.job(name="AsyncStepsOrder")
async def async_steps_order(n, gate_step=None, gate=None):
    async def body(name):
        return await asyncio.to_thread(_step_body, n, name, gate if name == gate_step else None)

    keys = [(await sidequest.astep(name, body, name))["key"] for name in ("charge", "receipt", "crm")]
    record("steps-done", n, os.getpid(), keys)


@sidequest.job(name="StepsPoison")
def steps_poison(n):
    """Its second step kills its worker, every time."""
    sidequest.step("first", _step_body, n, "first")
    sidequest.step("pill", _step_body, n, "pill", None, True)


# -- durable waits (tests/scenarios/test_waits.py) ------------------------------------------------
@sidequest.job(name="WaitsApproval")
def waits_approval(n):
    """A step, then a wait for the event "approved"; records when it resumed past the wait."""
    sidequest.step("asked", lambda: record("waits-asked", n, os.getpid()))
    answer = sidequest.wait_for("approved", timeout=120)
    record("waits-done", n, answer, os.getpid(), time.time())


@sidequest.job(name="AsyncWaitsApproval")
async def async_waits_approval(n):
    await sidequest.astep("asked", lambda: record("waits-asked", n, os.getpid()))
    answer = await sidequest.await_for("approved", timeout=120)
    record("waits-done", n, answer, os.getpid(), time.time())

"""Edges of a job's life against a real Redis: lost replies, settling a job that is no longer
ours, recovery and its lock, start-up checks, input refused at push, odd queue names, and
task bookkeeping that never reads job JSON.

Lost replies are made real with `CuttingProxy`, a TCP relay written here: every byte goes to
the real redis-server and every reply comes from it, but once armed it forwards one command,
waits until Redis has executed it (checked on a direct connection), and then closes the
client's socket instead of passing the reply on. That is exactly a connection lost after the
write and before the acknowledgement, with no mock of Redis anywhere.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from conftest import wait_until
from helpers import ran, reserved, zset_items
from jobs_for_tests import echo, fn_with_hooks, hooked_echo, record
from redis.backoff import NoBackoff
from redis.retry import Retry

from sidequest import Client, JobArgumentError, Task
from sidequest.jobs.payload import decode, encode
from sidequest.store import keys
from sidequest.store.connection import check_server, connect, version_problem
from sidequest.store.scripts import Scripts
from sidequest.worker.background.recovery import Recovery
from sidequest.worker.fetch.fetchers import ReliableFetch, UnitOfWork
from sidequest.worker.lifecycle import Lifecycle
from sidequest.worker.outcome import Outcome

IDENTITY = "host:1:abc"  # the fetching processor's process; no heartbeat hash: it counts as dead
ME = "me:1:aaa"  # the recovering process
LOCK = "sidequest:recovery-lock"
RESERVATIONS = "sidequest:reservations"


# -- a relay to the real Redis that can lose one reply -----------------------------------------

class CuttingProxy:
    """Relays TCP between clients and the real redis-server. `arm(trigger, written)`: the next
    client command containing `trigger` is forwarded, and once `written()` (read on a direct
    connection) shows Redis executed it, the client's connection is closed without its reply."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # so the accept loop notices `close()`
        self.port = self.listener.getsockname()[1]
        self.cuts = 0  # replies lost after Redis executed the command
        self.misses = 0  # armed commands that never showed their effect
        self._armed: tuple[bytes, Callable[[], bool]] | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def arm(self, trigger: bytes, written: Callable[[], bool]) -> None:
        with self._lock:
            self._armed = (trigger, written)

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            downstream.settimeout(None)
            self._spawn(self._relay, downstream, socket.create_connection(self.upstream))

    def _relay(self, down: socket.socket, up: socket.socket) -> None:
        tail = b""
        written: Callable[[], bool] | None = None
        deadline = 0.0
        try:
            while not self._closed.is_set():
                if written is not None:
                    if written():
                        self.cuts += 1
                        return  # Redis executed it: the client never gets the reply
                    if time.monotonic() > deadline:
                        self.misses += 1  # it never ran: the test fails on `cuts`
                        return
                ready, _, _ = select.select([down, up], [], [], 0.01)
                if down in ready:
                    data = down.recv(65536)
                    if not data:
                        return
                    up.sendall(data)
                    with self._lock:
                        if self._armed is not None and written is None:
                            trigger = self._armed[0]
                            window = tail + data
                            if trigger in window:
                                written, self._armed = self._armed[1], None
                                deadline = time.monotonic() + 30
                            tail = window[-len(trigger):]
                if up in ready:
                    data = up.recv(65536)
                    if not data:
                        return
                    if written is None:
                        down.sendall(data)
        except OSError:
            return
        finally:
            for s in (down, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


@pytest.fixture
def proxy(redis_server) -> Iterator[CuttingProxy]:
    relay = CuttingProxy(redis_server.port)
    yield relay
    relay.close()


def db_of(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def move_to(r: redis.Redis, key: str, queue: str = "default") -> bytes:
    """Take the oldest job of `queue` into list `key` by hand; return its bytes."""
    raw = r.rpop(f"queue:{queue}")
    assert raw is not None
    r.lpush(key, raw)
    return raw


# -- 1. a lost reply is reconciled from the processor's own list ---------------------------------

def test_a_job_in_our_list_whose_fetch_reply_was_lost_is_adopted_once(config, r, client):
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["lost"])
    raw = move_to(r, fetch.reserved)  # a reserve that ran in Redis but whose reply never came
    fetch.lost_reply()

    unit = fetch.retrieve_work()
    assert unit is not None and unit.raw == raw and unit.queue == "default"

    began = time.monotonic()
    assert fetch.retrieve_work() is None  # the queue is empty, and the adopted job is not adopted again
    assert time.monotonic() - began < config.fetch_timeout + 0.5
    assert r.lrange(fetch.reserved, 0, -1) == [raw]  # held once, until its outcome is applied

    assert unit.apply(Outcome.done(), [0]) is True
    fetch.flush()
    assert r.llen(fetch.reserved) == 0 and r.llen("queue:default") == 0


def test_without_lost_reply_a_job_left_in_our_list_is_not_taken_again(config, r, client):
    """The control of the test above: reconciling happens only after a lost reply."""
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["held"])
    raw = move_to(r, fetch.reserved)
    assert fetch.retrieve_work() is None
    assert r.lrange(fetch.reserved, 0, -1) == [raw]


def test_a_reserve_whose_reply_is_cut_runs_the_job_on_the_next_fetch(config, r, client, proxy, redis_url):
    """The same, end to end: the real RESERVE script runs and its reply is lost on the wire."""
    through = connect(proxy.url(db_of(redis_url)))
    scripts = Scripts(through)
    r.script_load(scripts.reserve.script)  # so the cut command is the EVALSHA that moves the job
    fetch = ReliableFetch(config, through, IDENTITY, scripts, slot=0)
    client.push(echo, ["cut"])
    raw = r.lindex("queue:default", 0)

    proxy.arm(b"EVALSHA", written=lambda: r.llen(fetch.reserved) == 1)
    with pytest.raises(redis.ConnectionError):
        fetch.retrieve_work()
    assert proxy.cuts == 1 and r.llen("queue:default") == 0 and r.lrange(fetch.reserved, 0, -1) == [raw]

    fetch.lost_reply()  # what the processor does on a connection error
    unit = fetch.retrieve_work()
    assert unit is not None and unit.raw == raw and unit.queue == "default"
    unit.apply(Outcome.done(), [0])
    fetch.flush()
    assert r.llen(fetch.reserved) == 0
    through.close()


# -- 2. settling a job that is no longer ours writes nothing -------------------------------------

def _retry_blob(raw: bytes) -> tuple[str, float]:
    payload = decode(raw)
    payload.update(retry_count=0, error_class="ValueError", error_message="boom", failed_at=time.time())
    return encode(payload), time.time() + 60


def test_settle_refuses_bytes_that_are_not_in_our_reserved_list(config, r, client):
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["not ours"])
    raw = r.rpop("queue:default")  # taken by someone else: never in our list
    unit = UnitOfWork("default", raw, fetch)
    blob, at = _retry_blob(raw)
    assert unit.apply(Outcome("retry", blob=blob, at=at), [0]) is False
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and reserved(r) == []


@pytest.mark.parametrize("kind", ["retry", "dead", "put_back", "done"])
def test_an_outcome_applied_after_recovery_took_the_job_writes_nothing(config, r, client, kind):
    """A processor paused past its heartbeat TTL: recovery put its job back, then it resumes."""
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["forked"])
    unit = fetch.retrieve_work()
    assert unit is not None and r.lrange(fetch.reserved, 0, -1) == [unit.raw]

    assert Recovery(config, r, ME, Scripts(r)).run() == 1  # IDENTITY has no heartbeat: dead

    blob, at = _retry_blob(unit.raw)
    outcome = {"retry": Outcome("retry", blob=blob, at=at), "dead": Outcome("dead", blob=blob, at=at),
               "put_back": Outcome.put_back(), "done": Outcome.done()}[kind]
    applied = unit.apply(outcome, [0])
    fetch.flush()
    assert applied is (kind == "done")  # a success is deferred; its removal finds nothing either
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    [live] = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]  # only recovery's copy
    assert live["jid"] == decode(unit.raw)["jid"] and live["recovery_count"] == 1


# -- 3. recovery reads the registered lists, under a lock only its owner releases ----------------

def _orphan(r: redis.Redis, client: Client, owner: str, arg: str = "orphan") -> tuple[str, bytes]:
    key = keys.reserved(owner, 0)
    client.push(echo, [arg])
    raw = move_to(r, key)
    r.sadd(RESERVATIONS, key)
    return key, raw


def test_recovery_puts_a_dead_processors_jobs_back_and_forgets_its_list(config, r, client):
    key, raw = _orphan(r, client, "dead:9:zzz")
    r.sadd("processes", "dead:9:zzz")
    assert Recovery(config, r, ME, Scripts(r)).run() == 1
    [back] = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    original = decode(raw)
    assert back["recovery_count"] == 1 and back["jid"] == original["jid"] and back["args"] == ["orphan"]
    assert r.exists(key) == 0 and not r.sismember(RESERVATIONS, key)
    assert not r.sismember("processes", "dead:9:zzz")  # its expired identity is pruned too
    assert r.exists(LOCK) == 0


def test_recovery_leaves_a_live_processors_list_alone(config, r, client):
    key, raw = _orphan(r, client, "alive:2:bbb")
    r.hset("alive:2:bbb", mapping={"beat": time.time(), "busy": 1})
    assert Recovery(config, r, ME, Scripts(r)).run() == 0
    assert r.lrange(key, 0, -1) == [raw] and r.sismember(RESERVATIONS, key)
    assert r.llen("queue:default") == 0


def test_recovery_lock_held_by_another_makes_run_a_no_op_that_leaves_the_lock(config, r, client):
    key, raw = _orphan(r, client, "dead:9:zzz")
    r.set(LOCK, "other:3:ccc", px=10_000)
    recovery = Recovery(config, r, ME, Scripts(r))
    assert recovery.run() == 0
    assert r.get(LOCK) == b"other:3:ccc" and r.pttl(LOCK) > 0
    assert r.lrange(key, 0, -1) == [raw]

    r.delete(LOCK)  # the other process finished (or its lock expired)
    assert recovery.run() == 1
    assert r.exists(LOCK) == 0 and r.llen("queue:default") == 1


class _LockTakenMidRun:
    """A feature whose op stands in for time passing: our lock expires and another process
    takes it while we are still recovering."""

    name = "lock-taken"
    lua = ""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def ops(self, point, payload, outcome):  # contributes no operation (returns None)
        self.r.set(LOCK, "other:4:ddd", px=10_000)

    def running(self, payload):
        return None


def test_recovery_never_releases_a_lock_it_no_longer_owns(config, r, client):
    _orphan(r, client, "dead:9:zzz")
    lifecycle = Lifecycle([_LockTakenMidRun(r)])
    assert Recovery(config, r, ME, Scripts(r, lifecycle.lua), lifecycle=lifecycle).run() == 1
    assert r.get(LOCK) == b"other:4:ddd"


# -- 4. the client never re-sends a command whose reply was lost ---------------------------------

def test_a_push_whose_reply_is_lost_raises_and_is_written_once(config, r, proxy, redis_url):
    client = Client(config.replace(redis_url=proxy.url(db_of(redis_url))))
    assert client.redis.ping()  # connected through the relay (sidequest.store.connection.connect)
    proxy.arm(b"EXEC", written=lambda: r.llen("queue:default") >= 1)
    with pytest.raises(redis.ConnectionError):
        client.push(echo, ["once"])
    assert proxy.cuts == 1
    items = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert [i["args"] for i in items] == [["once"]]


def test_a_client_that_re_sends_would_write_the_job_twice(config, r, proxy, redis_url):
    """The relay's control: a redis-py client allowed one retry doubles the same MULTI."""
    resending = redis.Redis.from_url(proxy.url(db_of(redis_url)), retry=Retry(NoBackoff(), 1))
    proxy.arm(b"EXEC", written=lambda: r.llen("queue:default") >= 1)
    pipe = resending.pipeline(transaction=True)
    pipe.lpush("queue:default", b'{"jid":"twice"}')
    pipe.execute()
    assert proxy.cuts == 1 and r.lrange("queue:default", 0, -1) == [b'{"jid":"twice"}'] * 2
    resending.close()


def test_a_push_is_never_re_sent_even_on_a_client_that_would(config, r, proxy, redis_url):
    """sidequest sends its pushes itself (`store.direct`): the client's retry setting cannot double them."""
    resending = redis.Redis.from_url(proxy.url(db_of(redis_url)), retry=Retry(NoBackoff(), 1))
    client = Client(config, redis_client=resending)
    proxy.arm(b"EXEC", written=lambda: r.llen("queue:default") >= 1)
    with pytest.raises(redis.ConnectionError):
        client.push(echo, ["once"])
    items = [json.loads(x) for x in r.lrange("queue:default", 0, -1)]
    assert proxy.cuts == 1 and [i["args"] for i in items] == [["once"]]
    assert client.push(echo, ["after"])  # the lane reconnects for the next push
    assert r.llen("queue:default") == 2
    resending.close()


def test_connect_configures_no_retries(redis_url):
    client = connect(redis_url)
    assert client.connection_pool.connection_kwargs["retry"].get_retries() == 0
    client.close()


def test_death_handlers_run_when_the_dead_outcomes_reply_is_lost(proxy, start, r, client, redis_url, caplog):
    caplog.set_level(logging.WARNING, logger="sidequest")
    launcher = start(redis_url=proxy.url(db_of(redis_url)),
                     death_handlers=[lambda payload, exc: record("death-handler", payload["jid"])])
    r.script_load(launcher.recovery.scripts.settle.script)  # the cut EVALSHA is the one that runs
    proxy.arm(b"$4\r\ndead\r\n", written=lambda: r.zcard("dead") == 1)  # SETTLE's mode argument
    jid = client.push(hooked_echo, [True])  # retry=0: straight to the dead set
    wait_until(lambda: ran(r, "death-handler") or "was not written" in caplog.text, 30,
               message="the dead outcome to be settled")
    assert proxy.cuts == 1 and [e["jid"] for e, _ in zset_items(r, "dead")] == [jid]
    assert ran(r, "death-handler") == [[jid]]


def test_a_settle_sent_again_after_its_reply_was_lost_counts_as_written(proxy, start, r, client, redis_url, caplog):
    """A dropped job (retry=0, dead=False) is settled by removing it, with nothing written
    elsewhere: only the trace recovery leaves tells a lost reply from a job taken by another."""
    caplog.set_level(logging.WARNING, logger="sidequest")
    launcher = start(redis_url=proxy.url(db_of(redis_url)))
    r.script_load(launcher.recovery.scripts.settle.script)  # the cut EVALSHA is the one that runs
    proxy.arm(b"$3\r\nack\r\n", written=lambda: ran(r, "fn-after-fail") == [] and not reserved(r)
              and r.llen("queue:default") == 0)
    client.push(fn_with_hooks, [True])
    wait_until(lambda: ran(r, "fn-after-fail") or "was not written" in caplog.text, 10,
               message="the dropped outcome to be settled")
    assert proxy.cuts == 1
    assert ran(r, "fn-after-fail") == [["'fn asked to fail'", True]]  # after_failed ran, once
    assert "was not written" not in caplog.text and "recovered" not in caplog.text


def test_an_outcome_of_a_job_recovery_took_is_still_refused_after_a_lost_reply(config, r, client):
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["taken over"])
    unit = fetch.retrieve_work()
    assert unit is not None
    assert Recovery(config, r, ME, Scripts(r)).run() == 1  # IDENTITY has no heartbeat: dead
    assert r.sismember(keys.recovered(IDENTITY), unit.raw) and r.ttl(keys.recovered(IDENTITY)) > 0
    assert unit.apply(Outcome("dropped"), [0]) is False  # not "written by an earlier attempt"


# -- 5. start-up checks ----------------------------------------------------------------------------

def test_check_server_is_silent_on_noeviction_and_names_any_other_policy(r, redis_url):
    before = r.config_get("maxmemory-policy")["maxmemory-policy"]
    try:
        r.config_set("maxmemory-policy", "noeviction")
        assert check_server(r, redis_url) == []
        r.config_set("maxmemory-policy", "allkeys-lru")
        [warning] = check_server(r, redis_url)
        assert "allkeys-lru" in warning and "noeviction" in warning
    finally:
        r.config_set("maxmemory-policy", before)


def test_check_server_accepts_the_real_server_version(r, redis_url):
    version = r.info("server")["redis_version"]
    assert tuple(int(p) for p in version.split(".")[:2]) >= (6, 2)
    check_server(r, redis_url)  # no RedisUnavailableError


def test_redis_older_than_6_2_is_refused():
    for old in ("6.0.16", "5.0.7", "4.0.9"):
        problem = version_problem(old)
        assert problem is not None and old in problem and "6.2 or newer" in problem
    for fine in ("6.2.0", "6.2.14", "7.0.15", "7.2.4", "8.0.0"):
        assert version_problem(fine) is None


# -- 6. input refused at push, nothing written --------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused_naming_the_argument(client, r, value):
    with pytest.raises(JobArgumentError, match=r"argument 1 .*args\[1\]\['x'\]\[0\] is -?(nan|inf)"):
        client.push(echo, ["ok", {"x": [value]}])
    with pytest.raises(JobArgumentError, match=r"argument 0 .*args\[0\] is -?(nan|inf)"):
        client.push(echo, [value])
    with pytest.raises(JobArgumentError, match=r"job 1 of the bulk: argument 0"):
        client.push_bulk(echo, [[1], [value], [3]])
    assert r.keys() == []


FIXED_NOW = 1_700_000_000.5


def _size_of_echo(config, r, arg: str) -> int:
    """The stored size in bytes of an Echo job with this one argument (then cleaned away)."""
    Client(config, clock=lambda: FIXED_NOW).push(echo, [arg])
    size = len(r.lindex("queue:default", 0))
    r.flushdb()
    return size


def test_a_payload_over_max_payload_size_is_refused_and_one_at_the_limit_is_not(config, r):
    limit = 1000
    base = _size_of_echo(config, r, "")  # jid, created_at, enqueued_at: same length every time
    small = Client(config.replace(max_payload_size=limit), clock=lambda: FIXED_NOW)

    with pytest.raises(JobArgumentError, match=r"1,001 bytes of JSON, over max_payload_size \(1,000\);"
                                               r" pass a reference .* or raise max_payload_size"):
        small.push(echo, ["x" * (limit - base + 1)])
    assert r.keys() == []

    small.push(echo, ["x" * (limit - base)])
    assert len(r.lindex("queue:default", 0)) == limit


def test_payload_size_counts_bytes_not_characters(config, r):
    small = Client(config.replace(max_payload_size=1000))
    with pytest.raises(JobArgumentError, match=r"over max_payload_size"):
        small.push(echo, ["é" * 450])  # 450 characters, 900 bytes, plus the envelope
    assert r.keys() == []


def test_a_bulk_with_one_job_too_big_writes_none_of_them(config, r):
    small = Client(config.replace(max_payload_size=1000))
    with pytest.raises(JobArgumentError, match=r"over max_payload_size"):
        small.push_bulk(echo, [["a"], ["x" * 2000], ["b"]])
    with pytest.raises(JobArgumentError, match=r"over max_payload_size"):
        small.push_bulk(echo, [["a"], ["b"], ["x" * 2000]], at=time.time() + 60)  # scheduled too
    assert r.keys() == []


def test_a_deeply_nested_argument_is_a_clear_error_not_a_recursion_error(client, r):
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(JobArgumentError, match=r"argument 0 .*nested too deeply"):
        client.push(echo, [deep])
    nested: dict = {}
    for _ in range(100_000):
        nested = {"k": nested}
    with pytest.raises(JobArgumentError, match=r"nested too deeply"):
        client.push(echo, ["fine", nested])
    assert r.keys() == []


@pytest.mark.parametrize("args, options", [(["\ud800"], {}), ([{"k\udfff": 1}], {}), (["ok"], {"queue": "q\udcff"})],
                         ids=["arg", "dict-key", "queue-name"])
def test_a_string_that_is_not_valid_unicode_is_refused_as_a_bad_argument(client, r, args, options):
    with pytest.raises(JobArgumentError):
        client.push(echo, args, **options)
    assert r.keys() == []


# -- 7. queue names as Ruby Sidekiq accepts them ------------------------------------------------

ODD_QUEUES = ["has space", "a:b:c", "files ü 日本", "q" * 1000]


def test_jobs_on_queues_with_spaces_colons_unicode_and_1000_chars_run(start, client, r):
    jids = {name: client.push(echo, [name], queue=name) for name in ODD_QUEUES}
    assert all(r.sismember("queues", name) for name in ODD_QUEUES)
    assert {m.decode() for m in r.smembers("queues")} == set(ODD_QUEUES)
    for name in ODD_QUEUES:
        [payload] = [json.loads(x) for x in r.lrange(keys.queue(name), 0, -1)]
        assert payload["queue"] == name and payload["jid"] == jids[name]

    start(queues=tuple([name, 0] for name in ODD_QUEUES))
    wait_until(lambda: len(ran(r, "echo")) == len(ODD_QUEUES), message="every odd queue's job to run")
    assert sorted(a[0] for a in ran(r, "echo")) == sorted(ODD_QUEUES)
    wait_until(lambda: not reserved(r), message="the jobs to be settled")
    assert all(r.llen(keys.queue(name)) == 0 for name in ODD_QUEUES)


# -- 8. task bookkeeping is read from the payload's own fields, never from its text -------------

def test_task_ids_and_jids_inside_args_never_touch_a_task(start, client, r):
    task = Task.create("one echo", client=client)
    jid = task.add(echo, "real")
    task.seal()
    start()
    wait_until(lambda: task.status()["done"], message="the task to complete")
    wait_until(lambda: not reserved(r), message="the task job to be settled")
    status, [event] = task.status(), task.events()
    assert event["jid"] == jid and event["status"] == "finished"
    task_keys_before = sorted(r.keys("sidequest:task:*"))

    fake = "0123456789abcdef01234567"
    lookalikes = [client.push(echo, [{"task_id": task.id, "jid": jid}]),
                  client.push(echo, [{"jid": fake}]),
                  client.push(echo, [f'"task_id":"{task.id}","jid":"{jid}"'])]
    wait_until(lambda: len(ran(r, "echo")) == 4, message="the look-alike jobs to run")
    wait_until(lambda: not reserved(r), message="the look-alike jobs to be settled")

    assert task.status() == status
    assert task.events() == [event]  # same status, messages, times
    assert sorted(r.keys("sidequest:task:*")) == task_keys_before
    assert not r.keys(f"*{fake}*")
    assert all(r.hget(keys.task_events(task.id), j) is None for j in lookalikes)

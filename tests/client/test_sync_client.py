import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from jobs_for_tests import Resize, plain

import sidequest
from sidequest import Client, Config, JobArgumentError, JobDefinitionError
from sidequest.jobs.registry import Registry


def queued(r, queue="default"):
    return [json.loads(x) for x in r.lrange(f"queue:{queue}", 0, -1)]


def test_perform_async_writes_sidekiqs_layout(client, r):
    jid = client.push(plain, [1])
    assert r.smembers("queues") == {b"default"}
    [p] = queued(r)
    assert p == {"retry": 3, "queue": "default", "backtrace": True, "tags": ["t1"],
                 "a": 1, "args": [1], "class": "Plain", "jid": jid,
                 "created_at": p["created_at"], "enqueued_at": p["enqueued_at"]}
    assert isinstance(p["created_at"], float) and abs(p["created_at"] - time.time()) < 5
    assert p["enqueued_at"] >= p["created_at"]


def test_class_job_and_default_name(client, r):
    class Local(sidequest.Job, registry=Registry()):
        def perform(self):
            pass
    assert Local.name == "client.test_sync_client.test_class_job_and_default_name.<locals>.Local"
    jid = client.push(Resize, ["a.png", 10])
    [p] = queued(r, "images")
    assert p["class"] == "Resize" and p["jid"] == jid and p["retry"] is True


def test_module_level_calls_use_the_default_client(config, r):
    sidequest.configure(config)
    jid = Resize.perform_async("x.png", 5)
    assert queued(r, "images")[0]["jid"] == jid
    jid2 = Resize.set(queue="urgent", retry=False).perform_async("y.png", 6)
    [p] = queued(r, "urgent")
    assert p["jid"] == jid2 and p["retry"] is False and p["queue"] == "urgent"
    assert sidequest.push("HardWorker", [1, 2], queue="ruby")
    assert queued(r, "ruby")[0]["class"] == "HardWorker"


def test_perform_in_and_at_schedule_without_enqueued_at(client, r):
    now = time.time()
    jid_in = client.push(plain, [1], in_=60)
    jid_td = client.push(plain, [2], in_=timedelta(minutes=2))
    jid_at = client.push(plain, [3], at=datetime.now(UTC) + timedelta(hours=1))
    jid_epoch = client.push(plain, [4], at=now + 7200)
    entries = {json.loads(m)["jid"]: (json.loads(m), s) for m, s in r.zrange("schedule", 0, -1, withscores=True)}
    assert set(entries) == {jid_in, jid_td, jid_at, jid_epoch}
    assert all("enqueued_at" not in p and "at" not in p for p, _ in entries.values())
    assert entries[jid_in][1] == pytest.approx(now + 60, abs=2)
    assert entries[jid_td][1] == pytest.approx(now + 120, abs=2)
    assert entries[jid_at][1] == pytest.approx(now + 3600, abs=2)
    assert entries[jid_epoch][1] == pytest.approx(now + 7200, abs=0.01)
    assert r.llen("queue:default") == 0


def test_a_time_in_the_past_enqueues_now(client, r):
    client.push(plain, [1], at=time.time() - 100)
    client.push(plain, [2], in_=0)
    client.push(plain, [3], in_=-5)  # a delay not in the future: at once (docs/jobs.md)
    client.push(plain, [4], in_=timedelta(seconds=-1))
    assert r.zcard("schedule") == 0 and r.llen("queue:default") == 4


def test_bulk_push_in_order_with_jids(client, r):
    jids = plain.job_class.set(client=client).perform_bulk([[i] for i in range(2500)])
    assert len(jids) == 2500 and len(set(jids)) == 2500
    items = queued(r)
    # LPUSH puts the newest at the head; consumers take from the tail, so the first pushed runs first
    assert [p["args"][0] for p in reversed(items)] == list(range(2500))
    assert [p["jid"] for p in reversed(items)] == jids


def test_bulk_with_times_per_job(client, r):
    now = time.time()
    jids = client.push_bulk(plain, [[1], [2]], at=[now + 100, now - 1])
    assert r.zcard("schedule") == 1 and r.llen("queue:default") == 1
    assert json.loads(r.zrange("schedule", 0, 0)[0])["jid"] == jids[0]


@pytest.mark.parametrize("call, words", [
    (lambda c: c.push(plain, [object()]), "argument 0 (object)"),
    (lambda c: c.push(plain, [1, {2: 3}]), "argument 1 (dict)"),
    (lambda c: c.push(plain, [1], queue=""), "option 'queue'"),
    (lambda c: c.push(plain, [1], queue="a\nb"), "option 'queue'"),
    (lambda c: c.push(plain, [float("nan")]), "nan, which JSON cannot hold"),
    (lambda c: c.push(plain, [float("inf")]), "inf, which JSON cannot hold"),
    (lambda c: c.push(plain, [1], retry="often"), "option 'retry'"),
    (lambda c: c.push(plain, [1], timeout=-1), "option 'timeout'"),
    (lambda c: c.push(plain, [1], custom={"extra": {1, 2}}), "custom field 'extra'"),
    (lambda c: c.push(plain, [1], extra=1), "unknown job option 'extra'"),
    (lambda c: c.push(plain, [1], jid="mine"), "set by sidequest itself"),
    (lambda c: c.push(plain, [1], in_="soon"), "takes a number of seconds"),
    (lambda c: c.push(plain, [1], in_=float("nan")), "finite"),
    (lambda c: c.push(plain, [1], in_=datetime.now(UTC)), "use perform_at"),
    (lambda c: c.push(plain, [1], at=datetime.now() + timedelta(hours=1)), "naive datetime"),
    (lambda c: c.push(plain, [1], at=timedelta(1)), "use perform_in"),
    (lambda c: c.push_bulk(plain, [[1], [2], [set()]]), "job 2 of the bulk: argument 0 (set)"),
    (lambda c: c.push_bulk(plain, [[1], [2]], at=[1]), "2 jobs"),
    (lambda c: c.push(42, []), "job name"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(client, r, call, words):
    with pytest.raises(JobArgumentError) as info:
        call(client)
    assert words in str(info.value)
    assert r.dbsize() == 0


def test_bad_definitions_fail_at_definition_time():
    with pytest.raises(JobDefinitionError, match="option 'retry'"):
        sidequest.job(retry="yes", registry=Registry())(lambda: None)
    reg = Registry()
    sidequest.job(name="Dup", registry=reg)(lambda: 1)

    def other():
        pass
    with pytest.raises(JobDefinitionError, match="already registered"):
        sidequest.job(name="Dup", registry=reg)(other)


def test_client_middleware_can_change_or_stop_a_push(config, r):
    class Stamp:
        def __call__(self, job_name, payload, queue, call_next):
            payload["stamped_by"] = job_name
            return call_next()

    def stop_secret(job_name, payload, queue, call_next):
        return None if payload["args"] == ["secret"] else call_next()

    config.client_middleware.add(Stamp)
    config.client_middleware.add(stop_secret)
    c = Client(config)
    assert c.push(plain, ["secret"]) is None
    jid = c.push(plain, ["public"])
    [p] = queued(r)
    assert p["jid"] == jid and p["stamped_by"] == "Plain"
    jids = c.push_bulk(plain, [["secret"], ["x"]])
    assert jids[0] is None and jids[1]
    assert r.llen("queue:default") == 2


def test_middleware_adding_non_json_is_refused_before_writing(config, r):
    config.client_middleware.add(lambda n, p, q, nxt: (p.update(bad=object()), nxt())[1])
    with pytest.raises(JobArgumentError, match="not JSON"):
        Client(config).push(plain, [1])
    assert r.dbsize() == 0


def test_unreachable_redis_is_a_clear_error():
    from conftest import free_port

    from sidequest.errors import RedisUnavailableError

    c = Client(Config(redis_url=f"redis://:hunter2@127.0.0.1:{free_port()}/0"))
    with pytest.raises(RedisUnavailableError) as info:
        c.push(plain, [1])
    assert "cannot reach Redis at redis://:****@127.0.0.1" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_the_argument_count_check_agrees_with_signature_bind_for_every_shape():
    """`arguments.bind` checks a push by count where that is all Signature.bind would check."""
    import inspect

    from sidequest.errors import JobArgumentError
    from sidequest.jobs.arguments import bind

    def shapes():
        def a(): ...
        def b(x): ...
        def c(x, y=1): ...
        def d(x, /, y, *rest): ...
        def e(*rest): ...
        def f(x, *, key=2): ...
        def g(x, *, key): ...
        def h(x=1, y=2, **more): ...
        return [a, b, c, d, e, f, g, h]

    for fn in shapes():
        signature = inspect.signature(fn)
        for count in range(5):
            args = list(range(count))
            try:
                signature.bind(*args)
                expected = True
            except TypeError:
                expected = False
            try:
                bind(fn.__name__, signature, args)
                got = True
            except JobArgumentError:
                got = False
            assert got is expected, (fn.__name__, count)

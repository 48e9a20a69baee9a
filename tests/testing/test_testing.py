"""sidequest.testing (fake and inline modes, a private Redis) and its pytest plugin."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import sidequest
import sidequest.testing
from sidequest import Config, JobArgumentError, Registry, UnknownJobError
from sidequest.errors import JobTimeoutError
from sidequest.testing import Failure, FakeClient, NoRedisError, PrivateRedis, fake, inline

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]  # tests/testing/ -> the repository
EXAMPLE = ROOT / "examples" / "testing"

REG = Registry()
ran: list[Any] = []


@sidequest.job(name="T.Add", registry=REG)
def add(a: int, b: int) -> None:
    ran.append(("add", a, b))


@sidequest.job(name="T.Mail", queue="mail", retry=3, registry=REG)
def mail(to: str) -> None:
    ran.append(("mail", to))


@sidequest.job(name="T.Chain", registry=REG)
def chain(n: int) -> None:
    """Pushes: the next link now, and a scheduled note."""
    ran.append(("chain", n))
    if n > 0:
        chain.perform_async(n - 1)
        note.perform_in(100 + n, f"from {n}")


@sidequest.job(name="T.Note", registry=REG)
def note(text: str) -> None:
    ran.append(("note", text))


@sidequest.job(name="T.Boom", registry=REG)
def boom(message: str) -> None:
    ran.append(("boom", message))
    raise ValueError(message)


@sidequest.job(name="T.Async", registry=REG)
async def async_job(value: Any) -> None:
    await asyncio.sleep(0)  # a real suspension: the job runs on an event loop
    ran.append(("async", value, threading.current_thread().name))


@sidequest.job(name="T.AsyncNest", registry=REG)
async def async_nest(n: int) -> None:
    ran.append(("nest", n))
    if n > 0:
        async_nest.perform_async(n - 1)  # inline: runs inside this one


@sidequest.job(name="T.Forever", registry=REG)
def forever() -> None:
    forever.perform_async()


@sidequest.job(name="T.Slow", registry=REG, timeout=0.05)
async def slow() -> None:
    try:
        await asyncio.sleep(5)  # far past its time limit: cancelled long before
    except asyncio.CancelledError:
        ran.append(("slow", "cancelled"))
        raise


@sidequest.job(name="T.OwnTimeout", registry=REG)
async def own_timeout() -> None:
    await asyncio.sleep(0)  # a real suspension before its own TimeoutError
    raise TimeoutError("the upstream took too long")


@sidequest.job(name="T.TaskMessage", registry=REG)
def tells_progress() -> None:
    sidequest.task_message("half way")


class Seen(sidequest.Job, name="T.Seen", queue="seen", registry=REG):
    def perform(self, *args: Any) -> None:
        ran.append(("seen", self.jid, self.payload, list(args)))


stripe = sidequest.limiter.concurrent("T.stripe", 1)  # as an app defines them: at module level
quota = sidequest.limiter.window("T.quota", 1, per=3600)


@sidequest.job(name="T.Charge", registry=REG)
def charge(order_id: int) -> None:
    with stripe, quota:
        ran.append(("charge", order_id))


@sidequest.job(name="T.ChargeAsync", registry=REG)
async def charge_async(order_id: int) -> None:
    with stripe:
        ran.append(("charge async", order_id))


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


def at_hour() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


# -- fake: capturing -----------------------------------------------------------------------------
def test_fake_captures_every_way_of_pushing_without_redis() -> None:
    before = sidequest.default_client()
    with fake(registry=REG) as jobs:
        client = sidequest.default_client()
        assert isinstance(client, FakeClient) and client is jobs.client
        jids = [add.perform_async(1, 2), add.perform_in(60, 3, 4), add.perform_at(at_hour(), 5, 6),
                *add.perform_bulk([[7, 8], [9, 10]]), add.set(queue="urgent").perform_async(11, 12),
                Seen.perform_async("x"), sidequest.push("T.Add", [13, 14], queue="other")]
        assert all(isinstance(j, str) and len(j) == 24 for j in jids)
        assert [p["jid"] for p in jobs.pushed()] == jids
        assert [p["args"] for p in jobs.pushed(add)] == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10],
                                                         [11, 12], [13, 14]]
        assert [p["args"] for p in jobs.pushed(add, queue="urgent")] == [[11, 12]]
        assert [p["args"] for p in jobs.pushed("T.Add", queue="other")] == [[13, 14]]
        assert [p["args"] for p in jobs.pushed(Seen)] == [["x"]]
        assert [p["args"] for p in jobs.pushed(add.set(queue="x"))] == [p["args"] for p in jobs.pushed(add)]
        assert ran == []  # nothing ran
        assert jobs.scheduled_at(jids[0]) is None
        assert jobs.scheduled_at(jids[1]) == pytest.approx(time.time() + 60, abs=5)
        assert jobs.scheduled_at(jids[2]) == pytest.approx(time.time() + 3600, abs=5)
        with pytest.raises(KeyError):
            jobs.scheduled_at("0" * 24)
    assert sidequest.default_client() is before


def test_payloads_are_what_the_real_client_writes(client: sidequest.Client, r: Any) -> None:
    """Same fields in the same order, same JSON: immediate ones with enqueued_at, scheduled
    ones without."""
    real_jid = client.push(mail, ["a@b.c"], tags=["t"])
    real_scheduled = client.push(mail, ["a@b.c"], in_=60)
    real = json.loads(r.lrange("queue:mail", 0, -1)[0])
    [(blob, _)] = r.zrange("schedule", 0, -1, withscores=True)
    scheduled = json.loads(blob)
    with fake(client.config, registry=REG) as jobs:
        jid = mail.set(tags=["t"]).perform_async("a@b.c")
        jid2 = mail.perform_in(60, "a@b.c")
        captured, captured_scheduled = jobs.pushed()
    assert list(captured) == list(real)  # field order included
    times = ("jid", "created_at", "enqueued_at")
    assert {k: v for k, v in captured.items() if k not in times} == {
        k: v for k, v in real.items() if k not in times}
    assert captured["jid"] == jid and real["jid"] == real_jid
    assert list(captured_scheduled) == list(scheduled) and "enqueued_at" not in captured_scheduled
    assert captured_scheduled["jid"] == jid2 and scheduled["jid"] == real_scheduled


def test_pushed_returns_fresh_copies() -> None:
    with fake(registry=REG) as jobs:
        add.perform_async(1, 2)
        jobs.pushed()[0]["args"].append(99)
        assert jobs.pushed()[0]["args"] == [1, 2]


def test_non_json_arguments_are_refused_and_nothing_is_captured() -> None:
    with fake(registry=REG) as jobs:
        for bad in ({1, 2}, (1, 2), b"x", datetime.now(UTC), float("nan"), {1: "int key"}, object()):
            with pytest.raises(JobArgumentError):
                add.perform_async(bad, 1)
        with pytest.raises(JobArgumentError, match="job 1 of the bulk"):
            add.perform_bulk([[1, 2], [{3}, 4]])
        with pytest.raises(JobArgumentError):
            sidequest.push("T.Add", [object()])
        with pytest.raises(JobArgumentError, match="job 1 of the bulk"):  # not valid Unicode
            add.perform_bulk([[1, 2], ["\udcff", 3]])
        assert jobs.pushed() == []


def test_client_middleware_applies_and_is_json_checked() -> None:
    config = Config()
    seen: list[str] = []

    def stamp(job_name: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        seen.append(job_name)
        payload["tenant"] = "acme"
        return call_next()

    def skip_notes(job_name: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        return None if job_name == "T.Note" else call_next()

    config.client_middleware.add(stamp)
    config.client_middleware.add(skip_notes)
    with fake(config, registry=REG) as jobs:
        add.perform_async(1, 2)
        assert note.perform_async("dropped") is None
        assert [p["tenant"] for p in jobs.pushed()] == ["acme"]
        assert seen == ["T.Add", "T.Note"]

        def bad(job_name: str, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
            payload["when"] = datetime.now(UTC)
            return call_next()

        config.client_middleware.add(bad)
        with pytest.raises(JobArgumentError, match="is not JSON"):
            add.perform_async(3, 4)
        assert len(jobs.pushed()) == 1


def test_fake_uses_the_default_clients_config_and_restores_it_after_an_error() -> None:
    before = sidequest.default_client()
    config = Config()
    config.client_middleware.add(lambda name, payload, queue, call_next: {**call_next(), "mark": 1})
    mine = sidequest.configure(config)
    try:
        with pytest.raises(ZeroDivisionError), fake(registry=REG) as jobs:
            add.perform_async(1, 2)
            assert jobs.pushed()[0]["mark"] == 1
            with inline(registry=REG):  # nests, and gives the fake back on exit
                add.perform_async(3, 4)
            assert sidequest.default_client() is jobs.client
            1 / 0  # noqa: B018
        assert sidequest.default_client() is mine
    finally:
        sidequest.configure(client=before)
    assert ran == [("add", 3, 4)]


def test_clear_forgets_pending_jobs() -> None:
    with fake(registry=REG) as jobs:
        add.perform_async(1, 2)
        note.perform_async("x")
        jobs.clear(note)
        assert [p["class"] for p in jobs.pushed()] == ["T.Add"]
        jobs.drain()
        assert len(jobs.performed) == 1
        note.perform_async("y")
        jobs.clear()
        assert jobs.pushed() == [] and jobs.performed == [] and jobs.failed == []


# -- fake: draining ------------------------------------------------------------------------------
def test_drain_runs_pushed_jobs_and_scheduled_ones_in_time_order() -> None:
    with fake(registry=REG) as jobs:
        note.perform_at(time.time() + 7200, "two hours")
        note.perform_in(timedelta(days=30), "a month")
        chain.perform_async(2)
        note.perform_in(5, "five seconds")
        assert jobs.drain() == 8
        assert ran == [("chain", 2), ("chain", 1), ("chain", 0),  # what is due now, first
                       ("note", "five seconds"), ("note", "from 1"), ("note", "from 2"),
                       ("note", "two hours"), ("note", "a month")]
        assert jobs.pushed() == [] and len(jobs.performed) == 8
        assert jobs.drain() == 0


def test_a_job_sees_what_a_worker_would_give_it() -> None:
    with fake(registry=REG) as jobs:
        jid = Seen.perform_async(1.0, {"k": [None, True]}, "é")
        jobs.drain()
    [(_, job_jid, payload, args)] = ran
    assert job_jid == jid and payload["jid"] == jid and payload["class"] == "T.Seen"
    assert payload["queue"] == "seen" and "enqueued_at" in payload
    assert args == [1.0, {"k": [None, True]}, "é"] and isinstance(args[0], float)


def test_server_middleware_wraps_each_drained_job() -> None:
    config = Config()
    calls: list[tuple[str, str, str]] = []

    class Around:
        def __call__(self, job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
            calls.append((type(job).__name__, job.jid, queue))
            if payload["class"] == "T.Add":
                payload["args"][0] += 100  # the job receives it, as in a worker
            return call_next()

    def skip_notes(job: Any, payload: dict[str, Any], queue: str, call_next: Any) -> Any:
        return None if payload["class"] == "T.Note" else call_next()

    config.server_middleware.add(Around)
    config.server_middleware.add(skip_notes)
    with fake(config, registry=REG) as jobs:
        jid = add.perform_async(1, 2)
        mail.perform_async(7)
        jobs.clear(mail)
        note.perform_async("skipped")
        jobs.drain()
        assert jobs.performed[0]["args"] == [1, 2]  # recorded as pushed
    assert calls[0] == ("add", jid, "default") and len(calls) == 2
    assert ran == [("add", 101, 2)]


def test_async_jobs_run_in_drain() -> None:
    with fake(registry=REG) as jobs:
        async_job.perform_async("v")
        async_job.perform_in(60, "later")
        assert jobs.drain() == 2
    assert [(kind, value) for kind, value, _ in ran] == [("async", "v"), ("async", "later")]


def test_a_failing_job_makes_drain_raise_its_exception() -> None:
    with fake(registry=REG) as jobs:
        boom.perform_async("first")
        add.perform_async(1, 2)
        with pytest.raises(ValueError, match="first"):
            jobs.drain()
        [failure] = jobs.failed
        assert isinstance(failure, Failure) and failure.payload["args"] == ["first"]
        assert [p["class"] for p in jobs.pushed()] == ["T.Add"]  # the rest still waits
        jobs.drain()
        assert ran == [("boom", "first"), ("add", 1, 2)]


def test_drain_without_raising_records_failures_and_goes_on() -> None:
    with fake(registry=REG) as jobs:
        boom.perform_async("a")
        add.perform_async(1, 2)
        boom.perform_in(30, "b")
        sidequest.push("RubyOnly", [1])
        assert jobs.drain(raise_errors=False) == 4
        assert [(type(f.error), f.payload["args"]) for f in jobs.failed] == [
            (ValueError, ["a"]), (UnknownJobError, [1]), (ValueError, ["b"])]
        assert [p["class"] for p in jobs.performed] == ["T.Add"]


def test_drain_of_one_job_leaves_the_others() -> None:
    with fake(registry=REG) as jobs:
        sidequest.push("RubyOnly", [1])
        add.perform_async(1, 2)
        assert jobs.drain(add) == 1
        assert [p["class"] for p in jobs.pushed()] == ["RubyOnly"]
        with pytest.raises(UnknownJobError):
            jobs.drain()


def test_drain_stops_a_job_that_pushes_itself_forever() -> None:
    with fake(registry=REG) as jobs:
        forever.perform_async()
        with pytest.raises(RuntimeError, match="more keep coming"):
            jobs.drain(max_jobs=50)
        assert len(jobs.pushed(forever)) == 1


def test_the_timeout_option_applies() -> None:
    with fake(registry=REG) as jobs:
        slow.perform_async()
        with pytest.raises(JobTimeoutError):
            jobs.drain()
        # cancelled for real, and done with by the time drain() raises: the block closes its
        # loop with nothing left running on it
        assert ran == [("slow", "cancelled")]


def test_the_jobs_own_hooks_run_after_it(caplog: pytest.LogCaptureFixture) -> None:
    class Hooked(sidequest.Job, name="T.Hooked", registry=REG):
        def perform(self, n: int) -> None:
            if n < 0:
                raise ValueError("negative")

        def after_succeeded(self, *args: Any) -> None:
            ran.append(("succeeded", *args))
            if args == (0,):
                raise RuntimeError("hook bug")  # logged, not a failure

        def after_failed(self, exc: BaseException, *args: Any) -> None:
            ran.append(("failed", type(exc).__name__, *args))

    with fake(registry=REG) as jobs:
        Hooked.perform_async(1)
        Hooked.perform_async(-1)
        Hooked.perform_async(0)
        jobs.drain(raise_errors=False)
        assert len(jobs.performed) == 2 and len(jobs.failed) == 1
    assert ran == [("succeeded", 1), ("failed", "ValueError", -1), ("succeeded", 0)]
    assert "after_succeeded of T.Hooked raised" in caplog.text


# -- no Redis in fake mode -----------------------------------------------------------------------
def test_redis_use_raises_a_clear_error() -> None:
    with fake(registry=REG) as jobs:
        with pytest.raises(NoRedisError, match=r"fake\(\) has no Redis.*sidequest_redis fixture"):
            _ = sidequest.default_client().redis
        with pytest.raises(RuntimeError, match="sidequest_redis"):
            sidequest.Task.create("needs redis")
        # A task's jobs are captured by add/add_bulk; its records need Redis.
        task = sidequest.Task("t" * 24)
        task.add(tells_progress)
        task.add_bulk(add, [[1, 2]])
        assert [p["task_id"] for p in jobs.pushed()] == ["t" * 24] * 2
        with pytest.raises(NoRedisError, match="task_message"):
            jobs.drain()
    with inline(registry=REG), pytest.raises(NoRedisError, match=r"inline\(\) has no Redis"):
        _ = sidequest.default_client().redis


def test_limited_jobs_run_in_fake_and_inline_modes_as_any_other() -> None:
    """A limiter has no Redis to count in here: it lets every entry through (more than its limit
    of 1 too), so a test of a job that uses one needs no Redis."""
    with fake(registry=REG) as jobs:
        charge.perform_async(1)
        charge.perform_async(2)
        charge_async.perform_async(3)
        assert jobs.drain() == 3
    with inline(registry=REG):
        charge.perform_async(4)
        with stripe, stripe, quota, quota:  # outside a job as well
            charge.perform_async(5)
    assert ran == [("charge", 1), ("charge", 2), ("charge async", 3), ("charge", 4), ("charge", 5)]


# -- inline ---------------------------------------------------------------------------------------
def test_inline_runs_each_job_at_push() -> None:
    with inline(registry=REG) as jobs:
        jid = add.perform_async(1, 2)
        assert ran == [("add", 1, 2)] and isinstance(jid, str)
        add.perform_in(3600, 3, 4)
        add.perform_at(at_hour(), 5, 6)
        add.perform_bulk([[7, 8], [9, 10]])
        add.set(queue="urgent").perform_async(11, 12)
        sidequest.push("T.Add", [13, 14])
        chain.perform_async(1)  # its pushes run inside it, depth first
        assert ran[1:] == [("add", 3, 4), ("add", 5, 6), ("add", 7, 8), ("add", 9, 10),
                           ("add", 11, 12), ("add", 13, 14),
                           ("chain", 1), ("chain", 0), ("note", "from 1")]
        assert jobs.pushed() == [] and len(jobs.performed) == 10


@sidequest.job(name="T.Mailer", registry=REG)
def mailer(user_id: int, *, template: str = "welcome") -> None:
    ran.append(("mailer", user_id, template))


@sidequest.job(name="T.AsyncMailer", registry=REG, after_succeeded=lambda *a, **k: ran.append(("ok", a, k)))
async def async_mailer(user_id: int, *, template: str = "welcome") -> None:
    ran.append(("async mailer", user_id, template))


def test_keyword_arguments_reach_jobs_and_hooks_in_fake_and_inline_modes() -> None:
    with fake(registry=REG) as jobs:
        mailer.perform_async(1, template="reset")
        async_mailer.delay(2, template="reset")
        assert [(p["args"], p["kwargs"]) for p in jobs.pushed()] == [([1], {"template": "reset"}),
                                                                     ([2], {"template": "reset"})]
        jobs.drain()
    with inline(registry=REG):
        mailer.perform_async(3, template="bye")
        sidequest.push("T.Mailer", [4], kwargs={"template": "by name"})
        with pytest.raises(JobArgumentError, match="not a Python job of this codebase"):
            sidequest.push("RubyMailer", [5], kwargs={"template": "x"})
    assert ran == [("mailer", 1, "reset"), ("async mailer", 2, "reset"), ("ok", (2,), {"template": "reset"}),
                   ("mailer", 3, "bye"), ("mailer", 4, "by name")]


def test_inline_exceptions_reach_the_caller() -> None:
    with inline(registry=REG):
        with pytest.raises(ValueError, match="now"):
            boom.perform_async("now")
        with pytest.raises(JobArgumentError):
            add.perform_async({1}, 2)
        with pytest.raises(UnknownJobError):
            sidequest.push("RubyOnly", [1])
    assert ran == [("boom", "now")]


def test_inline_an_async_jobs_own_timeout_error_reaches_the_caller_as_it_is() -> None:
    """Not taken for a time limit (issue 37: it became a TypeError with no limit set)."""
    with inline(registry=REG), pytest.raises(TimeoutError, match="the upstream took too long"):
        own_timeout.perform_async()


def test_inline_async_jobs_pushing_async_jobs_do_not_deadlock() -> None:
    with inline(registry=REG):
        async_nest.perform_async(3)
        async_job.perform_async("x")
    assert ran[:4] == [("nest", 3), ("nest", 2), ("nest", 1), ("nest", 0)]
    assert ran[4][:2] == ("async", "x")


def test_inline_jobs_see_a_worker_payload() -> None:
    with inline(registry=REG):
        jid = Seen.perform_async([1, 2])
    [(_, job_jid, payload, args)] = ran
    assert job_jid == jid == payload["jid"] and args == [[1, 2]]


# -- a private Redis -------------------------------------------------------------------------------
def test_private_redis_starts_and_stops() -> None:
    with PrivateRedis() as server:
        client = sidequest.Client(Config(redis_url=server.url(3)))
        jid = client.push(add, [1, 2])
        [raw] = client.redis.lrange("queue:default", 0, -1)
        assert json.loads(raw)["jid"] == jid
        client.redis.close()
        url = server.url()
    assert not sidequest.store.connection.answers(url)
    with pytest.raises(RuntimeError, match="not running"):
        server.url()


# -- the pytest plugin -----------------------------------------------------------------------------
USER_JOBS = '''
import sidequest

@sidequest.job(queue="mail")
def welcome(user_id):
    if user_id < 0:
        raise ValueError("no such user")
    welcome_done.perform_in(60, user_id)

@sidequest.job
def welcome_done(user_id):
    DONE.append(user_id)

DONE = []
'''

USER_TESTS = '''
import json
import pytest
import sidequest
from sidequest.testing import FakeClient
import user_jobs

BEFORE = sidequest.default_client()

def test_fake(sidequest_fake):
    assert isinstance(sidequest.default_client(), FakeClient)
    user_jobs.welcome.perform_async(1)
    assert [p["args"] for p in sidequest_fake.pushed(user_jobs.welcome)] == [[1]]
    sidequest_fake.drain()
    assert user_jobs.DONE == [1]

def test_fake_failure(sidequest_fake):
    user_jobs.welcome.perform_async(-1)
    with pytest.raises(ValueError):
        sidequest_fake.drain()

def test_inline(sidequest_inline):
    user_jobs.welcome.perform_async(2)
    assert user_jobs.DONE[-1] == 2

@pytest.mark.parametrize("n", [1, 2])
def test_redis(sidequest_redis, n):
    assert sidequest.default_client() is sidequest_redis
    assert sidequest_redis.redis.dbsize() == 0  # clean for every test
    jid = user_jobs.welcome.perform_async(n)
    [raw] = sidequest_redis.redis.lrange("queue:mail", 0, -1)
    assert json.loads(raw)["jid"] == jid
    task = sidequest.Task.create("t")
    task.add(user_jobs.welcome, n)
    task.seal()
    assert task.status()["counts"]["enqueued"] == 1

def test_restored():
    assert sidequest.default_client() is BEFORE
'''


def test_plugin_fixtures_in_a_users_suite(pytester: pytest.Pytester) -> None:
    """The entry point loads the plugin in a suite of its own (a subprocess, as a user runs it)."""
    pytester.makepyfile(user_jobs=USER_JOBS, test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)


def test_plugin_is_registered_by_entry_point() -> None:
    from importlib.metadata import entry_points

    [point] = [e for e in entry_points(group="pytest11") if e.name == "sidequest"]
    assert point.value == "sidequest.testing.pytest_plugin"


def test_plugin_fixture_names_do_not_clash_with_this_suites() -> None:
    import sidequest.testing.pytest_plugin as plugin

    ours = {name for name in vars(plugin) if name.startswith("sidequest_")}
    assert ours == {"sidequest_fake", "sidequest_inline", "sidequest_redis", "sidequest_redis_server"}
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    for name in ours:
        assert f"def {name}(" not in conftest


# -- the documented example stays true ----------------------------------------------------------
def test_the_example_in_the_docs_is_the_one_in_examples() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    for name in ("shop_jobs.py", "test_shop_jobs.py"):
        blocks = re.findall(rf"```python\n# examples/testing/{re.escape(name)}\n(.*?)```", doc, re.S)
        assert blocks, f"docs/testing.md shows no {name}"
        assert blocks[0] == (EXAMPLE / name).read_text(encoding="utf-8"), (
            f"docs/testing.md and examples/testing/{name} differ")


def test_the_example_runs(pytester: pytest.Pytester) -> None:
    for path in EXAMPLE.glob("*.py"):
        pytester.makepyfile(**{path.stem: path.read_text(encoding="utf-8")})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=7)


def test_fake_mode_finds_and_drains_activejob_pushes_under_their_activejob_name():
    seen = []
    registry = Registry()

    @sidequest.job(name="SendReceiptJob", active_job=True, registry=registry)
    def receipt(order_id: int, currency: str, note: str = "") -> None:
        seen.append((order_id, currency, note))

    with sidequest.testing.fake(registry=registry) as jobs:
        receipt.perform_async(43, "gbp")
        sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"})
        assert [p["args"][0]["arguments"][:2] for p in jobs.pushed(receipt)] == [[43, "gbp"], [42, "eur"]]
        jobs.drain()
    assert seen == [(43, "gbp", ""), (42, "eur", "x")]

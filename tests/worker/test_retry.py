"""Retries and the dead set, Sidekiq-compatible, through a real worker."""

import json
import logging
import random
import time

from conftest import wait_until
from helpers import ran, reserved, zset_items
from jobs_for_tests import CustomDelay, FastBoom, boom, no_dead, no_retry

import sidequest
from sidequest.config import Config
from sidequest.errors import JobFailed
from sidequest.jobs.registry import Registry
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.fetchers import BasicFetch, UnitOfWork
from sidequest.worker.outcome import Outcome
from sidequest.worker.retry import Retrier, decompress_backtrace


def test_first_failure_goes_to_retry_with_sidekiqs_fields(start, client, r):
    start()
    before = time.time()
    jid = client.push(boom, ["kaput"])
    wait_until(lambda: r.zcard("retry") == 1, message="the job in the retry set")
    [(p, score)] = zset_items(r, "retry")
    assert p["jid"] == jid and p["class"] == "Boom" and p["args"] == ["kaput"]
    assert p["retry_count"] == 0 and p["error_class"] == "ValueError" and p["error_message"] == "kaput"
    assert before <= p["failed_at"] <= time.time() and "retried_at" not in p
    assert p["queue"] == "default"
    lines = decompress_backtrace(p["error_backtrace"])
    assert len(lines) <= 3 and "jobs_for_tests.py" in lines[0] and "in `boom'" in lines[0]
    # Sidekiq's backoff for count 0: 0**4 + 15 + rand(10) * 1
    assert before + 15 <= score <= time.time() + 25
    assert r.llen("queue:default") == 0


def test_retries_count_up_then_exhaust_into_dead_with_hooks(config, start, client, r):
    deaths = []
    start(death_handlers=[lambda payload, exc: deaths.append((payload["jid"], type(exc).__name__))])
    jid = client.push(FastBoom, ["again"])
    wait_until(lambda: r.zcard("dead") == 1, message="the job in the dead set after its retries")
    wait_until(lambda: deaths, message="the hooks, which run once the dead entry is written")
    assert [x[1] for x in ran(r, "fastboom")] == [None, 0, 1]  # retry_count seen on each run
    [(p, _)] = zset_items(r, "dead")
    assert p["jid"] == jid and p["retry_count"] == 2 and "retried_at" in p and "failed_at" in p
    assert ran(r, "exhausted") == [[jid, "ValueError", 2]]
    assert deaths == [(jid, "ValueError")]
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0


def test_retry_false_is_not_retried_nor_dead(start, client, r):
    launcher = start()
    client.push(no_retry, [])
    wait_until(lambda: ran(r, "noretry"))
    wait_until(lambda: not reserved(r, launcher.identity))
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_dead_false_drops_after_exhaustion(start, client, r):
    launcher = start()
    client.push(no_dead, [])
    wait_until(lambda: launcher.counters.failed.value or int(r.get("stat:failed") or 0), message="failure")
    wait_until(lambda: not reserved(r, launcher.identity))
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_retry_zero_goes_straight_to_dead(start, client, r):
    start()
    client.push(boom, ["once"], retry=0)
    wait_until(lambda: r.zcard("dead") == 1)
    assert r.zcard("retry") == 0


def test_custom_retry_in_and_retry_queue(start, client, r):
    start()
    before = time.time()
    client.push(CustomDelay, [], retry_queue="slow")
    wait_until(lambda: r.zcard("retry") == 1)
    [(p, score)] = zset_items(r, "retry")
    assert p["queue"] == "slow" and p["error_class"] == "KeyError"
    assert before + 1000 <= score <= time.time() + 1000


def test_unregistered_job_is_retried_like_a_name_error(start, client, r):
    start()
    client.push("NoSuchJob", [1])
    wait_until(lambda: r.zcard("retry") == 1)
    [(p, _)] = zset_items(r, "retry")
    assert p["class"] == "NoSuchJob" and p["error_class"] == "sidequest.errors.UnknownJobError"
    assert "no job named 'NoSuchJob' is registered" in p["error_message"]


def test_an_unknown_job_is_one_log_line_naming_it_and_the_workers_jobs(start, client, r, caplog):
    """Another project's job on a shared Redis: no traceback of sidequest's own code, one line
    with the name, what this worker runs, and the job's fate (retried with back-off, as Sidekiq
    retries a class it cannot find)."""
    from sidequest.jobs.registry import default_registry

    caplog.set_level(logging.INFO, logger="sidequest")
    start()
    before = time.time()
    jid = client.push("OtherProject::Mailer", [1])
    wait_until(lambda: r.zcard("retry") == 1, message="the unknown job in the retry set")
    [(p, score)] = zset_items(r, "retry")
    assert p["jid"] == jid and p["retry_count"] == 0 and p["error_class"] == "sidequest.errors.UnknownJobError"
    assert before + 15 <= score <= time.time() + 25  # Sidekiq's first back-off: 15 s and up to 9 more
    lines = [rec for rec in caplog.records if rec.name in ("sidequest.worker.job_run", "sidequest.worker.retry")]
    assert len(lines) == 1, [rec.getMessage() for rec in lines]
    [line] = lines
    message = line.getMessage()
    assert line.levelno == logging.WARNING and line.exc_info is None and "\n" not in message
    names = default_registry.names()
    assert f"OtherProject::Mailer {jid}: no job named 'OtherProject::Mailer'" in message
    assert f"it runs {len(names)}: {', '.join(names[:3])}" in message
    assert "; retry 1 of 25 in " in message
    assert "Traceback" not in caplog.text


def test_dead_set_is_trimmed_by_size_and_age(config, r):
    """Written through the unit of work's settle script, as a worker writes them."""
    clock = [1_000_000.0]
    settle_config = config.replace(dead_max_jobs=3, dead_timeout=100)
    fetch = BasicFetch(settle_config, r, Scripts(r), clock=lambda: clock[0])
    for jid in ["0", "1", "2", "3", "4", "late"]:
        if jid == "late":
            clock[0] += 200
        unit = UnitOfWork("default", b"{}", fetch)
        assert unit.apply(Outcome("dead", blob=f'{{"jid":"{jid}"}}', at=clock[0]), [0])
        clock[0] += 1
        if jid == "4":
            assert [p["jid"] for p, _ in zset_items(r, "dead")] == ["2", "3", "4"]
    assert [p["jid"] for p, _ in zset_items(r, "dead")] == ["late"]


def decide(exc, payload=None, retrier=None, job=None):
    retrier = retrier or Retrier(Config(), clock=lambda: 1000.0, rng=random.Random(3))
    payload = payload or {"class": "X", "args": [], "jid": "j", "queue": "q", "retry": True}
    return retrier.decide(job, payload, json.dumps(payload).encode(), "q", exc)


def test_outcomes_are_values_computed_without_redis():
    first = decide(ValueError("boom"))
    assert first.kind == "retry" and 1015 <= first.at <= 1024 and not first.exhausted
    filed = json.loads(first.blob)
    assert filed["retry_count"] == 0 and filed["failed_at"] == 1000.0 and filed["error_class"] == "ValueError"
    last = decide(ValueError("boom"), {"class": "X", "args": [], "jid": "j", "retry": 2, "retry_count": 1})
    assert last.kind == "dead" and last.exhausted and json.loads(last.blob)["retry_count"] == 2
    assert decide(ValueError(), {"class": "X", "args": [], "retry": False}).kind == "dropped"
    quiet = decide(ValueError(), {"class": "X", "args": [], "retry": 0, "dead": False})
    assert quiet.kind == "dropped" and quiet.exhausted
    assert decide(JobFailed("no")).kind == "dropped"
    assert "recovery_count" not in json.loads(decide(ValueError(), {"class": "X", "args": [],
                                                                    "recovery_count": 1}).blob)


def test_a_payload_that_cannot_be_written_back_is_dead_as_it_was():
    """A failing job whose payload decoded but cannot be encoded again: dead, its bytes unchanged."""
    retrier = Retrier(Config(), clock=lambda: 5.0)
    raw = b'{"class":"X","args":[1],"jid":"j","retry":true}'
    payload = json.loads(raw)
    payload["args"] = [float("nan")]  # what a lenient decoder would have let through
    outcome = retrier.decide(None, payload, raw, "q", ValueError("boom"))
    entry = json.loads(outcome.blob)
    assert outcome.kind == "dead" and outcome.exhausted and entry["args"] == [raw.decode()]
    assert entry["class"] == "sidequest.InvalidPayload" and "cannot be written back" in entry["error_message"]


def test_backoff_formula_and_error_message_cap():
    rng = random.Random(7)
    retrier = Retrier(Config(), clock=lambda: 0.0, rng=rng)
    for count in (0, 1, 5, 24):
        delay = retrier.delay(None, count, ValueError())
        assert count**4 + 15 <= delay <= count**4 + 15 + 9 * (count + 1)
    outcome = decide(ValueError("x" * 20_000), retrier=retrier)
    assert outcome.kind == "retry" and len(outcome.payload["error_message"]) == 10_000


def test_a_retry_in_that_returns_nonsense_falls_back_to_the_default():
    class Odd:
        def retry_in(self, count, exc):
            return "soon"  # "kill" and "discard" mean something (test_retry_control.py); other text does not
    retrier = Retrier(Config(), rng=random.Random(1))
    assert 15 <= retrier.delay(Odd(), 0, ValueError()) <= 24


def test_the_jobs_own_say_is_decided_here_as_values():
    """Retry, retry_on/discard_on and retry_in's "kill"/"discard" (through a real worker on both
    runners: test_retry_control.py)."""
    import sidequest

    class Job:
        def __init__(self):
            self.options = {"retry_on": (ConnectionError,), "discard_on": (KeyError,)}

        def retry_in(self, count, exc):
            return str(exc) if str(exc) in ("kill", "discard") else None

    asked = decide(sidequest.Retry(in_=30, exc=TimeoutError("busy")), job=Job())
    assert asked.kind == "retry" and asked.at == 1030.0 and asked.requested and not asked.exhausted
    assert asked.payload["error_class"] == "TimeoutError" and asked.payload["retry_count"] == 0
    capped = decide(sidequest.Retry(1), {"class": "X", "args": [], "retry": 1, "retry_count": 0})
    assert capped.kind == "dead" and capped.exhausted and not capped.requested
    assert decide(KeyError("k"), job=Job()).kind == "dropped"  # discard_on wins over retry_on
    killed = decide(ValueError("v"), job=Job())
    assert killed.kind == "dead" and killed.exhausted and killed.reason == "ValueError is not in retry_on"
    assert decide(ConnectionError("kill"), job=Job()).kind == "dead"
    discarded = decide(ConnectionError("discard"), job=Job())
    assert discarded.kind == "dropped" and not discarded.exhausted
    assert decide(ConnectionError("c"), job=Job()).kind == "retry"
    quiet = decide(ValueError("v"), {"class": "X", "args": [], "dead": False}, job=Job())
    assert quiet.kind == "dropped" and quiet.exhausted


RAILS_NAMES = Registry()  # the Python side of a Rails app's ActiveJob, for one test's worker


@sidequest.job(name="SendReceiptJob", registry=RAILS_NAMES)
def send_receipt(order_id, currency, note=""):
    raise ValueError(f"card declined for order {order_id}")


def test_an_activejobs_retry_and_death_lines_name_its_class_not_the_wrapper(start, client, caplog):
    caplog.set_level(logging.INFO, logger="sidequest")
    retried = sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"}, client=client)
    died = sidequest.push_active_job("SendReceiptJob", [43, "eur"], client=client, retry=0)
    start(registry=RAILS_NAMES)
    wait_until(lambda: any(died in m for m in caplog.messages if "dead set" in m) and any(
        retried in m for m in caplog.messages if "retry 1" in m), message="both outcomes logged")
    [retry_line] = [m for m in caplog.messages if retried in m and "retry 1" in m]
    assert retry_line.startswith(f"SendReceiptJob {retried} failed (ValueError); retry 1 of 25 in "), retry_line
    assert f"SendReceiptJob {died} moved to the dead set: ValueError" in caplog.messages
    assert "JobWrapper" not in caplog.text

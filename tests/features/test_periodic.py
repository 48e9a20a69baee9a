"""Periodic jobs: schedules (cron with croniter, seconds, time zones, intervals), the atomic claim
per tick, missed ticks, the config file's `:periodic:`, status, and real worker processes racing
for the same ticks.

Most tests drive a `PeriodicScheduler` by hand with a fixed clock (`run_due(now)`), so each tick is an
exact moment; the last ones run real `sidequest worker` processes for real seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until
from helpers import queue_items, ran
from jobs_for_tests import Tick, echo
from scenarios.test_reliability import procs, stop_all  # noqa: F401  (procs is a fixture)

import sidequest
from sidequest import Client, Config, ConfigError, JobDefinitionError
from sidequest.cli import main
from sidequest.features.periodic import (
    PeriodicRegistry,
    PeriodicScheduler,
    Schedule,
    ScheduleError,
    entries_from_config,
    forget,
    status,
)
from sidequest.features.periodic.scheduler import MISSED_AFTER, plan
from sidequest.jobs.registry import default_registry
from sidequest.store import keys
from sidequest.worker.launcher import Launcher

PARIS = ZoneInfo("Europe/Paris")


def epoch(*fields: int, tz=UTC) -> float:
    return datetime(*fields, tzinfo=tz).timestamp()


def entry_in(registry: PeriodicRegistry, *args, **kwargs):
    return sidequest.periodic(*args, registry=registry, **kwargs)


def scheduler(client: Client, registry: PeriodicRegistry) -> PeriodicScheduler:
    return PeriodicScheduler(client, registry.entries)


# -- schedules ---------------------------------------------------------------------------------

def test_five_field_cron_fires_on_its_minutes():
    s = Schedule.parse("*/5 * * * *")
    assert s.next_after(epoch(2026, 1, 1, 10, 2, 30)) == epoch(2026, 1, 1, 10, 5)
    assert s.next_after(epoch(2026, 1, 1, 10, 5)) == epoch(2026, 1, 1, 10, 10)  # strictly after
    assert s.latest_at(epoch(2026, 1, 1, 10, 5)) == epoch(2026, 1, 1, 10, 5)  # at or before
    assert s.latest_at(epoch(2026, 1, 1, 10, 4, 59)) == epoch(2026, 1, 1, 10, 0)
    assert s.text == "*/5 * * * *"


def test_six_field_cron_has_seconds_in_front():
    s = Schedule.parse("*/10 * * * * *")
    base = epoch(2026, 1, 1, 10, 0, 0)
    assert s.next_after(base + 0.5) == base + 10
    assert s.next_after(base + 10) == base + 20
    assert s.latest_at(base + 19.9) == base + 10
    # seconds first, as in Quartz: "30 0 * * * *" is 30 s past each hour, not every minute
    assert Schedule.parse("30 0 * * * *").next_after(base) == base + 30
    assert Schedule.parse("30 0 * * * *").next_after(base + 30) == base + 3600 + 30


def test_cron_reads_wall_clock_time_in_its_zone():
    s = Schedule.parse("0 9 * * *", tz="Europe/Paris")
    assert s.text == "0 9 * * * Europe/Paris"
    # winter: Paris is UTC+1, so 09:00 there is 08:00 UTC; summer: UTC+2, 07:00 UTC
    assert s.next_after(epoch(2026, 1, 15, 12, 0)) == epoch(2026, 1, 16, 8, 0)
    assert s.next_after(epoch(2026, 7, 15, 12, 0)) == epoch(2026, 7, 16, 7, 0)
    assert s.next_after(epoch(2026, 7, 15, 12, 0)) == epoch(2026, 7, 16, 9, 0, tz=PARIS)
    # across the spring change (29 March 2026): still 09:00 in Paris on both sides
    assert s.next_after(epoch(2026, 3, 28, 12, 0)) == epoch(2026, 3, 29, 9, 0, tz=PARIS)
    assert s.next_after(epoch(2026, 3, 29, 12, 0)) == epoch(2026, 3, 30, 9, 0, tz=PARIS)
    assert Schedule.parse("0 9 * * *", tz=PARIS) == s  # a ZoneInfo works too
    assert Schedule.parse("0 9 * * *").next_after(epoch(2026, 1, 15, 12, 0)) == epoch(2026, 1, 16, 9, 0)


def test_every_is_aligned_to_the_epoch():
    s = Schedule.parse(every=timedelta(seconds=30))
    assert s.next_after(1_000_000_005.5) == 1_000_000_020
    assert s.latest_at(1_000_000_020) == 1_000_000_020
    assert Schedule.parse(every=timedelta(hours=1)).next_after(epoch(2026, 1, 1, 10, 20)) == epoch(2026, 1, 1, 11)
    assert Schedule.parse(every=90).text == "every 1m30s"
    assert Schedule.parse(every="5m").every == 300 and Schedule.parse(every="10").every == 10
    assert Schedule.parse(every="1d").text == "every 1d"


@pytest.mark.parametrize("kwargs, words", [
    ({"cron": "61 * * * *"}, "not a cron expression"),
    ({"cron": "every day"}, "not a cron expression"),
    ({"cron": "0 0 1 1 * 0 2030"}, "more than six fields"),
    ({"cron": "0 0 30 2 *"}, "never fires"),
    ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "not a known time zone"),
    ({"every": 0.5}, "whole number of seconds"),
    ({"every": timedelta(milliseconds=1500)}, "whole number of seconds"),
    ({"every": "soon"}, "number with s, m, h or d"),
    ({"every": 10, "tz": "Europe/Paris"}, "cron schedules only"),
    ({"cron": "* * * * *", "every": 10}, "exactly one"),
    ({}, "exactly one"),
])
def test_bad_schedules_are_refused_with_the_reason(kwargs, words):
    with pytest.raises(ScheduleError, match=words):
        Schedule.parse(**kwargs)


# -- registering entries -----------------------------------------------------------------------

def test_periodic_registers_a_checked_entry():
    registry = PeriodicRegistry()
    entry = entry_in(registry, "*/5 * * * *", Tick, args=["a"], tz="Europe/Paris")
    assert entry.id == "Tick */5 * * * * Europe/Paris" and entry.job_name == "Tick" and entry.queue == "default"
    assert registry.entries() == [entry]
    assert entry_in(registry, "*/5 * * * *", Tick, args=["a"], tz="Europe/Paris") is not None  # same again: fine
    with pytest.raises(JobDefinitionError, match="own id="):
        entry_in(registry, "*/5 * * * *", Tick, args=["b"], tz="Europe/Paris")
    other = entry_in(registry, "*/5 * * * *", Tick, args=["b"], tz="Europe/Paris", id="tick-b", queue="low")
    assert other.queue == "low" and len(registry) == 2
    by_name = entry_in(registry, job="HardWorker", every=timedelta(minutes=1), args=[1, 2])
    assert by_name.id == "HardWorker every 1m" and by_name.job_name == "HardWorker"


@pytest.mark.parametrize("kwargs, words", [
    ({"cron": "*/5 * * * *", "job": Tick, "args": []}, "Tick takes"),  # does not fit perform(label)
    ({"cron": "*/5 * * * *", "job": Tick, "args": [object()]}, "JSON"),
    ({"cron": "bad", "job": Tick, "args": ["x"]}, "not a cron expression"),
    ({"cron": "*/5 * * * *", "job": Tick, "args": ["x"], "missed": "later"}, "enqueue' or 'skip"),
    ({"cron": "*/5 * * * *", "job": None}, "job must be"),
    ({"cron": "*/5 * * * *", "job": Tick, "args": "x"}, "args must be a list"),
])
def test_a_bad_entry_fails_where_it_is_registered(kwargs, words):
    with pytest.raises(JobDefinitionError, match=words):
        sidequest.periodic(registry=PeriodicRegistry(), **kwargs)


# -- the claim per tick ------------------------------------------------------------------------

def test_each_tick_is_enqueued_once_however_many_schedulers_race(client, r):
    registry = PeriodicRegistry()
    entry = entry_in(registry, job=Tick, every=timedelta(seconds=1), args=["x"])
    schedulers = [scheduler(Client(client.config), registry) for _ in range(3)]
    base = 1_800_000_000
    assert [s.run_due(base + 0.4) for s in schedulers] == [0, 0, 0]  # new entry: starts at the next tick
    assert r.llen("queue:default") == 0
    for second in range(1, 6):
        assert sum(s.run_due(base + second + 0.01) for s in schedulers) == 1
    jobs = queue_items(r)
    assert sorted(j["periodic_at"] for j in jobs) == [base + n for n in range(1, 6)]
    job = jobs[0]
    assert job["class"] == "Tick" and job["args"] == ["x"] and job["periodic"] == entry.id
    assert job["queue"] == "default" and len(job["jid"]) == 24 and job["enqueued_at"] == base + 5.01
    assert r.sismember("queues", "default")


def test_the_scheduler_wakes_on_the_next_tick(client):
    registry = PeriodicRegistry()
    entry_in(registry, "*/10 * * * * *", Tick, args=["x"])
    now = [1_800_000_003.0]
    sched = PeriodicScheduler(client, registry.entries, clock=lambda: now[0])
    sched.run_due()
    assert sched.next_wait() == 1.0  # capped: stops and new entries are noticed within a second
    now[0] = 1_800_000_009.5
    assert sched.next_wait() == pytest.approx(0.502)  # the tick at ...010, past it by a hair


def test_a_stall_shorter_than_the_missed_limit_enqueues_every_tick(client, r):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=1, args=["x"])
    sched = scheduler(client, registry)
    sched.run_due(1_800_000_000.2)
    assert sched.run_due(1_800_000_004.2) == 4  # ticks 1..4, each once, oldest first
    assert [j["periodic_at"] for j in reversed(queue_items(r))] == [1_800_000_001 + n for n in range(4)]


def test_a_tick_missed_while_every_worker_was_down_is_enqueued_once(client, r):
    registry = PeriodicRegistry()
    entry = entry_in(registry, job=Tick, every=60, args=["x"])
    t = 1_800_000_000  # a minute boundary
    scheduler(client, registry).run_due(t - 3600 + 1)  # ran an hour ago, then every worker stopped
    back = scheduler(client, registry)  # a worker starts again, 30 s after a tick
    assert back.run_due(t + 30) == 1
    assert [j["periodic_at"] for j in queue_items(r)] == [t]  # 60 ticks missed, one job
    assert back.run_due(t + 31) == 0 and scheduler(client, registry).run_due(t + 32) == 0
    assert back.run_due(t + 60.01) == 1  # and on with the schedule
    assert status(client, registry=registry)[0].last_run == t + 60
    assert entry.missed == "enqueue"


def test_a_missed_tick_is_skipped_with_missed_skip(client, r):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=60, args=["x"], missed="skip")
    t = 1_800_000_000
    scheduler(client, registry).run_due(t - 3600 + 1)
    back = scheduler(client, registry)
    assert back.run_due(t + 30) == 0 and r.llen("queue:default") == 0
    assert back.run_due(t + 60.01) == 1
    assert [j["periodic_at"] for j in queue_items(r)] == [t + 60]


def test_plan_collapses_old_ticks_and_keeps_recent_ones():
    registry = PeriodicRegistry()
    entry = entry_in(registry, job=Tick, every=1, args=["x"])
    now = 1_800_000_100.5
    assert plan(entry, None, now) == [(1_800_000_100, False)]
    assert plan(entry, 1_800_000_099, now) == [(1_800_000_100, True)]
    assert plan(entry, 1_800_000_100, now) == []
    stale = int(now - MISSED_AFTER)
    assert plan(entry, 1_800_000_000, now) == [(stale, True), *((t, True) for t in range(stale + 1, 1_800_000_101))]


def test_client_middleware_runs_and_can_stop_a_tick(redis_url, r):
    config = Config(redis_url=redis_url)
    config.client_middleware.add(lambda name, payload, queue, call_next:
                                 call_next() if payload["args"] != ["stop"] else None)
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=1, args=["stop"])
    entry_in(registry, job=Tick, every=1, args=["go"], id="go")
    sched = scheduler(Client(config), registry)
    sched.run_due(1_800_000_000.1)
    assert sched.run_due(1_800_000_001.1) == 1
    assert [j["args"] for j in queue_items(r)] == [["go"]]
    assert r.hget("sidequest:periodic:Tick every 1s", "last") == b"1800000001"  # passed, not retried


def test_client_middleware_may_change_the_queue(redis_url, r):
    config = Config(redis_url=redis_url)

    def to_urgent(name, payload, queue, call_next):
        payload["queue"] = "urgent"
        return call_next()

    config.client_middleware.add(to_urgent)
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=1, args=["x"])
    sched = scheduler(Client(config), registry)
    sched.run_due(1_800_000_000.1)
    assert sched.run_due(1_800_000_001.1) == 1
    assert [j["queue"] for j in queue_items(r, "urgent")] == ["urgent"] and r.llen("queue:default") == 0


def test_one_broken_entry_spares_the_others(redis_url, r, caplog):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=1, args=["x" * 500], id="too-big")
    entry_in(registry, job=Tick, every=1, args=["ok"], id="ok")
    sched = scheduler(Client(Config(redis_url=redis_url, max_payload_size=300)), registry)
    sched.run_due(1_800_000_000.1)
    assert sched.run_due(1_800_000_001.1) == 1
    assert [j["args"] for j in queue_items(r)] == [["ok"]]
    assert "periodic too-big: could not enqueue" in caplog.text and "max_payload_size" in caplog.text


def test_six_field_cron_entry_enqueues_on_its_seconds(client, r):
    registry = PeriodicRegistry()
    entry_in(registry, "*/20 * * * * *", Tick, args=["x"], queue="ticks")
    sched = scheduler(client, registry)
    base = epoch(2027, 1, 1, 0, 0, 0)
    sched.run_due(base + 1)
    assert [sched.run_due(base + s + 0.05) for s in (10, 20, 30, 40)] == [0, 1, 0, 1]
    assert [j["periodic_at"] for j in queue_items(r, "ticks")] == [base + 40, base + 20]


# -- status ------------------------------------------------------------------------------------

def test_status_shows_next_and_last_run_even_in_a_process_that_registered_nothing(client):
    registry = PeriodicRegistry()
    entry = entry_in(registry, "0 9 * * *", Tick, args=["x"], tz="Europe/Paris", queue="reports")
    sched = scheduler(client, registry)
    t = epoch(2026, 1, 15, 9, 0, tz=PARIS)
    sched.run_due(t - 60)
    assert sched.run_due(t + 0.2) == 1
    [mine] = status(client, registry=registry, now=t + 10)
    assert (mine.id, mine.schedule, mine.job, mine.queue, mine.missed) == (
        entry.id, "0 9 * * * Europe/Paris", "Tick", "reports", "enqueue")
    assert mine.last_run == t and mine.next_run == epoch(2026, 1, 16, 9, 0, tz=PARIS)
    assert mine.last_jid and mine.last_enqueued_at == t + 0.2 and mine.registered
    [elsewhere] = status(client, registry=PeriodicRegistry(), now=t + 10)  # e.g. the dashboard
    assert elsewhere.as_dict() == {**mine.as_dict(), "registered": False}
    assert elsewhere.seen == t + 0.2  # described again: the last description was 60 s old
    assert forget(entry.id, client) and status(client, registry=PeriodicRegistry()) == []


def test_status_lists_a_registered_entry_before_any_worker_ran_it(client):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=60, args=["x"])
    [s] = status(client, registry=registry, now=1_800_000_001)
    assert s.next_run == 1_800_000_060 and s.last_run is None and s.seen is None


def test_an_entry_removed_from_the_code_disappears_after_periodic_ttl(client, r):
    before, after = PeriodicRegistry(), PeriodicRegistry()  # two deploys: "hourly" is in both
    kept = entry_in(before, job=Tick, every=3600, args=["kept"], id="hourly")
    entry_in(before, job=Tick, every=3600, args=["removed"], id="removed")
    entry_in(after, job=Tick, every=3600, args=["kept"], id="hourly")
    PeriodicScheduler(client, before.entries, ttl=1).run_due(time.time())
    last = r.hget(keys.periodic(kept.id), "last")
    assert {s.id for s in status(client, registry=PeriodicRegistry())} == {"hourly", "removed"}
    assert 0 < r.ttl(keys.periodic("removed")) <= 1 and 0 < r.ttl(keys.PERIODIC) <= 1
    running = PeriodicScheduler(client, after.entries, ttl=1)  # describes its entries every ttl / 4

    def removed_is_gone() -> bool:
        running.run_due(time.time())
        return [s.id for s in status(client, registry=PeriodicRegistry())] == ["hourly"]

    wait_until(removed_is_gone, 5, 0.05, "the removed entry's record to expire")
    assert r.hget(keys.periodic(kept.id), "last") == last  # the running entry's record never expired


def test_a_scheduler_gives_records_without_a_ttl_one_and_drops_expired_ids(client, r):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=60, args=["x"])
    r.sadd(keys.PERIODIC, "from an older version", "expired")  # records of entries long removed
    r.hset(keys.periodic("from an older version"), mapping={"last": 1, "class": "Tick", "every": 60})
    scheduler(client, registry).run_due(1_800_000_000)
    assert 0 < r.ttl(keys.periodic("from an older version")) <= 7 * 24 * 3600 == Config().periodic_ttl
    assert r.smembers(keys.PERIODIC) == {b"from an older version", b"Tick every 1m"}


def test_a_record_the_claim_creates_expires_too(client, r):
    registry = PeriodicRegistry()
    entry = entry_in(registry, job=Tick, every=1, args=["x"])
    sched = scheduler(client, registry)
    sched.run_due(1_800_000_000.1)
    forget(entry.id, client)  # between two descriptions: the claim writes the record again
    assert sched.run_due(1_800_000_001.1) == 0 and r.hget(keys.periodic(entry.id), "last") == b"1800000001"
    assert 0 < r.ttl(keys.periodic(entry.id)) <= 7 * 24 * 3600


def test_the_cli_lists_entries(client, redis_url, monkeypatch):
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=60, args=["x"])
    sched = scheduler(client, registry)
    sched.run_due(time.time() - 120)
    sched.run_due(time.time() - 59)
    monkeypatch.setenv("REDIS_URL", redis_url)
    result = CliRunner().invoke(main, ["periodic"])
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split()[:4] == ["ID", "SCHEDULE", "JOB", "QUEUE"]
    assert row.startswith("Tick every 1m  every 1m  Tick  default") and "(in " in row and " ago)" in row
    result = CliRunner().invoke(main, ["periodic", "--json"])
    assert json.loads(result.output)["id"] == "Tick every 1m"


# -- the config file ---------------------------------------------------------------------------

def test_periodic_in_the_config_file(tmp_path):
    f = tmp_path / "sidequest.yml"
    f.write_text(""":periodic:
  - :cron: "*/5 * * * *"
    :class: Echo
    :args: [report]
    :tz: Europe/Paris
    :missed: skip
  - every: 10s
    class: HardWorker
    queue: ruby
""")
    config = Config.from_file(f)
    assert config.periodic == (
        {"cron": "*/5 * * * *", "class": "Echo", "args": ["report"], "tz": "Europe/Paris", "missed": "skip"},
        {"every": "10s", "class": "HardWorker", "queue": "ruby", "args": []},
    )
    first, second = entries_from_config(config.periodic, default_registry)
    assert first.job is echo.job_class and first.missed == "skip" and first.schedule.tz == "Europe/Paris"
    assert first.id == "Echo */5 * * * * Europe/Paris"
    assert second.job == "HardWorker" and second.schedule.every == 10 and second.queue == "ruby"


@pytest.mark.parametrize("item, words", [
    ({"cron": "* * * * *"}, "class: .* is required"),
    ({"class": "Echo"}, "cron: or every:"),
    ({"class": "Echo", "cron": "* * * * *", "every": 5}, "cron: or every:"),
    ({"class": "Echo", "cron": "* * * * *", "at": 5}, "unknown key"),
    ({"class": "Echo", "cron": "* * * * *", "args": "x"}, "args must be a list"),
    ({"class": "Echo", "cron": "* * * * *", "missed": "never"}, "enqueue or skip"),
])
def test_a_bad_config_entry_is_refused(item, words):
    with pytest.raises(ConfigError, match=words):
        Config(periodic=(item,))


def test_a_bad_schedule_in_the_file_stops_the_worker_at_start(config):
    bad = config.replace(periodic=({"class": "Echo", "cron": "*/5 * * *"},))
    with pytest.raises(ConfigError, match=r"periodic entry 1 \(Echo\): .* not a cron expression"):
        Launcher(bad, periodic=PeriodicRegistry())
    with pytest.raises(ConfigError, match="Resize takes"):  # a registered job checks its arguments
        entries_from_config(({"class": "Resize", "every": 5, "args": [1]},), default_registry)


# -- in a worker -------------------------------------------------------------------------------

def test_a_launcher_runs_its_entries_and_the_files(config, r, monkeypatch, redis_url):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    registry = PeriodicRegistry()
    entry_in(registry, job=Tick, every=1, args=["code"])
    config = config.replace(periodic=({"class": "Tick", "every": 1, "args": ["file"], "id": "from-file"},))
    launcher = Launcher(config.replace(periodic_ttl=3600), periodic=registry)
    assert launcher.services["periodic"].ttl == 3600
    launcher.run()
    try:
        wait_until(lambda: {t[0] for t in ran(r, "tick")} == {"code", "file"}, 30, message="both entries to run")
    finally:
        launcher.stop()
    assert not launcher.services["periodic"].background.running


def test_three_workers_enqueue_a_one_second_job_ten_times_in_ten_seconds(procs, r, client, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SQ_TEST_PERIODIC", "1")  # jobs_for_tests registers Tick every second
    workers = [procs("-c", "2") for _ in range(3)]
    for worker in workers:
        worker.wait_registered(r)
    start = int(time.time()) + 1
    wait_until(lambda: time.time() > start + 11.5, 20, 0.1, "ten seconds to pass")
    assert stop_all(*workers) == [0, 0, 0]
    ticks = ran(r, "tick")
    at = [t[2] for t in ticks]
    assert len(at) == len(set(at)), f"a tick ran twice: {sorted(at)}"
    window = [t for t in ticks if start <= t[2] < start + 10]
    assert 9 <= len(window) <= 11, sorted(at)
    assert all(label == "every-second" and entry == "Tick every 1s" for label, entry, *_ in ticks)
    lateness = [enqueued - tick for _, _, tick, enqueued, _ in window]
    assert max(lateness) < 1.0 and min(lateness) >= 0, lateness  # on time: at most a second late
    [shown] = status(client, registry=PeriodicRegistry())
    assert shown.id == "Tick every 1s" and shown.last_run == max(at) and shown.seen is not None


# -- the docs ----------------------------------------------------------------------------------

DOC = ROOT / "docs" / "scheduling.md"


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_scheduling_docs_examples_run(tmp_path, redis_url, r):
    named = {}
    for block in doc_blocks("python"):
        first = block.splitlines()[0]
        if first.startswith("# ") and first.split()[1].endswith(".py"):
            named[first.split()[1]] = block
            (tmp_path / first.split()[1]).write_text(block, encoding="utf-8")
    assert set(named) == {"later.py", "reports.py", "hourly.py", "status_check.py"}
    (tmp_path / "sidequest.yml").write_text(doc_blocks("yaml")[0], encoding="utf-8")
    env = python_env(REDIS_URL=redis_url)

    def run(*args: str) -> str:
        done = subprocess.run([PYTHON, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=2 * STARTUP)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # the modules register their entries; a scheduler pass describes them in Redis
    out = run("-c", "import reports, hourly, sidequest\n"
                    "from sidequest.periodic import PeriodicScheduler, default_periodic, entries_from_config\n"
                    "from sidequest.jobs.registry import default_registry\n"
                    "PeriodicScheduler(sidequest.default_client(), default_periodic.entries).run_due()\n"
                    "config = sidequest.Config.from_file('sidequest.yml')\n"
                    "from_file = entries_from_config(config.periodic, default_registry)\n"
                    "print(len(default_periodic), [e.id for e in from_file])")
    assert out.split(" ", 1) == ["5", "['reports.daily_report 30 6 * * 1-5 Europe/Paris', 'ruby-heartbeat']\n"]
    assert len(run("status_check.py").splitlines()) == 5
    run("later.py")
    assert r.zcard("schedule") == 3
    # the Schedule example prints what its comments say
    [example] = [b for b in doc_blocks("python") if "Schedule.parse" in b]
    expected = [line.lstrip("# ").split("   ")[0] for line in example.splitlines() if line.startswith("# 2026")]
    assert run("-c", example).split("\n")[:3] == expected

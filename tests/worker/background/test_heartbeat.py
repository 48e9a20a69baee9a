"""Heartbeat: the process entries Sidekiq's API reads, stats and metrics flushing, remote signals,
cleanup."""

import json
import logging
import os
import socket

import pytest
import redis
from conftest import free_port, wait_until
from helpers import ran
from jobs_for_tests import blocker, echo
from redis.backoff import NoBackoff
from redis.retry import Retry

from sidequest.features.job_metrics import JobMetricsFeature, read
from sidequest.store.outage import RedisOutage
from sidequest.worker.background.heartbeat import Heartbeat
from sidequest.worker.counters import ProcessCounters
from sidequest.worker.launcher import Launcher
from sidequest.worker.outcome import Outcome


@pytest.fixture
def launcher(config, monkeypatch, redis_url):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launcher = Launcher(config.replace(tag="billing", labels=("blue",), queues=("a,2", "default,1")))
    launcher.run()
    yield launcher
    launcher.stop()


def test_process_registration_in_sidekiqs_shape(launcher, r):
    ident = launcher.identity
    assert ident.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert r.sismember("processes", ident)
    h = {k.decode(): v.decode() for k, v in r.hgetall(ident).items()}
    info = json.loads(h["info"])
    assert info["hostname"] == socket.gethostname() and info["pid"] == os.getpid()
    assert info["identity"] == ident and info["tag"] == "billing" and info["labels"] == ["blue"]
    assert info["concurrency"] == 4 and info["queues"] == ["a", "default"]
    assert info["version"] and isinstance(info["started_at"], float)
    assert h["quiet"] == "false" and int(h["busy"]) == 0 and int(h["rss"]) > 0
    assert abs(float(h["beat"]) - __import__("time").time()) < 5
    assert 0 < r.ttl(ident) <= 3


def test_running_jobs_appear_in_the_work_hash(launcher, client, r):
    jid = client.push(blocker, ["go:hb"])
    ident = launcher.identity

    def work():
        entries = r.hgetall(f"{ident}:work")
        return entries and {k: json.loads(v) for k, v in entries.items()}
    entries = wait_until(work, message="the job in the work hash")
    [entry] = entries.values()
    assert entry["queue"] == "default" and isinstance(entry["run_at"], int)
    assert isinstance(entry["payload"], str) and json.loads(entry["payload"])["jid"] == jid
    assert r.hgetall(f"{ident}:workers") == r.hgetall(f"{ident}:work")  # Sidekiq 6 reads this name
    wait_until(lambda: r.hget(ident, "busy") == b"1")
    r.rpush("go:hb", 1)
    wait_until(lambda: not r.exists(f"{ident}:work"), message="the work hash to empty")


def test_stats_are_counted_in_memory_and_flushed(launcher, client, r):
    client.push_bulk(echo, [[i] for i in range(7)])
    client.push("Boom", ["x"])
    wait_until(lambda: int(r.get("stat:processed") or 0) == 8, message="stats flushed by a beat")
    assert int(r.get("stat:failed")) == 1
    day = __import__("datetime").datetime.now(__import__("datetime").timezone.utc).strftime("%Y-%m-%d")
    assert int(r.get(f"stat:processed:{day}")) == 8 and int(r.get(f"stat:failed:{day}")) == 1
    assert r.ttl(f"stat:processed:{day}") > 365 * 24 * 3600


def test_the_flushes_go_out_in_the_beat_and_a_failed_beat_gives_them_back(config, r):
    """The per-job metrics reach Redis through the heartbeat's flushes (it never names them): a
    beat that cannot reach Redis hands their counts back, and the next beat writes them once."""
    counters, feature = ProcessCounters(), JobMetricsFeature(clock=lambda: 1_800_000_000.0)
    feature.observe("finished", {"class": "Report"}, Outcome.done(0.004))
    down = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))  # nothing listens there
    Heartbeat(config, down, "host:1:down", counters, "0", flushes=[feature.flush]).beat()
    assert r.keys("sidequest:metrics:*") == []
    Heartbeat(config, r, "host:1:up", counters, "0", flushes=[feature.flush]).beat()
    [report] = read(r, minutes=1, now=1_800_000_000.0).values()
    assert (report.name, report.runs, report.failed) == ("Report", 1, 0)
    assert r.hget("host:1:up", "beat") is not None  # in the same beat as the process entry


def test_remote_quiet_calls_the_launcher_not_the_process(launcher, r):
    """Sidekiq's Web UI "Quiet" on an embedded launcher: it goes quiet; this process is not signalled."""
    r.lpush(f"{launcher.identity}-signals", "TSTP")
    wait_until(lambda: r.hget(launcher.identity, "quiet") == b"true", message="quiet shown")
    wait_until(lambda: launcher.runners[0].alive() == 0, message="processors to stop after a remote quiet")
    assert not launcher.stopped.is_set()  # still registered and beating, only quiet


def test_remote_stop_stops_the_launcher_and_nothing_else(launcher, r):
    ident = launcher.identity
    r.lpush(f"{ident}-signals", "TERM")
    assert launcher.wait(30), "the launcher stops itself"
    assert not r.sismember("processes", ident) and not r.exists(ident)


def test_remote_ttin_dumps_thread_stacks(launcher, r, caplog):
    r.lpush(f"{launcher.identity}-signals", "TTIN")
    wait_until(lambda: "thread sidequest-heartbeat" in caplog.text, message="the thread dump")


def test_quiet_shows_and_stops_fetching(launcher, client, r):
    launcher.quiet()
    assert r.hget(launcher.identity, "quiet") == b"true"
    wait_until(lambda: launcher.runners[0].alive() == 0, message="processors to stop after quiet")
    client.push(echo, ["not now"])
    assert r.llen("queue:default") == 1 and not ran(r)


def test_clean_stop_removes_entries_at_once(launcher, r):
    ident = launcher.identity
    launcher.stop()
    assert not r.sismember("processes", ident) and not r.exists(ident)
    assert not r.exists(f"{ident}:work") and not r.exists(f"{ident}:workers")


def test_vanished_processes_are_pruned_from_the_set(launcher, r):
    r.sadd("processes", "ghost:1:abc")
    r.delete("sidequest:recovery-lock")
    launcher.recovery.run()
    assert not r.sismember("processes", "ghost:1:abc") and r.sismember("processes", launcher.identity)


def test_clean_stop_takes_its_reserved_lists_out_of_reservations(launcher, client, r):
    client.push_bulk(echo, [[n] for n in range(20)])
    wait_until(lambda: len(ran(r, "echo")) == 20, 10, 0.02, "the jobs to run")
    mine = f"sidequest:reserved:{launcher.identity}:"
    wait_until(lambda: any(m.decode().startswith(mine) for m in r.smembers("sidequest:reservations")),
               5, 0.02, "this process's lists to be registered")
    launcher.stop()
    assert [m for m in r.smembers("sidequest:reservations") if m.decode().startswith(mine)] == []
    assert not [k for k in r.scan_iter(f"{mine}*")]


def test_a_list_still_holding_a_job_stays_registered_after_a_stop(launcher, r):
    held = f"sidequest:reserved:{launcher.identity}:batch"
    launcher.stop()
    r.rpush(held, b"a job a failed put-back left behind")  # as if Redis had refused the put-back
    r.sadd("sidequest:reservations", held)
    launcher._release_reservations()
    assert r.sismember("sidequest:reservations", held)


def test_nothing_is_fetched_before_the_first_heartbeat_reaches_redis(config, monkeypatch, redis_url, client, r):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    r.set("processes", "not a set")  # every beat fails (WRONGTYPE on SADD processes)
    client.push(echo, ["early"])
    launcher = Launcher(config.replace(heartbeat_interval=0.2, heartbeat_ttl=1.0))
    try:
        launcher.run()
        beats = set()
        wait_until(lambda: beats.add(r.hget(launcher.identity, "beat")) or len(beats - {None}) >= 3, 10, 0.02,
                   "three failed beats")  # the rest of the beat's MULTI is written, so they show
        assert r.llen("queue:default") == 1 and ran(r, "echo") == []  # nothing taken meanwhile
        r.delete("processes")
        wait_until(lambda: ran(r, "echo") == [["early"]], 10, 0.02, "the job, once the beat is written")
        assert r.sismember("processes", launcher.identity)
        launcher.stop()
        assert r.get("stat:processed") == b"1"  # the refused beats wrote their counts once, not again
    finally:
        launcher.stop()


def test_a_beat_redis_refuses_in_part_writes_its_counts_once(config, monkeypatch, redis_url, client, r):
    monkeypatch.setenv("SQ_TEST_REDIS_URL", redis_url)
    launcher = Launcher(config.replace(heartbeat_interval=0.2, heartbeat_ttl=1.0))
    launcher.run()
    try:
        client.push(echo, ["counted"])
        wait_until(lambda: ran(r, "echo") == [["counted"]], 10, 0.02, "the job")
        r.delete("processes")
        r.set("processes", "not a set")  # the next beats' SADD is refused; the rest of the MULTI runs
        wait_until(lambda: r.get("stat:processed") == b"1", 10, 0.02, "the count, written by a refused beat")
        beats = set()
        wait_until(lambda: beats.add(r.hget(launcher.identity, "beat")) or len(beats) >= 3, 10, 0.02,
                   "more refused beats")
        r.delete("processes")
        wait_until(lambda: r.sismember("processes", launcher.identity), 10, 0.02, "a whole beat again")
        assert r.get("stat:processed") == b"1"
    finally:
        launcher.stop()
    assert r.get("stat:processed") == b"1"


def test_a_beat_that_reaches_redis_reports_it_so_an_outage_ends_while_every_slot_is_busy(config, r, caplog):
    """With every processor on a long job no fetch says Redis answers: the heartbeat does, so the
    outage's end is logged within a beat, not only when the worker stops."""
    outage = RedisOutage(settle=0.0)
    caplog.set_level(logging.WARNING, logger="sidequest.store.outage")
    outage.down(redis.ConnectionError("Connection closed by server."))
    down = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    Heartbeat(config, down, "host:1:down", ProcessCounters(), "0", outage=outage).beat()
    assert not any("answers again" in rec.getMessage() for rec in caplog.records)  # a failed beat proves nothing
    Heartbeat(config, r, "host:1:up", ProcessCounters(), "0", outage=outage).beat()
    ours = [rec.getMessage()[:20] for rec in caplog.records if rec.name == "sidequest.store.outage"]
    assert ours == ["Redis is unavailable", "Redis answers again "]

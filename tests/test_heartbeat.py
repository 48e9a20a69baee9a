"""Heartbeat: the process entries Sidekiq's API reads, stats flushing, remote signals, cleanup."""

import json
import os
import socket

import pytest
from conftest import wait_until
from helpers import ran
from jobs_for_tests import blocker, echo

from sidequest.launcher import Launcher


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


def test_remote_quiet_calls_the_launcher_not_the_process(launcher, r):
    """Sidekiq's Web UI "Quiet" on an embedded launcher: it goes quiet; this process is not signalled."""
    r.lpush(f"{launcher.identity}-signals", "TSTP")
    wait_until(lambda: r.hget(launcher.identity, "quiet") == b"true", message="quiet shown")
    wait_until(lambda: launcher.manager.alive() == 0, message="processors to stop after a remote quiet")
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
    wait_until(lambda: launcher.manager.alive() == 0, message="processors to stop after quiet")
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

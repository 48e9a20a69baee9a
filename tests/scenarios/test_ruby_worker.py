"""The `sidequest worker` process against real Ruby Sidekiq 6.4: it runs what Ruby's client
pushed, and what it writes (processes, workers, stats, retry and dead entries) reads cleanly
through Sidekiq's own Ruby API (tests/ruby/api.rb), which is what Sidekiq's Web UI uses."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import PYTHON, STARTUP, python_env, wait_until
from jobs_for_tests import FastBoom, boom
from ruby_peer import ruby_api, ruby_push

WORKER_ARGS = ["-m", "sidequest.cli", "worker", "-r", "jobs_for_tests", "-c", "4", "--heartbeat-interval", "0.5",
               "--heartbeat-ttl", "3", "--poll-interval", "0.2", "-t", "5"]
# An idle processor notices a stop only when its blocking fetch returns (2 s by default); a
# shorter bound makes each clean stop take ~0.5 s instead of ~2 s. It has no CLI flag.
WORKER_ENV = {"SIDEQUEST_FETCH_TIMEOUT": "0.5"}


class Worker:
    """One `sidequest worker` subprocess; its output goes to a file so it can never block on a pipe."""

    def __init__(self, redis_url: str, log: Path, *extra: str) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([PYTHON, *WORKER_ARGS, *extra], cwd=log.parent, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         env=python_env(REDIS_URL=redis_url, SQ_TEST_REDIS_URL=redis_url, **WORKER_ENV))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        """True while running; a worker that died on its own fails the test, with its log."""
        assert self.proc.poll() is None, f"worker exited with {self.proc.returncode}:\n{self.output()}"
        return True

    def identity(self, r, timeout: float = STARTUP) -> str:
        """Wait until this process has registered in `processes`; return its identity."""
        def find() -> str | None:
            self.alive()
            return next((m.decode() for m in r.smembers("processes") if f":{self.proc.pid}:" in m.decode()), None)
        return wait_until(find, timeout, 0.05, "the worker to register")

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"worker ignored SIGTERM for {timeout}s:\n{self.output()}") from None


@pytest.fixture
def worker(redis_url, tmp_path) -> Iterator:
    started: list[Worker] = []

    def start(*extra: str) -> Worker:
        w = Worker(redis_url, tmp_path / f"worker-{len(started)}.log", *extra)
        started.append(w)
        return w

    yield start
    for w in started:  # a test that failed half-way leaves its worker running: stop it, or kill it
        if w.proc.poll() is None:
            try:
                w.stop(10)
            except AssertionError:
                pass


def ran(r, kind: str) -> list[list]:
    return [item[1:] for item in map(json.loads, r.lrange("test:ran", 0, -1)) if item[0] == kind]


def reserved_left(r) -> list[bytes]:
    return [key for key in r.scan_iter(match="sidequest:reserved:*") if r.llen(key)]


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def test_worker_runs_jobs_pushed_by_ruby_sidekiq(ruby, worker, r, redis_url):
    ruby_push(redis_url, "echo")
    ruby_push(redis_url, "bulk", "40")
    pushed = [json.loads(raw) for raw in reversed(r.lrange("queue:default", 0, -1))]  # oldest first
    assert len(pushed) == 41 and {p["class"] for p in pushed} == {"RubyEcho"}
    w = worker()
    wait_until(lambda: w.alive() and len(ran(r, "ruby-echo")) == 41, 60, 0.05, "41 Ruby jobs to run")
    got = ran(r, "ruby-echo")
    assert sorted(map(json.dumps, got)) == sorted(json.dumps(p["args"]) for p in pushed)
    assert [1, "two", {"three": [3.5, None, True]}] in got  # Ruby's nested args, exactly as pushed
    wait_until(lambda: not reserved_left(r), 15, 0.05, "every job to be acknowledged")
    assert w.stop() == 0, w.output()
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert int(r.get("stat:processed")) == 41 and int(r.get("stat:failed") or 0) == 0


def test_ruby_api_reads_process_workers_stats_and_retries(ruby, worker, client, r, redis_url):
    w = worker("--tag", "compat", "-q", "default")
    identity = w.identity(r)
    client.push("Echo", ["not for us"], queue="elsewhere")  # a queue nobody works: counts as enqueued
    jid = client.push("Blocker", ["test:release"])

    # --- while the Blocker job runs: ProcessSet, Workers, Stats --------------------------------
    wait_until(lambda: w.alive() and r.hget(identity, "busy") == b"1", 30, 0.05, "a heartbeat showing busy=1")
    api = ruby_api(redis_url)
    [proc] = api["processes"]
    assert proc["identity"] == identity
    assert proc["hostname"] == socket.gethostname() and proc["pid"] == w.proc.pid
    assert proc["concurrency"] == 4 and proc["queues"] == ["default"]
    assert proc["busy"] == 1 and proc["quiet"] is False and proc["tag"] == "compat"
    assert isinstance(proc["started_at"], float) and proc["beat"] > proc["started_at"] - 1
    assert api["processes_size"] == 1 and api["process_set_size"] == 1 and api["total_concurrency"] == 4
    assert api["workers_size"] == 1 and api["workers_count"] == 1
    [work] = api["workers"]
    assert (work["process"], work["queue"], work["jid"], work["class"]) == (identity, "default", jid, "Blocker")
    assert work["args"] == ["test:release"] and isinstance(work["run_at"], int)
    assert api["enqueued"] == 1 and api["queue_sizes"] == {"elsewhere": 1, "default": 0}

    # --- a failure filed in the retry set -----------------------------------------------------
    r.rpush("test:release", 1)
    boom_jid = client.push(boom, ["kaboom: ünïcode"])
    wait_until(lambda: w.alive() and r.zcard("retry") == 1, 30, 0.05, "Boom to be filed for retry")
    api = ruby_api(redis_url)
    [entry] = api["retries"]
    assert entry["jid"] == boom_jid and entry["klass"] == "Boom" and entry["args"] == ["kaboom: ünïcode"]
    assert entry["error_class"] == "ValueError" and entry["error_message"] == "kaboom: ünïcode"
    assert entry["retry_count"] == 0 and entry["queue"] == "default" and entry["retried_at"] is None
    assert entry["at"] > entry["failed_at"] + 14  # Sidekiq's first backoff is at least 15 s
    trace = entry["backtrace"]  # Ruby inflated and parsed sidequest's compressed backtrace
    assert isinstance(trace, list) and 1 <= len(trace) <= 3 and all(isinstance(line, str) for line in trace)
    assert "in `boom'" in trace[0]  # innermost frame first, as Ruby's backtraces are
    assert api["retry_size"] == 1

    # --- TSTP: quiet, as Ruby sees it ---------------------------------------------------------
    w.proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: w.alive() and ruby_api(redis_url)["processes"][0]["quiet"], 60, 0.1,
               "Ruby's Process#stopping? to turn true")

    # --- after a clean stop: the flushed counters, and the process gone --------------------------
    assert w.stop() == 0, w.output()
    api = ruby_api(redis_url)
    assert api["processed"] == 2 and api["failed"] == 1
    assert api["history"][today()] == 2 and api["history_failed"][today()] == 1
    assert api["processes"] == [] and api["processes_size"] == 0 and api["workers"] == []
    assert api["workers_size"] == 0 and api["retry_size"] == 1


def test_dead_set_entries_written_by_sidequest_read_in_ruby(ruby, worker, client, r, redis_url):
    exhausted = client.push(FastBoom, ["three strikes"])  # retry=2, 0.05 s apart: dead on the 3rd failure
    straight = client.push(boom, ["no retries"], retry=0)  # retry=0: dead at once, with a backtrace
    not_a_job = json.dumps({"args": [1], "jid": "f" * 24})  # no class
    r.lpush("queue:default", not_a_job)
    w = worker()
    wait_until(lambda: w.alive() and r.zcard("dead") == 3, STARTUP, 0.05, "three entries in the dead set")
    assert w.stop() == 0, w.output()

    api = ruby_api(redis_url)
    assert api["dead_size"] == 3 and api["retry_size"] == 0
    dead = {entry["jid"]: entry for entry in api["dead"]}
    [wrapper] = set(dead) - {exhausted, straight}
    first = dead[exhausted]
    assert first["klass"] == first["display_class"] == "FastBoom" and first["args"] == ["three strikes"]
    assert first["error_class"] == "ValueError" and first["error_message"] == "three strikes"
    assert first["retry_count"] == 2 and first["retried_at"] >= first["failed_at"] and first["backtrace"] is None
    second = dead[straight]
    assert second["klass"] == "Boom" and second["retry_count"] == 0 and second["error_message"] == "no retries"
    assert isinstance(second["backtrace"], list) and 1 <= len(second["backtrace"]) <= 3
    third = dead[wrapper]  # the bytes kept exactly, inside an entry Ruby can read
    assert third["klass"] == "sidequest.InvalidPayload" and third["args"] == [not_a_job]
    assert third["queue"] == "default" and third["error_class"] and "class" in third["error_message"]
    assert api["failed"] == 5 and api["processed"] == 5  # 3 FastBoom runs, 1 Boom, 1 non-job


def test_remote_quiet_and_stop_from_rubys_process_api(ruby, worker, r, redis_url):
    """Sidekiq's `Process#quiet!` and `#stop!` (what the Web UI's buttons do) reach the worker."""
    w = worker()
    w.identity(r)
    ruby_api(redis_url, "quiet!")
    wait_until(lambda: w.alive() and ruby_api(redis_url)["processes"][0]["quiet"], 60, 0.1,
               "the worker to go quiet on Ruby's quiet!")
    ruby_api(redis_url, "stop!")
    assert w.proc.wait(30) == 0, w.output()
    assert ruby_api(redis_url)["processes"] == []


def test_dead_set_stays_readable_after_a_non_object_payload(ruby, worker, r, redis_url):
    """Sidekiq 6.4's JobRecord raises on JSON that is not an object; sidequest wraps such payloads."""
    r.lpush("queue:default", b"[1,2]")
    w = worker()
    wait_until(lambda: w.alive() and r.zcard("dead") == 1, STARTUP, 0.05, "the payload in the dead set")
    assert w.stop() == 0, w.output()
    assert ruby_api(redis_url)["dead_size"] == 1

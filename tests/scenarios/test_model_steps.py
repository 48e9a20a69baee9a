"""A model of what must hold for durable steps' records (issue 39): Hypothesis' stateful testing
drives random sequences through the real parts on a real Redis (`model_world`: the client, the
worker's reliable fetch and job-run step, the poller, the supervisor's recovery, the admin API)
with jobs of one to three steps whose bodies succeed, raise, or block while their process is
killed; and checks after every step what a user relies on:

- a recorded step's body never runs again in the same incarnation of its job (its jid and
  arguments), whatever happened between: retries, kills inside a step or between jobs, recovery,
  a retry from dead, a re-push of the jid with the same arguments;
- a step whose body raised (or was cut by a kill) is not recorded;
- while a job is anywhere (queue, reserved, retry, dead), its records hold exactly the steps
  recorded for it; a job in retry or dead that recorded steps has them;
- once a job ended (done, dropped, cancelled, deleted by an operator), no record of it is left
  (the records of an older incarnation removed behind sidequest's back may stay: they expire);
- a re-push of the jid with other arguments starts fresh; with the same ones it resumes.

The paths that matter (a kill inside a step, a raised step, a replay, an operator's move, a
re-push with other arguments) are counted, and the fixed seeds must take each of them.

`make test` runs a bounded number of examples from fixed seeds (a few seconds);
`make test-model` runs it for SIDEQUEST_MODEL_MINUTES beside the core model (tests/scenarios/test_model.py).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from conftest import RedisServer, redis_server_binary
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from model_world import QUEUE, STEP_PLAN, STEPS_JOB, Proc, stored_jids

from sidequest import Client, Config
from sidequest.api import DeadSet, RetrySet
from sidequest.client import sync_client
from sidequest.features.cancellation import cancel
from sidequest.features.steps import read_steps
from sidequest.features.steps.records import digest_of
from sidequest.worker.background.poller import Poller

LONG_MINUTES = float(os.environ.get("SIDEQUEST_MODEL_MINUTES", "0") or 0)  # make test-model sets it
SEEN: Counter[str] = Counter()  # the paths the examples took: the fixed seeds must take each of them
PATHS = {"killed inside a step", "a step raised", "re-pushed with other arguments", "an operator's retry or delete",
         "ended with recorded steps", "a recorded step replayed"}
tags = st.integers(0, 3)  # a job's first argument: a re-push with another one is another incarnation
# Hypothesis draws the first of a sampled_from most often: the paths that need a failure come first


@dataclass
class Incarnation:
    jid: str
    args: list[Any]
    recorded: set[str] = field(default_factory=set)  # the steps whose bodies returned (recorded)
    state: str = "live"  # live (stored or running), ended

    @property
    def digest(self) -> str:
        return digest_of({"class": STEPS_JOB, "args": self.args})


class StepsModel(RuleBasedStateMachine):
    url = ""  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.now = time.time()
        self.config = Config(redis_url=self.url, queues=((QUEUE, 0),), concurrency=2, prefetch=0, fetch_timeout=0.02,
                             timeout=5, poll_interval=0.2, heartbeat_interval=0.5, heartbeat_ttl=3,
                             recovery_interval=1, max_retries=2)
        self.r = redis.Redis.from_url(self.url)
        self.started = 0
        self.r.flushdb()
        self.client = Client(self.config, clock=self.clock)
        sync_client._default = self.client  # what `sidequest.step` inside the jobs reaches
        self.poller = Poller(self.config, self.client.redis, clock=self.clock)
        self.jobs: dict[str, Incarnation] = {}
        self.procs: list[Proc] = []
        self.zombies: list[Any] = []  # killed processes' threads, blocked inside a step's body
        self.seen = len(STEP_PLAN.runs)

    def clock(self) -> float:
        return self.now

    @initialize(count=st.integers(2, 3), retry=st.sampled_from([0, 1]))
    def a_failed_job(self, count, retry) -> None:
        """Every example begins with a job in retry (retry=1) or dead (retry=0) with its first step
        recorded: the operators' rules have an entry to act on from the start."""
        self.push(0, count, retry)
        self.run_one(0, 1)

    # -- pushes ----------------------------------------------------------------------------------
    @rule(tag=tags, count=st.integers(1, 3), retry=st.sampled_from([1, 0, False]))  # 0: dead at its first failure
    def push(self, tag, count, retry) -> None:
        jid = self.client.push(STEPS_JOB, [tag, count], queue=QUEUE, retry=retry)
        assert jid is not None
        self.jobs[jid] = Incarnation(jid, [tag, count])

    @rule(n=st.integers(0, 9), other=st.sampled_from([True, False]))
    def repush(self, n, other) -> None:
        """An entry of retry or dead is removed behind sidequest's back (Sidekiq's Web UI: its
        records stay) and its jid pushed again (Sidekiq's client takes a jid), with the same
        arguments (it resumes past the recorded steps) or others (it starts fresh)."""
        entries = self._entries()
        if not entries:
            return
        entry, _ = entries[n % len(entries)]
        assert self.r.zrem(entry.set_key, entry.value)
        old = self.jobs[str(entry.item["jid"])]
        args = [old.args[0] + other, old.args[1]]
        payload = {"class": STEPS_JOB, "args": args, "queue": QUEUE, "jid": old.jid, "retry": 1,
                   "created_at": self.now, "enqueued_at": self.now}
        self.r.lpush(self.client.keys.queue(QUEUE), json.dumps(payload))
        self.jobs[old.jid] = Incarnation(old.jid, args, old.recorded if args == old.args else set())
        SEEN["re-pushed with the same arguments" if args == old.args else "re-pushed with other arguments"] += 1

    # -- workers (up to two processes, started as they are needed) ------------------------------
    @rule(n=st.integers(0, 1))
    def fetch(self, n) -> None:
        """A job is taken and left running (a kill finds it there)."""
        self._take(self._proc(n))

    @rule(n=st.integers(0, 1), fail_at=st.sampled_from([1, None, 0, 3, 2]))
    def run_one(self, n, fail_at) -> None:
        """A job is taken and runs: its steps succeed, or step `fail_at` raises (3: the job raises
        after its steps)."""
        proc = self._proc(n)
        if self._take(proc) is None:
            return
        STEP_PLAN.fail_at = fail_at
        try:
            proc.finish(len(proc.held) - 1, False)
        finally:
            STEP_PLAN.fail_at = None
        self._learn()

    @rule(n=st.integers(0, 1), block_at=st.integers(0, 2))
    def kill_inside_a_step(self, n, block_at) -> None:
        """A job is taken and runs until the body of step `block_at` (one that runs: not recorded),
        and its process is killed there."""
        proc = self._proc(n)
        if self._take(proc) is None:
            return
        thread = proc.finish_blocked(len(proc.held) - 1, block_at)
        self._learn()
        if thread is not None:
            SEEN["killed inside a step"] += 1
            self.zombies.append(thread)
        self._kill(proc)

    @rule(n=st.integers(0, 1))
    def kill_9(self, n) -> None:
        """A process is killed between jobs, or with jobs taken and not yet run (`fetch`)."""
        if self.procs:
            self._kill(self.procs[n % len(self.procs)])

    @rule(n=st.integers(0, 1))
    def flush(self, n) -> None:
        if self.procs:
            self.procs[n % len(self.procs)].flush()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.poller.enqueue_due()

    # -- operators -------------------------------------------------------------------------------
    @rule(n=st.integers(0, 9), action=st.sampled_from(["retry", "delete", "cancel"]))
    def operator(self, n, action) -> None:
        """An operator retries or deletes an entry of retry or dead, or cancels a job by its jid."""
        if action == "cancel":
            if self.jobs:
                cancel(list(self.jobs)[n % len(self.jobs)], client=self.client)
            return
        entries = self._entries()
        if not entries:
            return
        entry, where = entries[n % len(entries)]
        SEEN[f"{action} from {where}"] += 1
        SEEN["an operator's retry or delete"] += 1
        if action == "delete":
            assert entry.delete()
        else:
            assert entry.retry()

    # -- what must hold --------------------------------------------------------------------------
    @invariant()
    def records_match(self) -> None:
        """A process's acknowledger ends jobs on its own thread (the job and its records in one
        call): the records are read before the job is looked for (it was live then) and again
        after (it had ended by then)."""
        before = {jid: read_steps(self.r, jid) for jid in self.jobs}
        stored = stored_jids(self.r)
        held = {str(p["jid"]) for proc in self.procs for _, p in proc.held}
        for job in self.jobs.values():
            if job.state == "live" and job.jid not in stored and job.jid not in held:
                job.state = "ended"
                SEEN["ended with recorded steps"] += bool(job.recorded)
            found = read_steps(self.r, job.jid) if job.state == "ended" else before[job.jid]
            mine = found if found is not None and found.digest == job.digest else None
            if job.state == "ended":
                assert mine is None, f"{job.jid} ended and left its records: {self._done(mine)}"
                continue
            done = self._done(mine)
            assert done == job.recorded, f"{job.jid} ({job.state}): records {done}, recorded {job.recorded}"

    def _learn(self) -> None:
        """The body runs since the last look: none of a recorded step; those that returned are recorded."""
        before = {jid: set(job.recorded) for jid, job in self.jobs.items()}
        for jid, args, name, how in STEP_PLAN.runs[self.seen:]:
            job = self.jobs[jid]
            SEEN["a recorded step replayed"] += any(f"s{i}" in before[jid] for i in range(int(name[1:])))
            assert json.loads(args) == job.args, f"{jid}: a body of arguments {args} ran, the job's are {job.args}"
            assert name not in job.recorded, f"{jid}: the body of recorded step {name} ran again"
            if how == "ok":
                job.recorded.add(name)
            SEEN["a step raised"] += how == "raised"
        self.seen = len(STEP_PLAN.runs)

    @staticmethod
    def _done(found: Any) -> set[str]:
        return {s.name for s in found.steps if s.state == "done"} if found is not None else set()

    def _entries(self) -> list[tuple[Any, str]]:
        return [(e, "retry") for e in RetrySet(self.client)] + [(e, "dead") for e in DeadSet(self.client)]

    def _take(self, proc: Proc) -> Any:
        """A job taken by `proc`, or None: not asked of an empty queue (its fetch would block for
        its timeout, which Redis rounds up to its 100 ms clock)."""
        return proc.take() if self.r.llen(self.client.keys.queue(QUEUE)) else None

    def _proc(self, n: int) -> Proc:
        """Process `n`, started if it is not there; 20 s pass first (the first retries come due)."""
        self.advance(20.0)
        while len(self.procs) <= n:
            self.started += 1  # each process's identity from its number: never a killed one's
            self.procs.append(Proc.start(self.config, "reliable", self.clock, self.started))
        return self.procs[n]

    def _pick(self, state: str, n: int) -> Incarnation:
        found = [j for j in self.jobs.values() if j.state == state]
        return found[n % len(found)]

    def _kill(self, proc: Proc) -> None:
        self.procs.remove(proc)
        proc.killed(self.config)

    def drain(self) -> None:
        """Everything run out: running jobs succeed, time passes every retry; then every job is
        done or in dead, and the invariant has the last word."""
        self._proc(0)
        for proc in self.procs:
            while proc.held:
                proc.finish(0, False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.advance(86_400.0)
            ran = 0
            for proc in self.procs:
                while self._take(proc) is not None:
                    proc.finish(len(proc.held) - 1, False)
                    ran += 1
                proc.flush()
            self._learn()
            if not ran:
                break
        deadline = time.monotonic() + 5  # the acknowledger sends the last successes on its own thread
        while True:
            self.records_match()
            live = [j.jid for j in self.jobs.values() if j.state == "live" and not self._in_dead(j.jid)]
            if not live or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert not live, f"jobs neither done nor dead once quiet: {[(jid, self._where(jid)) for jid in live]}"

    def _where(self, jid: str) -> list[str]:
        """The keys holding job `jid` (a failure's message)."""
        return [key.decode() for key in self.r.scan_iter(count=1000) if self.r.type(key) in (b"list", b"zset") and any(
            jid.encode() in m for m in (self.r.lrange(key, 0, -1) if self.r.type(key) == b"list"
                                        else self.r.zrange(key, 0, -1)))]

    def _in_dead(self, jid: str) -> bool:
        return any(e.item.get("jid") == jid for e in DeadSet(self.client))

    def teardown(self) -> None:
        try:
            self.drain()
        finally:
            for proc in self.procs:
                proc.close()
            STEP_PLAN.release.set()  # the killed processes' blocked bodies end (their writes are junk now)
            for thread in self.zombies:
                thread.join(10)
            STEP_PLAN.release.clear()
            self.client.redis.close()
            self.r.close()


@pytest.fixture(scope="module")
def model_server():
    server = RedisServer(redis_server_binary(), [])
    yield server
    server.stop()


def _run(server: RedisServer, monkeypatch: pytest.MonkeyPatch, **given: object) -> None:
    StepsModel.url = server.url(0)
    monkeypatch.setattr(sync_client, "_default", None)  # restored after the test; each example sets its own
    run_state_machine_as_test(StepsModel, settings=settings(
        deadline=None, database=None, suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink], **given))


@pytest.mark.skipif(LONG_MINUTES > 0, reason="make test-model runs the long form")
def test_the_steps_model_holds_on_fixed_seeds(model_server, monkeypatch):
    SEEN.clear()
    _run(model_server, monkeypatch, max_examples=30, stateful_step_count=40, derandomize=True)
    assert {path for path, n in SEEN.items() if n} >= PATHS, f"the fixed seeds no longer take every path: {SEEN}"


@pytest.mark.skipif(LONG_MINUTES <= 0, reason="make test-model runs it (SIDEQUEST_MODEL_MINUTES)")
def test_the_steps_model_holds_for_minutes(model_server, monkeypatch):
    started, batches = time.monotonic(), 0
    while time.monotonic() - started < LONG_MINUTES * 60:
        _run(model_server, monkeypatch, max_examples=25, stateful_step_count=50)  # fresh seeds each batch
        batches += 1
    print(f"\nsteps model: {dict(SEEN)}")
    print(f"steps model: {batches} batches of 25 examples in {time.monotonic() - started:.0f} s, no failure")

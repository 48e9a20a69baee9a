"""The real parts the model test (tests/scenarios/test_model.py) drives, and what it reads back.

A `Proc` is one worker process's job path, in this process and on the model's thread: a
`Launcher` that is never started (its runtime, scripts, retrier, recovery and poller, all on a
clock the model moves), its fetch (reliable or basic, as `build_fetch` makes it for a processor)
and `JobRun`, the step both runners use. The model fetches a unit (the job is then running),
and later lets it end: `finish` runs the real step (taken, perform, outcome, settle). A `kill -9`
is the process vanishing without a word: its units are dropped unsettled, and the supervisor's
`recover_process` is what runs after it (as `sidequest worker` does for a child that died).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

import sidequest
from sidequest import Config
from sidequest.jobs.payload import decode
from sidequest.jobs.registry import Registry
from sidequest.worker.fetch.fetchers import build_fetch
from sidequest.worker.fetch.unit import UnitOfWork
from sidequest.worker.job_run import JobRun
from sidequest.worker.launcher import Launcher, orphan_recovery

QUEUE, RETRY_QUEUE = "m", "m-retry"  # the model's queue, and the retry_queue its failures may name
JOB = "ModelJob"
REGISTRY = Registry()


class Behaviour:
    """What the next run of a model job does: the model sets `fail`; each run is counted."""

    def __init__(self) -> None:
        self.fail = False
        self.runs: list[str] = []


BEHAVIOUR = Behaviour()


class ModelJob(sidequest.Job, name=JOB, registry=REGISTRY):
    def perform(self, *args: Any, **kwargs: Any) -> None:
        BEHAVIOUR.runs.append(self.jid)
        if BEHAVIOUR.fail:
            raise RuntimeError("the model fails this run")


# -- durable steps (tests/scenarios/test_model_steps.py) -----------------------------------------
STEPS_JOB = "ModelStepsJob"


class StepPlan:
    """What the next run of a steps job does (the model sets it), and every step body that ran:
    (jid, arguments JSON, step name, "ok" | "raised" | "blocked")."""

    def __init__(self) -> None:
        self.fail_at: int | None = None  # this step's body raises (when it runs); `count`: after the steps
        self.block_at: int | None = None  # this step's body blocks: its process is killed meanwhile
        self.runs: list[tuple[str, str, str, str]] = []
        self.blocked = threading.Event()  # set by a body that blocks
        self.release = threading.Event()  # the blocked bodies of killed processes end (at teardown)


STEP_PLAN = StepPlan()


class Zombie(BaseException):
    """The end of a killed process's blocked body, at teardown (no process is left to see it)."""


class ModelStepsJob(sidequest.Job, name=STEPS_JOB, registry=REGISTRY):
    def perform(self, tag: Any, count: int) -> None:
        for index in range(count):
            sidequest.step(f"s{index}", self.body, index, json.dumps([tag, count]))
        if STEP_PLAN.fail_at == count:
            raise RuntimeError("the model fails this run after its steps")

    def body(self, index: int, args: str) -> dict[str, Any]:
        run = (self.jid, args, f"s{index}")
        if STEP_PLAN.block_at == index:
            STEP_PLAN.runs.append((*run, "blocked"))
            STEP_PLAN.blocked.set()
            STEP_PLAN.release.wait()
            raise Zombie()
        if STEP_PLAN.fail_at == index:
            STEP_PLAN.runs.append((*run, "raised"))
            raise RuntimeError(f"the model fails step s{index}")
        STEP_PLAN.runs.append((*run, "ok"))
        return {"step": index}


@dataclass
class Proc:
    """One worker process of the model (see the module)."""

    fetch_kind: str
    launcher: Launcher
    job_run: JobRun
    fetch: Any
    held: list[tuple[UnitOfWork, dict[str, Any]]] = field(default_factory=list)
    unflushed: set[str] = field(default_factory=set)  # successes whose acknowledgement may wait

    @classmethod
    def start(cls, config: Config, fetch_kind: str, clock: Callable[[], float], number: int) -> Proc:
        """The `number`th process of an example: its identity and its retries' jitter follow from
        it, so that Hypothesis replays a sequence as it ran (a random nonce or jitter reorders
        keys and sorted-set members, and a replay that differs cannot be shrunk)."""
        config = config.replace(fetch=fetch_kind)
        launcher = Launcher(config, registry=REGISTRY, clock=clock, nonce=f"{number:012x}", rng=random.Random(number))
        # the capsule's hub (batch list and acknowledger), as the launcher's processors share it
        fetch = build_fetch(config, launcher.redis, launcher.identity, launcher.scripts, 0, launcher.paused,
                            launcher.runners[0].hub)
        if fetch_kind == "reliable":
            # successes are sent by the model's `flush` steps (or carried by a fetch), never by the
            # acknowledger's 2 ms timer racing the next step: the window a kill falls into is a
            # step the model chose, and a replay sends what the run sent
            fetch.hub.acks.window = 3600.0
        return cls(fetch_kind, launcher, JobRun(launcher.runtime, threading.Event()), fetch)

    def take(self) -> dict[str, Any] | None:
        """Fetch one job (it is running from now on, in the process's work as a processor puts
        it there, which its heartbeat writes), or None when none is there."""
        unit = self.fetch.retrieve_work()
        if unit is None:
            return None
        payload = decode(unit.raw)
        self.held.append((unit, payload))
        self.launcher.runtime.counters.work.start(self.tid(unit), unit.queue, unit.raw)
        return payload

    def finish(self, index: int, fail: bool) -> dict[str, Any]:
        """Let a running job end, succeeding or raising: the real job-run step."""
        unit, payload = self.held.pop(index)
        BEHAVIOUR.fail = fail
        try:
            self.job_run.run(unit, payload)
        finally:
            BEHAVIOUR.fail = False
            self.launcher.runtime.counters.work.finish(self.tid(unit))
        if not fail and self.fetch_kind == "reliable":
            self.unflushed.add(str(payload["jid"]))
        return payload

    @staticmethod
    def tid(unit: UnitOfWork) -> str:
        return f"model-{id(unit):x}"  # one "thread" a running job: a processor runs one at a time

    def finish_blocked(self, index: int, block_at: int) -> threading.Thread | None:
        """Let a running steps job run until the body of step `block_at` blocks (it is then killed
        inside that step: `killed` next): its thread, left blocked; None when it ended first
        (that step was recorded already, or the job has fewer steps)."""
        unit, payload = self.held.pop(index)
        STEP_PLAN.block_at, STEP_PLAN.blocked = block_at, threading.Event()
        thread = threading.Thread(target=self.job_run.run, args=(unit, payload), daemon=True)
        thread.start()
        while not STEP_PLAN.blocked.wait(0.01) and thread.is_alive():
            pass
        STEP_PLAN.block_at = None
        if STEP_PLAN.blocked.is_set():
            return thread
        thread.join()
        self.launcher.runtime.counters.work.finish(self.tid(unit))
        self.unflushed.add(str(payload["jid"]))
        return None

    def flush(self) -> None:
        self.fetch.flush()
        self.unflushed.clear()

    def beat(self) -> None:
        self.launcher.heartbeat.beat()

    def close(self) -> None:
        """A clean stop's end: the successes not yet acknowledged are sent."""
        hub = self.launcher.runners[0].hub
        hub.close(self.fetch.lane if self.fetch_kind == "reliable" else None)
        self.launcher.executor.close()
        self.launcher.redis.close()

    def killed(self, config: Config) -> None:
        """A `kill -9`: the process's threads stop dead, nothing more is written (its acknowledger
        sends nothing more), then what its supervisor does for a dead child (`recover_process`:
        reliable fetch's jobs back to their queues)."""
        ack = self.launcher.runners[0].hub._ack_thread  # the one thread a process of the model has
        ack.send = ack.tend = ack.end = lambda *_: None
        ack.close()
        self.launcher.executor.close()
        self.launcher.redis.close()
        if self.fetch_kind == "reliable":
            recovery = orphan_recovery(config, redis.Redis.from_url(config.url), "model-supervisor")
            try:
                recovery.recover_process(self.launcher.identity)
            finally:
                recovery.redis.close()


def stored_jids(r: redis.Redis) -> Counter[str]:
    """Every job held in Redis (queues, lanes, schedule, retry, dead, reserved and batch lists), by
    jid: a SCAN of the model's small database (a test's reading, never the library's)."""
    found: Counter[str] = Counter()
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        members = r.lrange(key, 0, -1) if kind == b"list" else r.zrange(key, 0, -1) if kind == b"zset" else []
        for member in members:
            try:
                job = json.loads(member)
            except ValueError:
                continue
            if isinstance(job, dict) and isinstance(job.get("jid"), str) and "class" in job:
                found[job["jid"]] += 1
    return found

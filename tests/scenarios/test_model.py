"""A model of what must hold for groups, priorities, debounce and throttle and the crash contract
(issue 38): Hypothesis' stateful testing drives random sequences through the real parts on a real
Redis (`model_world`: the client, the worker's fetch and job-run step, the poller, the supervisor's
recovery) and checks after every step what a user relies on, not a second implementation of
staging:

- nothing is lost: every job pushed and not yet finished is in Redis or running, except jobs
  running at a kill under basic fetch (at-most-once there by design), those a debounce replaced,
  and those an operator cancelled or cleared;
- no job runs again once it succeeded, unless it was running at a kill or its success was not
  yet acknowledged (the batch window) when its process died;
- a group never has more jobs running than its `group_concurrency`;
- a laned job's first run comes after every job pushed before it into its lane, and after every
  job of its group pushed before it at a higher level of the same side of the queue (0..5, 6..9);
- once the system is quiet (everything run out, time moved past every retry), no group holds a
  slot, and no job is stuck anywhere;
- no step raises anything but a one-line refusal of a user's bad option (`JobArgumentError`).

`make test` runs a bounded number of examples from fixed seeds (well under a minute);
`make test-model` runs it for SIDEQUEST_MODEL_MINUTES (default 30) with fresh seeds and prints how
many steps ran. SIDEQUEST_MODEL_WITHOUT (comma-separated: kill, restart, jid, retry_queue, rate,
window, foreign, clear, ttl, flow, cancel) leaves rule families out, to see each defect's own shrunk sequence
("window": the real-time rate window, whose Redis TTL a replay cannot repeat exactly).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import pytest
import redis
from conftest import RedisServer, redis_server_binary, wait_until
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from model_world import BEHAVIOUR, JOB, QUEUE, RETRY_QUEUE, Proc, stored_jids

from sidequest import Client, Config, JobArgumentError
from sidequest.api import Queue
from sidequest.api.groups import groups, pause_group, resume_group
from sidequest.client import sync_client
from sidequest.features.cancellation import cancel
from sidequest.jobs.payload import new_jids
from sidequest.store.keys import QUEUES, work, workers

try:  # the slots that heal (issue 38); absent from the old code the model is also run against
    from sidequest.store.lanes.slots import SlotReconciler, grace_of
except ImportError:
    SlotReconciler = None
from sidequest.worker.background.poller import Poller

CAPS = {"g0": 1, "g1": 2, "g2": None}  # each group's group_concurrency, for the whole example
WITHOUT = set(filter(None, os.environ.get("SIDEQUEST_MODEL_WITHOUT", "").split(",")))
LONG_MINUTES = float(os.environ.get("SIDEQUEST_MODEL_MINUTES", "0") or 0)  # make test-model sets it
# SIDEQUEST_MODEL_SHRINK=0: report the first failing sequence as found (faster, longer)
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target] + (
    [Phase.shrink] if os.environ.get("SIDEQUEST_MODEL_SHRINK", "1") != "0" else [])
INNER_JIDS = ["a" * 24, "b" * 24]  # a `jid` key in arguments (webhook bodies, Sidekiq payloads), shared

json_leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["class", "args", "x"] + ([] if "jid" in WITHOUT else ["jid"])) | st.text(max_size=4).filter(
        lambda key: key != "jid" or "jid" not in WITHOUT), inner, max_size=3), max_leaves=8)
with_jid = st.fixed_dictionaries({"jid": st.sampled_from(INNER_JIDS), "body": json_value})
arguments = st.lists(json_value | (st.nothing() if "jid" in WITHOUT else with_jid), max_size=3)
# windows of real time that pass in the test (a rate window is a Redis TTL), and values out of range
RATE_WINDOW = 0.1
rates = st.none() | (st.nothing() if "window" in WITHOUT else st.just((2, RATE_WINDOW))) | (
    st.nothing() if "rate" in WITHOUT else st.sampled_from(
    [(1, 1e308), (1, 1e16), (0, 1), (1, 0), (-1, 5), (1, float("nan"))]))


@dataclass
class Pushed:
    jid: str
    group: str | None
    state: str = "live"  # live, done (succeeded), gone (replaced, cancelled, cleared), lost (basic kill)


class Model(RuleBasedStateMachine):
    url = ""  # set by the test (the model's own AOF server)
    server: RedisServer
    steps = examples = 0  # counted over a run, for `make test-model`'s report

    def __init__(self) -> None:
        super().__init__()
        Model.examples += 1
        self.now = time.time()
        self.config = Config(redis_url=self.url, queues=((QUEUE, 0), (RETRY_QUEUE, 0)), concurrency=2, prefetch=0,
                             fetch_timeout=0.02, timeout=5, poll_interval=0.2, heartbeat_interval=0.5,
                             heartbeat_ttl=3, recovery_interval=1, max_retries=2)
        self.r = redis.Redis.from_url(self.url)
        self.r.flushdb()
        self.client = Client(self.config, clock=self.clock)
        self.started = 0  # processes started: each one's identity follows from its number
        self.pushes = 0
        # jids in push order: a replay must push the jids the run pushed (their bytes order the
        # members of a sorted set that share a score, so random ones make a replay differ)
        sync_client.new_jids = self.next_jids
        self.poller = Poller(self.config, self.client.redis, clock=self.clock)
        # what each recovery pass runs, on the model's clock: a slot whose job is nowhere heals
        self.slots = (SlotReconciler(self.client.redis, grace_of(self.config.heartbeat_interval), clock=self.clock)
                      if SlotReconciler is not None else None)
        self.jobs: dict[str, Pushed] = {}
        self.procs: list[Proc] = []
        self.dead: list[str] = []  # identities of killed processes
        self.paused: set[str] = set()
        self.slow: set[str] = set()  # groups a push gave a long rate window it accepted
        self.windowed = False  # a push gave a group a short rate window (real time)
        self.twice_ok: set[str] = set()  # running at a kill, or acknowledged within the window before it
        self.debounced: dict[int, str] = {}
        self.lanes: dict[tuple[int, str], list[str]] = {}  # (level, group) -> jids pushed into it, in order
        self.lane_of: dict[str, tuple[int, str]] = {}
        self.fetched: set[str] = set()
        self.push_order: dict[str, int] = {}  # a laned job's place among the client's pushes
        self.trail: dict[str, list[str]] = {}  # what the model did with a job, for a failure's message
        BEHAVIOUR.runs.clear()
        self.seen_runs = 0

    def clock(self) -> float:
        return self.now

    def next_jids(self, count: int) -> list[str]:
        self.pushes += count
        return [f"{n:024x}" for n in range(self.pushes - count + 1, self.pushes + 1)]

    # -- pushes ----------------------------------------------------------------------------------
    @rule(args=arguments, group=st.sampled_from([None, *CAPS]), priority=st.none() | st.integers(0, 9),
          later=st.sampled_from([None, None, 5.0]),
          retry_queue=st.just(False) if "retry_queue" in WITHOUT else st.booleans(), rate=rates)
    def push(self, args, group, priority, later, retry_queue, rate) -> None:
        options = {k: v for k, v in (("group", group), ("priority", priority), ("in_", later)) if v is not None}
        options["queue"] = QUEUE
        if group is not None and CAPS[group]:
            options["group_concurrency"] = CAPS[group]
        if group is not None and rate is not None:
            options["group_rate"] = rate
        if retry_queue:
            options["retry_queue"] = RETRY_QUEUE
        try:
            jid = self.client.push(JOB, args, **options)
        except JobArgumentError:
            return  # a user's bad option: refused in one line, nothing written
        assert jid is not None
        if rate is not None and group is not None and rate[1] > 1:
            self.slow.add(group)  # accepted: that group's window outlasts the test, not a defect
        elif rate is not None and group is not None:
            self.windowed = True  # a rate window in real time: the drain waits for it to pass
        self.jobs[jid] = Pushed(jid, group)
        self.push_order[jid] = len(self.push_order)
        if later is None and (group is not None or priority is not None):
            lane = (5 if priority is None else priority, group or "")
            self.lanes.setdefault(lane, []).append(jid)
            self.lane_of[jid] = lane

    @precondition(lambda self: "flow" not in WITHOUT)
    @rule(which=st.integers(0, 1), kind=st.sampled_from(["debounce", "throttle"]))
    def push_flow(self, which, kind) -> None:
        replaced = self.debounced.get(which) if kind == "debounce" else None
        pending = replaced is not None and any(replaced in m for m in self._members("schedule"))
        jid = self.client.push(JOB, [which], queue=QUEUE, **{kind: 1})
        if jid is None:
            assert kind == "throttle"
            return
        self.jobs[jid] = Pushed(jid, None)
        if kind == "debounce":
            self.debounced[which] = jid
            if pending:
                self.jobs[replaced].state = "gone"

    @precondition(lambda self: "foreign" not in WITHOUT)
    @rule(group=st.sampled_from(list(CAPS)), rate=st.sampled_from([[10, "1m"], [1, -5], "x"]))
    def push_foreign(self, group, rate) -> None:
        """A payload another client wrote (a Ruby app): its options are whatever it says."""
        jid = f"f{len(self.jobs):023x}"  # never one the client's counter gives
        body = {"class": JOB, "args": [], "queue": QUEUE, "jid": jid, "retry": 2, "created_at": self.now,
                "enqueued_at": self.now, "group": group, "group_rate": rate}
        self.client.redis.lpush(self.client.keys.queue(QUEUE), json.dumps(body))
        self.client.redis.sadd(QUEUES, QUEUE)
        self.jobs[jid] = Pushed(jid, None)  # onto the queue itself, as Sidekiq pushes: no lane, no cap

    # -- workers ---------------------------------------------------------------------------------
    @precondition(lambda self: len(self.procs) < 3)
    @rule(kind=st.sampled_from(["reliable", "basic"]))
    def start_worker(self, kind) -> None:
        self.started += 1
        self.procs.append(Proc.start(self.config, kind, self.clock, self.started))

    @precondition(lambda self: self.procs)
    @rule(n=st.integers(0, 2))
    def fetch(self, n) -> None:
        proc = self.procs[n % len(self.procs)]
        payload = proc.take()
        if payload is not None:
            self.took(str(payload["jid"]))
            self.trail.setdefault(str(payload["jid"]), []).append(f"fetched ({proc.fetch_kind})")

    @precondition(lambda self: any(p.held for p in self.procs))
    @rule(n=st.integers(0, 5), fail=st.booleans())
    def finish(self, n, fail) -> None:
        busy = [p for p in self.procs if p.held]
        proc = busy[n % len(busy)]
        self._finish(proc, n % len(proc.held), fail)

    def _finish(self, proc: Proc, index: int, fail: bool) -> None:
        payload = proc.finish(index, fail)
        ended = "failed" if fail else "succeeded"
        self.trail.setdefault(str(payload["jid"]), []).append(f"{ended} ({proc.fetch_kind})")
        self.check_runs()
        if not fail:
            self.jobs[str(payload["jid"])].state = "done"

    @precondition(lambda self: self.procs)
    @rule(n=st.integers(0, 2))
    def flush(self, n) -> None:
        self.procs[n % len(self.procs)].flush()

    @precondition(lambda self: self.procs and "kill" not in WITHOUT)
    @rule(n=st.integers(0, 2))
    def kill_9(self, n) -> None:
        proc = self.procs.pop(n % len(self.procs))
        running = {str(p["jid"]) for _, p in proc.held}
        self.twice_ok |= running | proc.unflushed
        if proc.fetch_kind == "basic":  # popped by BRPOP: gone with the process, by design
            for jid in running:
                self.jobs[jid].state = "lost"
        proc.killed(self.config)
        self.dead.append(proc.launcher.identity)

    @precondition(lambda self: self.slots is not None)
    @rule()
    def reconcile(self) -> None:
        """A recovery pass's slot healing, mid-flight: live processes have beaten (within their
        heartbeat TTL, as a live process does), so a running job is in a reserved list or a work
        hash; a slot given back under a running job shows as a group over its cap at a later fetch."""
        for proc in self.procs:
            proc.beat()
        self.slots.run([QUEUE, RETRY_QUEUE])

    @precondition(lambda self: "restart" not in WITHOUT)
    @rule()
    def restart_redis(self) -> None:
        self.server.proc.kill()  # a crash: with appendfsync always every acknowledged write is on disk
        self.server.proc.wait()
        self.server.start()

    @precondition(lambda self: "ttl" not in WITHOUT)
    @rule()
    def ten_minutes_without_a_worker(self) -> None:
        """A deploy, a fleet scaled to zero: no poller runs while every key whose TTL ends within
        ten minutes expires, as Redis would expire it (Redis keeps its own time, not the model's)."""
        ending = self._ending_within(600)
        for key in ending:
            self.r.pexpire(key, 1)
        # Redis expires each on its next access a millisecond from now
        wait_until(lambda: not any(self.r.exists(key) for key in ending), 5, 0.002, "the keys to expire")

    # -- time and operators ----------------------------------------------------------------------
    @rule(seconds=st.sampled_from([1.0, 30.0, 600.0]))
    def advance(self, seconds) -> None:
        self.now += seconds
        self.poller.enqueue_due()
        self.poller.stage_lanes()

    @rule(group=st.sampled_from(list(CAPS)), pause=st.booleans())
    def pause(self, group, pause) -> None:
        (pause_group if pause else resume_group)(QUEUE, group, client=self.client)
        (self.paused.add if pause else self.paused.discard)(group)

    @precondition(lambda self: "clear" not in WITHOUT)
    @rule()
    def clear(self) -> None:
        before = stored_jids(self.r)
        Queue(QUEUE, client=self.client).clear()
        after = stored_jids(self.r)
        for jid in before - after:
            if jid in self.jobs and self.jobs[jid].state == "live":
                self.jobs[jid].state = "gone"

    @precondition(lambda self: self.jobs and "cancel" not in WITHOUT)
    @rule(n=st.integers(0, 99))
    def cancel(self, n) -> None:
        jid = list(self.jobs)[n % len(self.jobs)]  # by push order: jids are random, the choice must not be
        held = {str(p["jid"]) for proc in self.procs for _, p in proc.held}
        if cancel(jid, client=self.client) and jid not in held and jid not in stored_jids(self.r):
            self.jobs[jid].state = "gone"

    @rule()
    def quiet(self) -> None:
        self.drain()

    # -- what must hold --------------------------------------------------------------------------
    @invariant()
    def nothing_lost_nothing_doubled(self) -> None:
        Model.steps += 1
        stored = stored_jids(self.r)
        doubled = [jid for jid, count in stored.items() if count > 1]
        assert not doubled, f"jobs stored twice: {doubled}"
        held = {str(p["jid"]) for proc in self.procs for _, p in proc.held}
        lost = [j.jid for j in self.jobs.values() if j.state == "live" and j.jid not in stored and j.jid not in held]
        assert not lost, f"jobs lost: {[(jid, self.trail.get(jid)) for jid in lost]}"

    def took(self, jid: str) -> None:
        """A job was fetched: its group within its cap, and the first run of a job pushed into a
        lane comes after every job pushed into that lane before it (push order within a level)."""
        self.check_caps()
        lane = self.lane_of.get(jid)
        if lane is not None and jid not in self.fetched:
            pushed = self.lanes[lane]
            ahead = [j for j in pushed[:pushed.index(jid)] if self.waits(j)]
            assert not ahead, f"{jid} of lane {lane} ran before {ahead}, pushed before it into that lane"
            above = [j for j in self.higher_on_its_side(jid, lane) if self.waits(j)]
            assert not above, f"{jid} of lane {lane} ran before {above}: pushed before it, a higher level"
        self.fetched.add(jid)

    def waits(self, jid: str) -> bool:
        return jid not in self.fetched and self.jobs[jid].state == "live"

    def higher_on_its_side(self, jid: str, lane: tuple[int, str]) -> list[str]:
        """Jobs of the same group pushed before `jid` at a higher level of the same side (levels
        0..5 are staged to the tail, 6..9 to the head): staged by one stage call, highest level
        first, whatever the grain. Across sides, and across groups (each its own cap, rate and
        turn), order holds only within the staging grain, which the model does not pin."""
        level, group = lane
        side = range(level + 1, 6) if level <= 5 else range(level + 1, 10)
        before = self.push_order[jid]
        return [j for higher in side for j in self.lanes.get((higher, group), []) if self.push_order[j] < before]

    def check_caps(self) -> None:
        running: dict[str, int] = {}
        for proc in self.procs:
            for _, payload in proc.held:
                group = self.jobs[str(payload["jid"])].group
                if group is not None:
                    running[group] = running.get(group, 0) + 1
        over = {g: n for g, n in running.items() if n > (CAPS[g] or n)}
        assert not over, f"groups over their group_concurrency: {over}"

    def check_runs(self) -> None:
        for jid in BEHAVIOUR.runs[self.seen_runs:]:
            job = self.jobs.get(jid)
            assert job is not None, f"a job nobody pushed ran: {jid}"
            assert job.state in ("live",) or jid in self.twice_ok, f"job {jid} ran again after it was {job.state}"
        self.seen_runs = len(BEHAVIOUR.runs)

    def drain(self) -> None:
        """Everything run out: running jobs succeed, time passes every retry, paused groups resume;
        then no job may be stuck and no group may hold a slot."""
        for group in CAPS:  # every group, whatever a clear did to the paused ones
            self.pause(group, False)
        if not self.procs:
            self.start_worker("reliable")
        for proc in self.procs:
            while proc.held:
                self._finish(proc, 0, False)
        # a day passes: the dead processes' work hashes have expired (their TTL is heartbeat_ttl)
        for identity in self.dead:
            self.r.delete(work(identity), workers(identity))  # Sidekiq 7's name and Sidekiq 6's
        deadline, idle = time.monotonic() + 30, 0
        while idle < 5 and time.monotonic() < deadline and (left := self._left()) != (0, 0):
            self.advance(86_400.0)
            if self.slots is not None:
                self.slots.run([QUEUE, RETRY_QUEUE])  # nothing runs now: a slot held is a slot lost
            ran = 0
            for proc in self.procs:
                while (payload := proc.take()) is not None:
                    self.took(str(payload["jid"]))
                    self._finish(proc, len(proc.held) - 1, False)
                    ran += 1
                proc.flush()
            idle = 0 if ran or self._left() < left else idle + 1
            if idle and self.windowed:  # a rate window is real time (a Redis TTL): let the open ones end
                wait_until(lambda: not self._ending_within(RATE_WINDOW), 5, 0.005, "the rate windows to end")
        stuck = self._waiting()
        assert not stuck, f"jobs stuck once quiet: {stuck}"
        held = self._slots_held()
        assert not held, f"slots held once quiet: {held}"

    def _ending_within(self, seconds: float) -> list[bytes]:
        """Keys whose TTL ends within `seconds` (the open rate windows, and anything as short-lived)."""
        return [key for key in self.r.scan_iter(count=1000) if 0 < self.r.pttl(key) <= seconds * 1000]

    def _left(self) -> tuple[int, int]:
        return len(self._waiting()), sum(self._slots_held().values())

    def _slots_held(self) -> dict[str, int]:
        return {g.name: g.running for g in groups(QUEUE, client=self.client) if g.running}

    def _waiting(self) -> list[str]:
        dead = set(self._members(self.client.keys.dead(QUEUE)))
        return [j.jid for j in self.jobs.values() if j.state == "live" and j.group not in self.slow
                and not any(j.jid in m for m in dead)]

    def _members(self, key: str) -> list[str]:
        return [m.decode("utf-8", "replace") for m in self.r.zrange(key, 0, -1)]

    def teardown(self) -> None:
        try:
            self.drain()
        finally:
            sync_client.new_jids = new_jids
            for proc in self.procs:
                proc.close()
            self.client.redis.close()
            self.r.close()


@pytest.fixture(scope="module")
def aof_server():
    server = RedisServer(redis_server_binary(), ["--appendonly", "yes", "--appendfsync", "always"])
    yield server
    server.stop()


def _run(server: RedisServer, **given: object) -> None:
    Model.url, Model.server = server.url(0), server
    run_state_machine_as_test(Model, settings=settings(
        deadline=None, database=None, suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
        phases=PHASES, **given))


# The sequences the model shrank to on 39d679b, each a defect of issue 38, replayed as written
SHRUNK = {
    "a jid in the arguments": [("push", {"args": [{"jid": "a" * 24, "body": None}], "group": "g0"}), ("quiet", {})],
    "retry_queue": [("push", {"args": [], "group": "g1", "retry_queue": True}), ("start_worker", {"kind": "reliable"}),
                    ("fetch", {"n": 0}), ("finish", {"n": 0, "fail": True}), ("quiet", {})],
    "a rate out of range": [("push", {"args": [], "group": "g0", "rate": (1, 1e308)}), ("quiet", {})],
    "a foreign payload's rate": [("push_foreign", {"group": "g0", "rate": [10, "1m"]}), ("quiet", {})],
}
# and one the model shrank to on this tree, a defect of the model's own (a dead process's work hash
# under Sidekiq 6's name outlived it): replayed so that the drain's healing stays checked
SHRUNK["a basic-fetch kill after a beat"] = [
    ("start_worker", {"kind": "basic"}), ("push", {"args": [], "group": "g0"}), ("fetch", {"n": 0}),
    ("reconcile", {}), ("kill_9", {"n": 0}), ("quiet", {})]
PUSH_DEFAULTS = {"group": None, "priority": None, "later": None, "retry_queue": False, "rate": None}


@pytest.mark.parametrize("defect", list(SHRUNK))
def test_the_sequences_the_model_shrank_hold(aof_server, defect):
    Model.url, Model.server = aof_server.url(0), aof_server
    model = Model()
    try:
        for step, given in SHRUNK[defect]:
            getattr(model, step)(**({**PUSH_DEFAULTS, **given} if step == "push" else given))
            model.nothing_lost_nothing_doubled()
    finally:
        model.teardown()


@pytest.mark.skipif(LONG_MINUTES > 0, reason="make test-model runs the long form")
def test_the_model_holds_on_fixed_seeds(aof_server):
    _run(aof_server, max_examples=30, stateful_step_count=30, derandomize=True)


@pytest.mark.skipif(LONG_MINUTES <= 0, reason="make test-model runs it (SIDEQUEST_MODEL_MINUTES)")
def test_the_model_holds_for_minutes(aof_server):
    started = time.monotonic()
    batches = 0
    while time.monotonic() - started < LONG_MINUTES * 60:
        _run(aof_server, max_examples=25, stateful_step_count=50)  # fresh seeds each batch
        batches += 1
    print(f"\nmodel: {Model.steps} steps in {Model.examples} examples ({batches} batches of 25) in "
          f"{time.monotonic() - started:.0f} s, no failure")

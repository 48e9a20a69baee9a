"""Lanes (groups and priorities): the staging rules, pushed and run through real workers."""

import json
import time

import pytest
from conftest import wait_until

import sidequest
from sidequest import JobArgumentError
from sidequest.api import pause_group, resume_group
from sidequest.store import keys, lanes


def _record(tag, *values):
    from jobs_for_tests import _r

    _r().rpush("test:lanes", json.dumps([tag, *values, time.time()]))


@sidequest.job(name="LaneTenant", group=lambda tenant, n: tenant)
def tenant_job(tenant, n):
    _record("tenant", tenant, n)


@sidequest.job(name="LanePriority")
def prio_job(label):
    _record("prio", label)


@sidequest.job(name="LaneLimited", group=lambda tenant, n: tenant, group_concurrency=2)
def limited(tenant, n):
    _record("start", tenant, n)
    time.sleep(0.05)  # the job's own work: long enough to overlap
    _record("end", tenant, n)


@sidequest.job(name="LaneRated", group=lambda tenant, n: tenant, group_rate=(3, 1.0))
def rated(tenant, n):
    _record("rated", tenant, n)


@sidequest.job(name="LaneFails", group="g", retry=1, retry_in=lambda count, exc: 0.2)
def fails(n):
    _record("fails", n)
    raise RuntimeError("boom")


def records(r, tag):
    return [x[1:-1] for x in map(json.loads, r.lrange("test:lanes", 0, -1)) if x[0] == tag]


def waiting_in_queue(r, queue="default"):
    return [json.loads(raw) for raw in reversed(r.lrange(keys.queue(queue), 0, -1))]  # oldest first


LANE = lanes.LaneKeys(keys.DEFAULT.lanes("default"))


def test_a_laned_push_waits_in_its_lane_and_only_a_few_are_staged(client, r):
    for n in range(100):
        tenant_job.set(client=client).perform_async("A", n)
    staged = waiting_in_queue(r)
    assert len(staged) == lanes.LANE_DEPTH
    assert [job["args"] for job in staged] == [["A", n] for n in range(lanes.LANE_DEPTH)]  # FIFO
    assert staged[0]["group"] == "A" and "priority" not in staged[0]
    assert r.llen(LANE.lane(5, "A")) == 100 - lanes.LANE_DEPTH
    assert r.hget(LANE.waiting, "A") == str(100 - lanes.LANE_DEPTH).encode()
    assert r.scard(LANE.running("A")) == lanes.LANE_DEPTH  # staged counts as the group's


def test_groups_take_turns_whatever_their_size(client, r, start):
    for n in range(200):
        tenant_job.set(client=client).perform_async("A", n)
    for tenant in ("B", "C"):
        for n in range(10):
            tenant_job.set(client=client).perform_async(tenant, n)
    start(concurrency=2)
    wait_until(lambda: len(records(r, "tenant")) == 220, timeout=30)
    order = [tenant for tenant, _ in records(r, "tenant")]
    last_b, last_c = max(i for i, t in enumerate(order) if t == "B"), max(i for i, t in enumerate(order) if t == "C")
    # A had LANE_DEPTH staged before B and C came; then the three take turns
    assert max(last_b, last_c) < lanes.LANE_DEPTH + 3 * 10 + 10
    assert sorted(n for t, n in records(r, "tenant") if t == "A") == list(range(200))  # each once
    wait_until(lambda: r.exists(LANE.base, LANE.waiting, LANE.busy, LANE.limits) == 0, message="lanes emptied")


def test_a_higher_priority_job_runs_before_a_backlog_and_fifo_holds_within_a_level(client, r, start):
    for n in range(300):
        prio_job.set(client=client).perform_async(f"plain-{n}")
    for n in range(3):
        prio_job.set(client=client, priority=9).perform_async(f"p9-{n}")
    for n in range(3):
        prio_job.set(client=client, priority=7).perform_async(f"p7-{n}")
    for n in range(3):
        prio_job.set(client=client, priority=2).perform_async(f"p2-{n}")
    start(concurrency=1)
    wait_until(lambda: len(records(r, "prio")) == 309, timeout=30)
    order = [label for (label,) in records(r, "prio")]
    assert order[:6] == ["p9-0", "p9-1", "p9-2", "p7-0", "p7-1", "p7-2"] or (
        order[0] == "p9-0" and [x for x in order if x.startswith("p9")] == ["p9-0", "p9-1", "p9-2"]
        and order.index("p9-2") < order.index("p7-0"))
    assert [x for x in order if x.startswith("p7")] == ["p7-0", "p7-1", "p7-2"]
    assert order[-3:] == ["p2-0", "p2-1", "p2-2"]  # below the default: after the queue's plain jobs


def test_group_concurrency_holds_while_other_groups_run(client, r, start):
    for n in range(8):
        limited.set(client=client).perform_async("A", n)
        limited.set(client=client).perform_async("B", n)
    start(concurrency=8)
    wait_until(lambda: len(records(r, "end")) == 16, timeout=30)
    events = sorted([(at, +1, t) for t, _, at in _timed(r, "start")] + [(at, -1, t) for t, _, at in _timed(r, "end")])
    running = {"A": 0, "B": 0}
    peak = {"A": 0, "B": 0}
    for _, step, tenant in events:
        running[tenant] += step
        peak[tenant] = max(peak[tenant], running[tenant])
    assert peak == {"A": 2, "B": 2}
    wait_until(lambda: r.scard(LANE.running("A")) == 0 and r.scard(LANE.running("B")) == 0)


def _timed(r, tag):
    return [tuple(x[1:]) for x in map(json.loads, r.lrange("test:lanes", 0, -1)) if x[0] == tag]


def test_group_rate_stages_at_most_count_per_window(client, r, start):
    for n in range(7):
        rated.set(client=client).perform_async("A", n)
    begun = time.time()
    start(concurrency=4)
    wait_until(lambda: len(records(r, "rated")) == 7, timeout=30)
    times = [at - begun for _, _, at in _timed(r, "rated")]
    assert sum(1 for t in times if t < 0.9) <= 3
    assert max(times) >= 1.5  # the third window: 3 + 3 + 1


def test_a_paused_group_waits_while_others_run_and_resumes(client, r, start):
    pause_group("default", "A", client=client)
    for n in range(3):
        tenant_job.set(client=client).perform_async("A", n)
        tenant_job.set(client=client).perform_async("B", n)
    start(concurrency=2)
    wait_until(lambda: len(records(r, "tenant")) == 3)
    assert {t for t, _ in records(r, "tenant")} == {"B"}
    resume_group("default", "A", client=client)  # staged again at once: it was set aside while paused
    wait_until(lambda: len(records(r, "tenant")) == 6)


def test_a_laned_retry_and_a_scheduled_job_come_back_through_their_lane(client, r, start):
    tenant_job.set(client=client).perform_in(0.3, "S", 1)
    assert r.zcard("schedule") == 1 and not r.exists(LANE.base)
    fails.set(client=client).perform_async(1)
    start(concurrency=2, max_retries=1)
    wait_until(lambda: len(records(r, "fails")) == 2 and records(r, "tenant") == [["S", 1]], timeout=60)
    wait_until(lambda: r.zcard("dead") == 1)
    assert r.scard(LANE.running("g")) == 0 and r.scard(LANE.running("S")) == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"priority": 10}, "option 'priority' must be an int from 0 to 9"),
    ({"priority": True}, "option 'priority' must be an int from 0 to 9"),
    ({"group": 1.5}, "option 'group' must be a str or int"),
    ({"group_concurrency": 2}, "give the job a group too"),
    ({"group": "a", "group_rate": (0, 1)}, "option 'group_rate' must be (count, seconds)"),
])
def test_bad_lane_options_are_refused_in_one_line(client, r, options, message):
    with pytest.raises(JobArgumentError) as caught:
        prio_job.set(client=client, **options).perform_async("x")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert r.dbsize() == 0


def test_a_group_function_returning_nothing_usable_is_refused(client, r):
    bad = sidequest.job(name="LaneBadGroup", group=lambda x: None)(lambda x: None)
    with pytest.raises(JobArgumentError, match="returned None"):
        bad.set(client=client).perform_async(1)
    assert r.dbsize() == 0


def test_cancel_finds_a_job_still_in_its_lane_and_keeps_the_counts_true(client, r, start):
    jids = [tenant_job.set(client=client).perform_async("A", n) for n in range(40)]
    late = tenant_job.set(client=client).perform_async("Z", 0)  # the queue is full: Z's lane holds it alone
    assert sidequest.cancel(jids[-1], client=client) is True  # in A's lane (32 of A's were staged)
    assert sidequest.cancel(late, client=client) is True
    assert r.hget(LANE.waiting, "A") == str(40 - lanes.LANE_DEPTH - 1).encode()
    assert r.lrange(LANE.rotation(5), 0, -1) == [b"A"] and not r.hexists(LANE.waiting, "Z")  # Z's turn went
    assert sidequest.cancel(jids[-1], client=client) is False  # gone
    start(concurrency=2)
    wait_until(lambda: len(records(r, "tenant")) == 39, timeout=30)
    assert sorted(n for t, n in records(r, "tenant")) == list(range(39))
    wait_until(lambda: r.exists(LANE.base, LANE.waiting) == 0 and r.scard(LANE.running("A")) == 0)


def test_a_group_held_at_its_limit_does_not_let_a_lower_priority_job_ahead(client, r, start):
    for n in range(6):
        limited.set(client=client).perform_async("LC", n)  # group_concurrency=2: held back most of the time
    for n in range(150):
        tenant_job.set(client=client).perform_async("big", n)
    prio_job.set(client=client, priority=1).perform_async("low")
    start(concurrency=4)
    wait_until(lambda: len(records(r, "prio")) == 1 and len(records(r, "end")) == 6, timeout=30)
    tags = [x[0] for x in map(json.loads, r.lrange("test:lanes", 0, -1))]
    # staged once "big"'s lane is empty: at most the 3 other threads' "big" jobs end after it
    assert tags[tags.index("prio"):].count("tenant") <= 3


@sidequest.job(name="LaneWebhook", group=lambda body, n: "hooks", group_concurrency=1)
def webhook(body, n):
    _record("hook", n)


def test_a_job_whose_argument_holds_a_jid_gives_its_group_back_when_it_ends(client, r, start):
    body = {"jid": "aaaaaaaaaaaaaaaaaaaaaaaa", "class": "HardJob"}  # a Sidekiq payload passed along
    for n in range(8):
        webhook.set(client=client).perform_async(body, n)
    start(concurrency=2)
    wait_until(lambda: len(records(r, "hook")) == 8, timeout=15, message="every job of the group")
    assert [n for (n,) in records(r, "hook")] == list(range(8))  # one at a time, in order
    wait_until(lambda: not r.exists(LANE.running("hooks"), LANE.busy), message="the group's slot given back")


@sidequest.job(name="LaneRetried", group="r", group_concurrency=1, retry_queue="later", retry=1,
               retry_in=lambda count, exc: 0.1)
def retried(n):
    _record("retried", n)
    if n == 0 and len(records(_redis(), "retried")) == 1:
        raise RuntimeError("first run fails")


def _redis():
    from jobs_for_tests import _r

    return _r()


def test_a_retry_to_its_retry_queue_gives_the_group_back_in_the_queue_it_ran_from(client, r, start):
    retried.set(client=client).perform_async(0)  # fails once: its retry goes to queue "later"
    retried.set(client=client).perform_async(1)  # waits for the group's one slot in "default"
    start(concurrency=2, queues=["default", "later"])
    wait_until(lambda: sorted(n for (n,) in records(r, "retried")) == [0, 0, 1], timeout=15,
               message="the group's next job and the retry")
    later = lanes.LaneKeys(keys.DEFAULT.lanes("later"))
    wait_until(lambda: not r.exists(LANE.running("r"), later.running("r"), LANE.busy, later.busy),
               message="no slot held in either queue")


def test_a_foreign_payload_with_a_bad_group_rate_runs_once_and_is_acknowledged(client, r, start):
    from sidequest.jobs.payload import new_jid

    jid = new_jid()
    payload = {"class": "LaneTenant", "args": ["F", 1], "queue": "default", "jid": jid, "retry": True,
               "created_at": time.time(), "enqueued_at": time.time(), "group": "F", "group_rate": [10, "1m"]}
    r.lpush(keys.queue("default"), json.dumps(payload))  # as a client of another language wrote it
    tenant_job.set(client=client).perform_async("G", 2)
    start(concurrency=1)
    wait_until(lambda: sorted(records(r, "tenant")) == [["F", 1], ["G", 2]], timeout=15)
    wait_until(lambda: not any(r.llen(k) for k in r.smembers(keys.RESERVATIONS)), message="acknowledged")
    assert records(r, "tenant").count(["F", 1]) == 1


def test_the_next_batch_at_the_head_goes_once_the_last_ones_deepest_is_taken_whatever_was_put_back(
        client, r, start):
    for n in range(300):
        prio_job.set(client=client).perform_async(f"plain-{n}")
    for n in range(40):  # 32 staged at the head, 8 wait for the batch to be taken
        prio_job.set(client=client, priority=9).perform_async(f"p9-{n}")
    for n in range(100):  # a shutdown put 100 jobs back at the head, ahead of the batch
        prio_job.set(client=client, queue="scratch").perform_async(f"back-{n}")
        r.lmove(keys.queue("scratch"), keys.queue("default"), "LEFT", "RIGHT")
    start(concurrency=1)
    wait_until(lambda: len(records(r, "prio")) == 440, timeout=30)
    order = [label for (label,) in records(r, "prio")]
    assert order[:100] == [f"back-{n}" for n in reversed(range(100))]  # RPUSHed one by one: the last runs first
    assert order[100:140] == [f"p9-{n}" for n in range(40)]  # the next batch as soon as the first is taken

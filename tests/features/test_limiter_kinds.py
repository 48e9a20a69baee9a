"""Sidekiq Enterprise's limiter kinds beside `concurrent` and `window`: `bucket`, `leaky`, `points`
and `unlimited`, and the `wait_timeout` / `lock_timeout` options, against their documented
semantics on a real Redis (a Cluster's in tests/scenarios/test_cluster.py)."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time

import pytest
from conftest import wait_until
from helpers import ran
from jobs_for_tests import bucketed

import sidequest
from features.test_limiter import attempts_until_admitted, enters, redis_now
from sidequest import OverLimit
from sidequest.features.limiter import bucket, concurrent, leaky, points, unlimited, window
from sidequest.store import keys
from sidequest.testing import fake


def at_interval_start(client, interval: float) -> float:
    """Wait (briefly: less than `interval`) until an interval of `interval` s has just begun on
    Redis's clock; the start of that interval."""
    now = redis_now(client)
    boundary = (math.floor(now / interval) + 1) * interval
    # a wait for a time, not an event: Redis's clock (this host's) passes the boundary by then
    time.sleep(max(boundary - now, 0.0) + 0.005)
    return boundary


# -- bucket: n per calendar interval, all back at the interval's start -------------------------------

def test_a_bucket_admits_n_per_interval_and_resets_at_the_intervals_start(client):
    interval = 1.0
    api = bucket("api", 2, interval, client=client, rng=random.Random(1))
    for _ in range(3):  # a loaded machine may cross a boundary between the entries: start again
        start = at_interval_start(client, interval)
        assert enters(api) and enters(api)
        with pytest.raises(OverLimit) as over, api:
            pass
        if redis_now(client) < start + interval:
            break
    end = start + interval
    assert over.value.delay is not None and 0 < over.value.delay <= (end - start) + 0.1
    refused, admitted = attempts_until_admitted(api, client, 10)
    assert admitted >= end  # not before the next interval
    assert all(at < end for at in refused)  # nor refused once it had begun
    assert enters(api)  # the whole count is back at once (a window would free one at a time)
    assert not enters(api)


def test_a_bucket_takes_sidekiqs_interval_names(client):
    assert [bucket("b", 1, name, client=client).interval for name in ("second", "minute", "hour", "day")] == [
        1, 60, 3600, 86400]
    with pytest.raises(ValueError, match="'second', 'minute', 'hour' or 'day'"):
        bucket("b", 1, "fortnight")


# -- leaky: a burst of `size`, then one every interval/size ----------------------------------------

def test_a_leaky_bucket_allows_a_burst_of_its_size_then_drains_at_its_rate(client):
    drip = 0.2
    api = leaky("shopify", 3, 3 * drip, client=client, rng=random.Random(1))
    began = redis_now(client)
    assert enters(api) and enters(api) and enters(api)  # the burst
    first = redis_now(client)
    with pytest.raises(OverLimit) as over, api:
        pass
    assert over.value.delay is not None and 0 < over.value.delay <= drip + 0.1
    for k in (1, 2):  # then one per drip, not a burst again
        refused, admitted = attempts_until_admitted(api, client, 10)
        assert admitted >= began + k * drip
        assert all(at < first + k * drip for at in refused)


# -- points: an estimate taken on entry, corrected by what was used -----------------------------------

def test_points_are_taken_by_the_estimate_and_corrected_by_what_was_used(client, r):
    graphql = points("graphql", 100, 10.0, client=client, rng=random.Random(1))  # refills 10 a second
    with graphql.within_limit(estimate=80) as used:
        used(20)
    assert 19 < float(r.hget(keys.limit_points("graphql"), "level")) <= 20  # 20, less what drained since
    with graphql.within_limit(estimate=70):  # room: 20 + 70 <= 100; the estimate stands
        pass
    with pytest.raises(OverLimit) as over, graphql.within_limit(estimate=50):
        pass
    assert over.value.delay is not None and 3.5 < over.value.delay <= 4.0 + 1.0  # (90 + 50 - 100) / 10
    with graphql:  # a plain `with` takes one point
        pass
    assert 89 < float(r.hget(keys.limit_points("graphql"), "level")) <= 91


def test_points_used_may_exceed_the_estimate_and_then_delay_the_next(client):
    graphql = points("gql", 10, 1.0, client=client)
    with graphql.within_limit(estimate=1) as used:
        used(10)
    with pytest.raises(OverLimit), graphql.within_limit(estimate=2):
        pass


def test_an_estimate_larger_than_the_bucket_is_refused(client):
    with pytest.raises(ValueError, match="never fits"):
        points("gql", 10, 1.0, client=client).within_limit(estimate=11)


def test_unlimited_always_admits_and_touches_no_redis(client, r):
    free = unlimited()
    for _ in range(50):
        with free:
            pass
    with free.within_limit():
        pass
    assert list(r.scan_iter("sidequest:limit:*")) == []


# -- wait_timeout: wait for room inside `with`, for the known time, not in a loop ---------------------

def evalsha_calls(r) -> int:
    return int(r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.parametrize("make", [
    lambda c, w: window("w", 1, per=0.3, wait_timeout=w, client=c),
    lambda c, w: bucket("b", 1, 0.3, wait_timeout=w, client=c),
    lambda c, w: leaky("l", 1, 0.3, wait_timeout=w, client=c),
    lambda c, w: points("p", 1, 0.3, wait_timeout=w, client=c),
], ids=["window", "bucket", "leaky", "points"])
def test_wait_timeout_waits_for_the_known_time_then_enters(client, r, make):
    assert enters(make(client, 0))
    waiting = make(client, 5.0)
    calls, began = evalsha_calls(r), time.monotonic()
    with waiting:  # no OverLimit: room came within the wait
        waited = time.monotonic() - began
    assert waited < 3.0
    assert evalsha_calls(r) - calls <= 3  # slept until the known time: no polling loop


@pytest.mark.parametrize("make", [
    lambda c: window("w", 1, per=2, wait_timeout=0.5, client=c),
    lambda c: leaky("l", 1, 2, wait_timeout=0.5, client=c),
], ids=["window", "leaky"])
def test_wait_timeout_shorter_than_the_known_wait_raises_at_once(client, make):
    assert enters(make(client))
    began = time.monotonic()
    with pytest.raises(OverLimit) as over, make(client):
        pass
    assert time.monotonic() - began < 0.4  # room comes later than the wait allows: no use waiting
    assert over.value.delay is not None and over.value.delay > 1.0


def test_a_concurrent_wait_timeout_enters_once_a_slot_is_given_back(client, r):
    one = concurrent("mutex", 1, wait_timeout=5, client=client)
    inside, release = threading.Event(), threading.Event()

    def hold():
        with one:
            inside.set()
            release.wait(10)
    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    timer = threading.Timer(0.4, release.set)
    timer.start()
    calls, began = evalsha_calls(r), time.monotonic()
    with one:
        waited = time.monotonic() - began
    holder.join(10)
    assert 0.35 <= waited < 4
    assert evalsha_calls(r) - calls <= 12  # polls with a growing pause (at most 0.5 s): no spin


def test_a_concurrent_wait_timeout_raises_when_no_slot_frees_in_time(client):
    one = concurrent("mutex", 1, client=client)
    with one:
        began = time.monotonic()
        with pytest.raises(OverLimit) as over, concurrent("mutex", 1, wait_timeout=0.3, client=client):
            pass
        assert time.monotonic() - began >= 0.3
    assert over.value.delay is None


@pytest.mark.parametrize("make", [
    lambda c: leaky("l", 1, 0.4, wait_timeout=5, client=c),
    lambda c: points("p", 1, 0.4, wait_timeout=5, client=c).within_limit(estimate=1),
    lambda c: concurrent("c", 1, wait_timeout=5, client=c),
], ids=["leaky", "points", "concurrent"])
def test_async_with_waits_without_blocking_the_event_loop(client, make):
    async def scenario() -> tuple[int, float]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)  # another task's pace: its turns show the loop ran
                ticks += 1
        ticker = asyncio.create_task(tick())
        release, entered = asyncio.Event(), asyncio.Event()

        async def hold() -> None:  # the first entry; a concurrent slot is held until released
            async with make(client):
                entered.set()
                await release.wait()
        holder = asyncio.create_task(hold())
        await asyncio.wait_for(entered.wait(), 10)
        asyncio.get_running_loop().call_later(0.3, release.set)
        began = time.monotonic()
        async with make(client):
            waited = time.monotonic() - began
        await holder
        ticker.cancel()
        return ticks, waited
    ticks, waited = asyncio.run(scenario())
    assert waited >= 0.2  # it did wait for room ...
    assert ticks >= 10  # ... while the loop kept running


def test_lock_timeout_is_the_enterprise_name_of_the_lease(client):
    assert concurrent("erp", 5, lock_timeout=30, client=client).lease == 30
    with pytest.raises(ValueError, match="lock_timeout"):
        concurrent("erp", 5, lease=10, lock_timeout=30)


@pytest.mark.parametrize("make", [
    lambda: bucket("x", 0, 1), lambda: bucket("x", 1, 0), lambda: leaky("x", 1, -1), lambda: points("x", 1.5, 1),
    lambda: window("x", 1, per=1, wait_timeout=-1), lambda: concurrent("x", 1, wait_timeout=math.inf),
])
def test_bad_settings_of_the_new_kinds_are_refused(make):
    with pytest.raises(ValueError):
        make()


# -- in a job: over the limit, snoozed until the next interval, no retry spent ------------------------

def test_a_bucket_limit_in_jobs_snoozes_the_extra_ones_to_the_next_interval(start, r, client):
    start(concurrency=4)
    client.push_bulk(bucketed, [[n, "per-second", 2, 1] for n in range(6)])
    wait_until(lambda: len(ran(r, "bucketed-start")) == 6, 60, 0.1, "all 6 bucketed jobs to start")
    starts = ran(r, "bucketed-start")
    # each job was admitted between its `before` and `after` (Redis's clock): those that surely
    # fell in one second number at most 2, and 6 admissions needed at least 3 seconds
    sure: dict[int, int] = {}
    for _n, before, after, _retry_count, _snoozed in starts:
        if math.floor(before) == math.floor(after):
            sure[math.floor(before)] = sure.get(math.floor(before), 0) + 1
    assert max(sure.values(), default=0) <= 2, starts
    assert math.floor(max(a for _, _, a, *_ in starts)) - math.floor(min(b for _, b, *_ in starts)) >= 2, starts
    assert sorted(n for n, *_ in starts) == list(range(6))  # each once
    assert all(retry_count is None for *_, retry_count, _ in starts)  # no retry spent
    assert any(snoozed for *_, snoozed in starts)
    assert int(r.get("stat:failed") or 0) == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_the_new_kinds_are_exported_as_documented():
    assert sidequest.limiter.bucket is bucket and sidequest.limiter.points is points
    assert sidequest.limiter.leaky is leaky and sidequest.limiter.unlimited is unlimited


def test_without_redis_in_fake_mode_every_kind_lets_every_entry_through():
    kinds = [bucket("fb", 1, "hour"), leaky("fl", 1, 60), points("fp", 1, 60)]
    with fake():
        for kind in kinds:
            with kind, kind:
                pass
        with kinds[2].within_limit(estimate=1) as used, kinds[2].within_limit(estimate=1):
            used(1)


def test_a_correction_that_redis_refuses_is_logged_and_keeps_the_blocks_own_error(client, r, caplog):
    graphql = points("broken", 10, 1.0, client=client)
    with pytest.raises(KeyError), graphql.within_limit(estimate=5) as used:
        used(1)
        r.set(keys.limit_points("broken"), "not a hash")  # WRONGTYPE for the correction
        raise KeyError("the job's own error")
    assert "could not correct limiter 'broken' by -4 point(s)" in caplog.text

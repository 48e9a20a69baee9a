"""Producing from asyncio code: `job.aio.*` and `sidequest.aio` on redis.asyncio, never blocking the loop."""

import asyncio
import json
import time

import pytest
from conftest import wait_until
from helpers import queue_items, ran, zset_items
from jobs_for_tests import Resize, compute, compute_boom, echo, unique_work

import sidequest
import sidequest.testing
from sidequest import AsyncClient, JobArgumentError, JobFailed


def test_an_async_producer_pushes_a_job_a_worker_runs(config, r, start):
    sidequest.configure(config)
    start()

    async def produce():
        jid = await compute.aio.perform_async(3)
        assert await sidequest.client.async_client.status(jid) in ("queued", "running", "done")
        value = await sidequest.client.async_client.result(jid, timeout=10)
        assert await sidequest.client.async_client.status(jid) == "done"
        await sidequest.client.async_client.default_client().aclose()
        return jid, value

    jid, value = asyncio.run(produce())
    assert value == {"n": 3, "double": 6, "items": [3, None, True]}
    assert r.hget(f"sidequest:status:{jid}", "state") == b"done"


def test_the_loop_keeps_running_while_a_result_is_awaited(config, r, start):
    start()

    async def produce():
        async with AsyncClient(config) as client:
            jid = await compute.aio.set(client=client).perform_async(1, "gate")
            ticks = 0
            twenty = asyncio.Event()

            async def tick():
                nonlocal ticks
                while True:
                    ticks += 1
                    if ticks == 20:
                        twenty.set()
                    await asyncio.sleep(0.01)  # another task's own pace: its turns are what is counted

            async def open_gate():
                # The job ends only after other tasks have run 20 times during the wait: were
                # the loop blocked while a result is awaited, it would never end (the wait
                # times out), however slow or fast the machine.
                await twenty.wait()
                connection = await client.connection()
                await connection.set("gate", 1)

            ticker = asyncio.create_task(tick())
            opener = asyncio.create_task(open_gate())
            value = await client.result(jid, timeout=60)
            ticker.cancel()
            await opener
            return value, ticks

    value, ticks = asyncio.run(produce())
    assert value["n"] == 1 and ticks >= 20  # other tasks ran all along


def test_async_pushes_write_what_sync_pushes_write(config, r):
    async def produce():
        async with AsyncClient(config) as client:
            now = await Resize.aio.set(client=client).perform_async("a.png", 1)
            later = await Resize.aio.set(client=client).perform_in(60, "b.png", 2)
            at = await Resize.aio.set(client=client, queue="urgent").perform_at(time.time() + 120, "c.png", 3)
            bulk = await echo.aio.set(client=client).perform_bulk([[1], [2]])
            by_name = await client.push("HardWorker", [1], queue="ruby")
            return now, later, at, bulk, by_name

    now, later, at, bulk, by_name = asyncio.run(produce())
    [image] = queue_items(r, "images")
    assert image["jid"] == now and image["args"] == ["a.png", 1] and "enqueued_at" in image
    scheduled = {p["jid"]: (p, score) for p, score in zset_items(r, "schedule")}
    assert set(scheduled) == {later, at} and scheduled[at][0]["queue"] == "urgent"
    assert [p["jid"] for p in reversed(queue_items(r))] == bulk
    assert queue_items(r, "ruby")[0]["jid"] == by_name and r.smembers("queues") == {b"images", b"default", b"ruby"}


def test_async_pushes_carry_keyword_arguments_that_reach_the_job(config, r, start):
    start()

    async def produce():
        async with AsyncClient(config) as client:
            first = await compute.aio.set(client=client).perform_async(n=2)
            later = await compute.aio.set(client=client).perform_in(3600, 3, gate=None)
            by_client = await client.push(compute, [4], {"gate": None})
            return later, await client.result(first, timeout=10), await client.result(by_client)

    later, value, other = asyncio.run(produce())
    assert (value, other["n"]) == ({"n": 2, "double": 4, "items": [2, None, True]}, 4)
    [(scheduled, _)] = zset_items(r, "schedule")
    assert (scheduled["jid"], scheduled["args"], scheduled["kwargs"]) == (later, [3], {"gate": None})


def test_concurrent_async_unique_pushes_write_one_job(config, r):
    async def produce():
        async with AsyncClient(config) as client:
            setter = unique_work.aio.set(client=client)
            return await asyncio.gather(*(setter.perform_async(7) for _ in range(20)))

    jids = asyncio.run(produce())
    assert len([j for j in jids if j]) == 1 and jids.count(None) == 19
    assert len(queue_items(r)) == 1


def test_async_result_raises_for_a_dead_job(config, r, start):
    start()

    async def produce():
        async with AsyncClient(config) as client:
            jid = await client.push(compute_boom, [9])
            with pytest.raises(JobFailed, match="cannot compute 9"):
                await client.result(jid, timeout=10)
            return await client.status(jid)

    assert asyncio.run(produce()) == "dead"


def test_arguments_are_checked_before_anything_is_sent(config, r):
    async def produce():
        async with AsyncClient(config) as client:
            setter = compute.aio.set(client=client)
            with pytest.raises(JobArgumentError, match="unexpected keyword argument 'm'"):
                await setter.perform_async(1, m=1)
            with pytest.raises(JobArgumentError, match="kwargs\\['gate'\\] is a set"):
                await setter.perform_async(1, gate={1})
            with pytest.raises(JobArgumentError, match="not a Python job of this codebase"):
                await client.push("RubyJob", [1], {"gate": "g"})
            with pytest.raises(JobArgumentError):
                await setter.perform_async({1, 2})
            with pytest.raises(JobArgumentError):
                await setter.perform_async(1, 2, 3)

    asyncio.run(produce())
    assert r.keys("*") == []


def test_fake_mode_captures_async_pushes():
    async def produce():
        await echo.aio.perform_async("hi")
        await Resize.aio.perform_in(10, "a.png", 5)

    with sidequest.testing.fake() as jobs:
        asyncio.run(produce())
        assert [p["args"] for p in jobs.pushed(echo)] == [["hi"]]
        assert jobs.pushed(Resize)[0]["args"] == ["a.png", 5]


def test_each_event_loop_gets_its_own_default_client(config, r):
    sidequest.configure(config)

    async def produce(n):
        jid = await echo.aio.perform_async(n)
        client = sidequest.client.async_client.default_client()
        await client.aclose()
        return jid, client

    first = asyncio.run(produce(1))
    second = asyncio.run(produce(2))
    assert first[1] is not second[1]
    assert sorted(json.loads(x)["args"][0] for x in r.lrange("queue:default", 0, -1)) == [1, 2]
    assert ran(r) == []
    wait_until(lambda: r.llen("queue:default") == 2)

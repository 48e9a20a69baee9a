"""The one acknowledger's decisions and the one RESERVE/read-back, without a runner
(`worker.fetch.acknowledger`, `worker.fetch.reserve`): both runners drive these objects, the
threads runner from its acknowledger thread, the asyncio runner from loop timers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import pytest
import redis
from conftest import wait_until, wait_until_async
from jobs_for_tests import echo

from sidequest.client import async_client as aio
from sidequest.store import keys
from sidequest.store.direct import AsyncDirectPath, direct_path_for
from sidequest.store.scripts import Scripts
from sidequest.worker.fetch.acknowledger import ACK_BATCH, FULL, OPENED, Acknowledger, AckThread, AckTimers
from sidequest.worker.fetch.reserve import BatchLedger, reserve_args

BATCH = keys.reserved("host:3:rules", keys.BATCH_SLOT)


def ack(raw: bytes) -> tuple[bytes, list[object], str]:
    return raw, [0], BATCH


def test_the_first_success_opens_a_window_that_a_send_closes():
    acks = Acknowledger(window=0.05)
    assert not acks.waiting() and acks.left(time.monotonic()) == 0
    assert acks.add(ack(b"a")) == OPENED
    assert acks.add(ack(b"b")) == 0  # the same window: no second timer, no wake-up
    opened = acks.opened
    assert acks.left(opened + 0.01) == pytest.approx(0.04) and acks.left(opened + 0.051) <= 0
    assert [raw for raw, _, _ in acks.take()] == [b"a", b"b"]  # a RESERVE that carries them closes it
    assert not acks.open and not acks.waiting() and acks.left(opened) == 0
    assert acks.add(ack(b"c")) == OPENED  # the next success opens the next window


def test_a_full_batch_is_sent_at_once():
    acks = Acknowledger(window=60.0)
    signals = [acks.add(ack(b"%d" % i)) for i in range(ACK_BATCH)]
    assert signals[0] == OPENED and signals[-1] == FULL and set(signals[1:-1]) == {0}


def test_a_full_batch_is_signalled_once_until_a_send_takes_it():
    """The send a FULL starts takes what comes meanwhile: no send a success past the 64th."""
    acks = Acknowledger(window=60.0)
    signals = [acks.add(ack(b"%d" % i)) for i in range(3 * ACK_BATCH)]
    assert signals.count(FULL) == 1 and signals[ACK_BATCH - 1] == FULL
    assert len(acks.take()) == 3 * ACK_BATCH
    signals = [acks.add(ack(b"%d" % i)) for i in range(ACK_BATCH)]
    assert signals[0] == OPENED and signals[-1] == FULL  # the next batch is signalled again


def test_a_failed_send_keeps_the_successes_in_order_and_backs_off(caplog):
    acks = Acknowledger(window=0.0)
    for raw in (b"a", b"b"):
        acks.add(ack(raw))

    def refused(sent: list[object]) -> None:
        raise redis.ConnectionError("down")

    with caplog.at_level(logging.WARNING, logger="sidequest.worker.fetch.acknowledger"):
        with pytest.raises(redis.ConnectionError):
            acks.flush(refused)
        acks.add(ack(b"c"))
        first = acks.backoff(redis.ConnectionError("down"))
        second = acks.backoff(redis.ConnectionError("down"))
        sent: list[bytes] = []
        acks.flush(lambda taken: sent.extend(raw for raw, _, _ in taken))
        acks.succeeded()
    assert sent == [b"a", b"b", b"c"]  # kept, ahead of the later success, none sent twice
    assert second == 2 * first
    lines = [rec.getMessage() for rec in caplog.records]
    assert sum("acknowledging finished jobs failed" in line for line in lines) == 1
    assert sum("acknowledged again" in line for line in lines) == 1


def test_reserve_takes_jobs_and_removes_the_successes_it_carries(config, r, client):
    scripts = Scripts(r)
    ledger = BatchLedger()
    lane = direct_path_for(r)
    client.push_bulk(echo, [[1], [2], [3]])
    script_keys = ["queue:default", BATCH, keys.RESERVATIONS, BATCH]
    taken = ledger.send(lane, scripts.reserve, script_keys, 2, [])
    assert [key for key, _ in taken] == ["queue:default"] * 2 and r.llen(BATCH) == 2
    assert ledger.known == Counter(raw for _, raw in taken)
    assert ledger.send(lane, scripts.reserve, script_keys, 0, [ack(taken[0][1])]) == []
    assert r.lrange(BATCH, 0, -1) == [taken[1][1]] and ledger.known == Counter([taken[1][1]])
    assert reserve_args(1.5, 2, [ack(b"x")]) == [repr(1.5), 2, 1, b"x", 0]
    lane.close()


def test_a_queue_of_the_wrong_type_is_logged_once_and_the_others_are_taken(config, r, client, caplog):
    scripts = Scripts(r)
    ledger = BatchLedger()
    lane = direct_path_for(r)
    r.set("queue:broken", "not a list")
    client.push(echo, [1])
    script_keys = ["queue:broken", "queue:default", BATCH, keys.RESERVATIONS, BATCH]
    with caplog.at_level(logging.ERROR):
        assert len(ledger.send(lane, scripts.reserve, script_keys, 5, [])) == 1
        assert ledger.send(lane, scripts.reserve, script_keys, 5, []) == []
        wrong = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
        assert ledger.blocking_fault("queue:broken", wrong)  # a BLMOVE on it: the same fault, not logged again
        assert not ledger.blocking_fault("queue:broken", redis.ResponseError("OOM command not allowed"))
    assert sum("queue:broken" in m for m in caplog.messages) == 1  # once per queue and error
    lane.close()


def test_a_lost_reply_has_the_next_fetch_read_back_by_counting(config, r, client):
    """Two identical payloads are two jobs: the read-back adopts exactly the copies beyond what
    the process knew before reading, and a failed read is read again."""
    ledger = BatchLedger()
    raw = b'{"class":"Echo","jid":"same","queue":"default","args":[]}'
    r.lpush(BATCH, raw)
    ledger.count(raw)  # taken by a call whose reply came
    assert ledger.to_read_back() is None  # no reply lost: nothing to read
    ledger.failed(redis.ConnectionError("reply lost"))
    r.lpush(BATCH, raw, b"other")  # what the lost call moved
    known = ledger.to_read_back()
    assert known == Counter([raw]) and not ledger.suspect
    ledger.unread()  # the read itself failed: the next fetch reads again
    known = ledger.to_read_back()
    assert known is not None
    found = ledger.adopt([(BATCH, r.lrange(BATCH, 0, -1))], known)
    assert sorted(found) == sorted([(BATCH, raw), (BATCH, b"other")])
    assert ledger.known == Counter({raw: 2, b"other": 1})
    ledger.forget(raw)
    assert ledger.known == Counter({raw: 1, b"other": 1})
    assert ledger.adopt([(BATCH, r.lrange(BATCH, 0, -1))], Counter(ledger.known)) == [(BATCH, raw)]


def test_the_thread_driver_sends_a_window_in_one_call(config, r, client):
    scripts, ledger, lane = Scripts(r), BatchLedger(), direct_path_for(r)
    client.push_bulk(echo, [[1], [2], [3]])
    script_keys = ["queue:default", BATCH, keys.RESERVATIONS, BATCH]
    taken = ledger.send(lane, scripts.reserve, script_keys, 3, [])
    acks = Acknowledger(window=0.05)
    sends: list[int] = []

    def send(batch: list[tuple[bytes, list[object], str]]) -> None:
        sends.append(len(batch))
        ledger.send(lane, scripts.reserve, [BATCH, keys.RESERVATIONS, BATCH], 0, batch)

    driver = AckThread(acks, send, tend=lambda: None, end=lambda: None, holding=lambda: False, look_every=0.1)
    try:
        for _, raw in taken:
            acks.add(ack(raw))
        wait_until(lambda: r.llen(BATCH) == 0, 5, 0.005, "the window to be sent")
        assert sends == [3] and driver.is_alive()
    finally:
        driver.close()
        lane.close()
    assert not driver.is_alive()


def test_the_loop_driver_sends_a_window_in_one_call(config, r, client):
    scripts, ledger = Scripts(r), BatchLedger()
    client.push_bulk(echo, [[1], [2], [3]])
    script_keys = ["queue:default", BATCH, keys.RESERVATIONS, BATCH]
    sync = direct_path_for(r)
    taken = ledger.send(sync, scripts.reserve, script_keys, 3, [])
    sync.close()
    acks = Acknowledger(window=0.05)
    sends: list[int] = []

    async def scenario() -> None:
        lane = AsyncDirectPath(aio.connect(config.url))

        async def send(batch: list[tuple[bytes, list[object], str]]) -> None:
            sends.append(len(batch))
            await ledger.send_async(lane, scripts.reserve, [BATCH, keys.RESERVATIONS, BATCH], 0, batch)

        driver = AckTimers(acks, send, poke=lambda: None)
        driver.start()
        for _, raw in taken:
            acks.add(ack(raw))
        await wait_until_async(lambda: r.llen(BATCH) == 0, 5, 0.005, "the window's successes to be sent")
        await driver.settle()
        await lane.close()

    asyncio.run(scenario())
    assert r.llen(BATCH) == 0 and sends == [3]


def test_a_send_cancelled_on_the_loop_keeps_its_successes():
    """A stop that cancels the loop's send under way must not drop what it carried: those jobs
    would stay in the batch list until recovery ran them again."""
    acks = Acknowledger(window=60.0)

    async def scenario() -> list[bytes]:
        started = asyncio.Event()

        async def send(batch: list[tuple[bytes, list[object], str]]) -> None:
            started.set()
            await asyncio.sleep(60)  # a send still under way when the stop cancels it

        driver = AckTimers(acks, send, poke=lambda: None)
        driver.start()
        acks.add(ack(b"a"))
        flushing = asyncio.get_running_loop().create_task(driver.flush())
        await asyncio.wait_for(started.wait(), 5)
        flushing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flushing
        return [raw for raw, _, _ in acks.take()]

    assert asyncio.run(scenario()) == [b"a"]


def test_a_loop_timer_that_fires_before_the_window_ends_still_has_it_sent():
    """asyncio may run a timer a little early (within its clock resolution), and a timer of an
    older window may find a newer one open: neither may leave the window open with no timer,
    where the successes would wait for the next job's fetch."""
    acks = Acknowledger(window=0.05)
    sent: list[int] = []

    async def scenario() -> None:
        async def send(batch: list[tuple[bytes, list[object], str]]) -> None:
            sent.append(len(batch))

        driver = AckTimers(acks, send, poke=lambda: None)
        acks.add(ack(b"a"))  # (before the driver's loop is known: no timer of its own)
        driver.start()
        driver._window_ended()  # as the window's one timer, fired early: nothing yet
        await asyncio.sleep(0)  # one pass of the loop: a send begun by that early timer would have run
        assert sent == [] and acks.open
        await wait_until_async(lambda: sent, 5, 0.01, "the window to be sent by a timer")
        await driver.settle()

    asyncio.run(scenario())
    assert sent == [1] and not acks.waiting()

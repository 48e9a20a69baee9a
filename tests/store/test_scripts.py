"""The core's scripts (`store/scripts.py`) against a real Redis: what a call sent again finds.

Their cost per queue length is measured by `bench/scripts.py` (flat from 10,000 to 1,000,000 queued);
here the one look that could have scanned a queue is pinned to its bound, by what it answers.
"""

from __future__ import annotations

import pytest
from jobs_for_tests import echo

from sidequest.store import keys
from sidequest.store.scripts import PUT_BACK_DEPTH, Scripts
from sidequest.worker.fetch.fetchers import ReliableFetch, UnitOfWork
from sidequest.worker.outcome import Outcome

IDENTITY = "host:1:abc"
QUEUE = keys.queue("default")


@pytest.fixture
def held(config, r, client) -> tuple[ReliableFetch, UnitOfWork]:
    """A job held by a processor, with 10,000 jobs pushed behind it."""
    fetch = ReliableFetch(config, r, IDENTITY, Scripts(r), slot=0)
    client.push(echo, ["held"])
    unit = fetch.retrieve_work()
    assert unit is not None and r.llen(fetch.reserved) == 1
    r.lpush(QUEUE, *(f'{{"class":"Other","args":[{i}],"jid":"{i:024x}"}}' for i in range(10_000)))
    return fetch, unit


def test_a_put_back_sent_again_after_its_reply_was_lost_reads_written_and_writes_once(r, held):
    fetch, unit = held
    assert fetch.settler.settle(unit, Outcome.put_back(), [0]) is True
    r.rpush(QUEUE, b'{"class":"Other","args":["put back by another processor"],"jid":"f"}')
    assert fetch.settler.settle(unit, Outcome.put_back(), [0]) is True  # the resend: written already
    assert r.llen(QUEUE) == 10_002 and r.lrange(QUEUE, 0, -1).count(unit.raw) == 1
    assert r.lindex(QUEUE, -2) == unit.raw and r.llen(fetch.reserved) == 0


def test_a_resent_put_back_looks_for_its_first_write_only_near_the_head(r, held):
    """Past PUT_BACK_DEPTH later put-backs it is not looked for (a queue of a million jobs is not
    scanned): the resend answers "not written" and still writes nothing."""
    fetch, unit = held
    assert fetch.settler.settle(unit, Outcome.put_back(), [0]) is True
    r.rpush(QUEUE, *(f'{{"class":"Other","args":["ahead {i}"],"jid":"a{i}"}}' for i in range(PUT_BACK_DEPTH)))
    assert fetch.settler.settle(unit, Outcome.put_back(), [0]) is False
    assert r.llen(QUEUE) == 10_001 + PUT_BACK_DEPTH and r.lrange(QUEUE, 0, -1).count(unit.raw) == 1

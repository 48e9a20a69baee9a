"""One search on a real 3-primary Redis Cluster (tests/topology.py): queues spread over the
primaries, each with its own `schedule:{q}`, `retry:{q}`, `dead:{q}` and lanes; a search reads
each queue's keys on the primary that holds them, pages by cursor across them, and its bulk
retry moves each match within its queue's slot (no CROSSSLOT error on any primary)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from conftest import redis_server_binary
from topology import ClusterSet, crossslot_free_client

from sidequest import Client
from sidequest.api import Queue, RetrySet, Search, pause_group

QUEUES = [f"q{i}" for i in range(12)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterSet]:
    with ClusterSet(redis_server_binary()) as c:
        yield c


@pytest.fixture
def client(cluster: ClusterSet) -> Iterator[Client]:
    yield from crossslot_free_client(cluster)


def test_a_search_reads_every_queues_keys_on_its_primary(client):
    wanted: dict[str, set[str]] = {"queue": set(), "lane": set(), "scheduled": set(), "retry": set()}
    for i, name in enumerate(QUEUES):
        wanted["queue"].add(client.push("Echo", ["customer-42", i], queue=name) or "")
        client.push("Echo", ["customer-7", i], queue=name)
        wanted["scheduled"].add(client.push("Echo", ["customer-42", i], queue=name, in_=600) or "")
        jid = f"{i:024x}"
        client.redis.zadd(client.keys.retry(name), {json.dumps({
            "class": "Echo", "args": ["customer-42", i], "queue": name, "jid": jid, "retry": True, "retry_count": 1,
            "error_class": "ValueError", "error_message": "bad"}, separators=(",", ":")): 2.0e9})
        wanted["retry"].add(jid)
    pause_group("q3", "tenant", client)
    wanted["lane"].add(client.push("Echo", ["customer-42", "laned"], queue="q3", group="tenant") or "")

    search = Search(name="Echo", args="customer-42", client=client)
    expected = {(where, jid) for where, jids in wanted.items() for jid in jids}
    assert {(h.where, h.record.jid) for h in search} == expected
    paged, cursor = set(), None
    while True:
        page = search.page(cursor, limit=5)
        paged |= {(h.where, h.record.jid) for h in page.hits}
        if page.cursor is None:
            break
        cursor = page.cursor
    assert paged == expected

    assert search.retry_all() == 2 * len(QUEUES)  # retries and scheduled, each back to its own queue
    assert RetrySet(client).size == 0
    assert all(Queue(name, client).size == 4 for name in QUEUES)

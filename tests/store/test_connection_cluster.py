"""Redis Cluster URLs: parsing, the client `connect` builds, and how it follows redirects and
failovers without re-sending a command.

The cluster is real (tests/topology.py): three primaries and a replica of each on loopback
ports, one for the module. Each test uses keys of its own, and a test that changes the
topology leaves every slot served and every replica in sync again.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from conftest import STARTUP, redis_server_binary, wait_until
from redis.crc import key_slot
from topology import ClusterSet

from sidequest.client import async_client as aio
from sidequest.client.async_client import AsyncClient
from sidequest.config import Config
from sidequest.errors import RedisUnavailableError, RedisURLError
from sidequest.store.connection import connect, connect_cluster, is_cluster, mask_url
from sidequest.store.urls import parse_cluster_url

# what a call may raise while a shard has no primary; the next call after it asks again
DURING_FAILOVER = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError,
                   redis.exceptions.RedisClusterException)


@pytest.fixture(scope="module")
def cluster():
    with ClusterSet(redis_server_binary()) as topology:
        yield topology


def keys_on_every_primary(cluster: ClusterSet, prefix: str) -> dict[int, str]:
    """primary port -> a key (`prefix:n`) whose slot it owns."""
    found: dict[int, str] = {}
    for n in range(1000):
        found.setdefault(cluster.node_of(f"{prefix}:{n}"), f"{prefix}:{n}")
        if len(found) == len(cluster.primaries()):
            return found
    raise AssertionError("keys did not spread over every primary")


def errors_counted(port: int, kind: str) -> int:
    """How many `kind` (MOVED, ASK) errors the node on `port` has answered."""
    with redis.Redis("127.0.0.1", port) as node:
        return int(node.info("errorstats").get(f"errorstat_{kind}", {}).get("count", 0))


# -- the URL -------------------------------------------------------------------------------------

def test_a_cluster_url_names_its_nodes_and_credentials():
    url = parse_cluster_url("redis+cluster://app:s%40cret@n1:7000,n2,[::1]:7002/0")
    assert url.nodes == (("n1", 7000), ("n2", 6379), ("::1", 7002))
    assert (url.username, url.password, url.tls) == ("app", "s@cret", False)
    tls = parse_cluster_url("rediss+cluster://:pw@n1:7000")
    assert (tls.nodes, tls.username, tls.password, tls.tls) == ((("n1", 7000),), None, "pw", True)
    assert mask_url("redis+cluster://app:secret@n1:7000,n2:7001/0") == "redis+cluster://app:****@n1:7000,n2:7001/0"
    assert mask_url("rediss+cluster://:secret@n1:7000") == "rediss+cluster://:****@n1:7000"


def test_a_cluster_url_with_a_database_other_than_0_is_refused_in_one_line_naming_the_fix():
    with pytest.raises(RedisURLError) as caught:
        connect("redis+cluster://:secret@127.0.0.1:7000/1")
    message = str(caught.value)
    assert "only database 0" in message and "remove /1" in message
    assert "secret" not in message and "\n" not in message


@pytest.mark.parametrize(("url", "says"), [
    ("redis+cluster://n1:7000/abc", "is not a database"),
    ("redis+cluster://n1:port", "not a node's host:port"),
    ("redis+cluster://n1:7000,,n2:7001", "not a node's host:port"),
    ("redis+cluster://n1:7000?read_from_replicas=1", "unknown option 'read_from_replicas'"),
])
def test_a_malformed_cluster_url_is_one_line_naming_the_fault_and_the_form(url, says):
    with pytest.raises(RedisURLError) as caught:
        connect(url)
    message = str(caught.value)
    assert says in message and "redis+cluster://" in message and "\n" not in message


def test_an_unreachable_cluster_is_one_line_naming_the_masked_url():
    for check in (True, False):  # the client reads the slot map as it is built
        with pytest.raises(RedisUnavailableError) as caught:
            connect("redis+cluster://:secret@127.0.0.1:1,127.0.0.1:2", check=check)
        message = str(caught.value)
        assert message.startswith("cannot reach Redis at redis+cluster://:****@127.0.0.1:1,127.0.0.1:2: ")
        assert "\n" not in message


def test_a_cluster_url_naming_a_server_not_in_cluster_mode_says_so(redis_server):
    with pytest.raises(RedisURLError, match="not in cluster mode; use redis://"):
        connect(f"redis+cluster://127.0.0.1:{redis_server.port}")


# -- the client ------------------------------------------------------------------------------------

def test_connect_gives_a_cluster_client_whose_keys_land_on_every_primary(cluster):
    client = connect(cluster.url())
    assert is_cluster(client) and not is_cluster(redis.Redis())
    keys = [f"spread:{n}" for n in range(60)]
    for key in keys:
        client.set(key, key)
    assert {cluster.node_of(key) for key in keys} == {port for _, port in cluster.primaries()}
    assert [client.get(key) for key in keys] == [key.encode() for key in keys]
    for port, key in keys_on_every_primary(cluster, "spread").items():
        with redis.Redis("127.0.0.1", port) as owner:
            assert owner.get(key) == key.encode()  # stored where the cluster says, not merely readable


def test_a_key_asked_of_a_node_that_does_not_own_it_is_read_through_the_moved_redirect(cluster):
    owner = cluster.node_of("moved:key")
    other = next(port for _, port in cluster.primaries() if port != owner)
    connect(cluster.url()).set("moved:key", "here")
    client = connect_cluster(f"redis+cluster://127.0.0.1:{other}")  # the only node it was told of
    assert client.get("moved:key") == b"here"
    before = errors_counted(other, "MOVED")  # sent to `other` on purpose, it answers MOVED
    assert client.execute_command("GET", "moved:key", target_nodes=client.get_node("127.0.0.1", other)) == b"here"
    assert errors_counted(other, "MOVED") == before + 1


def test_a_key_of_a_slot_being_migrated_is_reached_through_the_ask_redirect(cluster):
    key = "{ask}:key"
    slot = key_slot(key.encode())
    source = cluster.node_of(key)
    target = next(port for _, port in cluster.primaries() if port != source)
    ids = {entry.port: entry.id for entry in cluster.view()}
    client = connect(cluster.url())
    with redis.Redis("127.0.0.1", source) as src, redis.Redis("127.0.0.1", target) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
        try:
            before = errors_counted(source, "ASK")
            client.set(key, "moved on")  # not on the source, so the source answers ASK
            assert client.get(key) == b"moved on"
            assert errors_counted(source, "ASK") == before + 2
            in_slot = [n.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) for n in (src, dst)]
            assert in_slot == [0, 1]  # written on the target
        finally:
            client.delete(key)
            for node in (src, dst):
                node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


def test_a_command_whose_connection_is_lost_is_not_sent_again(cluster):
    """redis-py's default would re-send the BLMOVE (and move a job it never reported)."""
    client = connect(cluster.url())
    source, dest = "{resend}:pending", "{resend}:reserved"
    owner = redis.Redis("127.0.0.1", cluster.node_of(source))

    def cut() -> None:
        wait_until(lambda: "cmd=blmove" in owner.execute_command("CLIENT", "LIST").decode(), STARTUP, 0.01,
                   "the BLMOVE to block")
        owner.client_kill_filter(_type="normal")  # every client but this one
    cutter = threading.Thread(target=cut)
    cutter.start()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.blmove(source, dest, 10)
    cutter.join()
    assert time.monotonic() - started < 10  # a re-sent BLMOVE would have waited out its timeout
    assert "cmd=blmove" not in owner.execute_command("CLIENT", "LIST").decode()
    client.lpush(source, "job")  # the next call goes through
    assert (client.lrange(source, 0, -1), client.lrange(dest, 0, -1)) == ([b"job"], [])
    owner.close()


def test_the_asyncio_client_of_a_cluster_url_reaches_every_primary(cluster):
    keys = keys_on_every_primary(cluster, "aio")

    async def write_and_read() -> list[bytes | None]:
        client = aio.connect(cluster.url())
        try:
            for key in keys.values():
                await client.set(key, key)
            return [await client.get(key) for key in keys.values()]
        finally:
            await client.aclose()
    assert asyncio.run(write_and_read()) == [key.encode() for key in keys.values()]


def test_the_asyncio_client_of_an_unreachable_cluster_is_one_line():
    async def connection() -> None:
        await AsyncClient(Config(redis_url="redis+cluster://:secret@127.0.0.1:1")).connection()
    with pytest.raises(RedisUnavailableError, match=r"^cannot reach Redis at redis\+cluster://:\*\*\*\*@127.0.0.1:1: "):
        asyncio.run(connection())


# -- failover --------------------------------------------------------------------------------------

def test_after_a_manual_failover_the_same_client_reads_and_writes_that_shard(cluster):
    client = connect(cluster.url())
    key = "manual:key"
    client.set(key, "before")
    old = cluster.node_of(key)
    new = cluster.manual_failover(old)
    assert cluster.node_of(key) == new
    # the old primary is up and answers MOVED: the client follows it within the call
    assert client.get(key) == b"before"
    client.set(key, "after")
    with redis.Redis("127.0.0.1", new) as primary:
        assert primary.get(key) == b"after"


def test_after_a_sigkill_of_a_primary_the_same_client_reaches_its_replica(cluster):
    client = connect(cluster.url())
    key = "killed:key"
    old = cluster.node_of(key)
    with redis.Redis("127.0.0.1", old) as primary:
        primary.set(key, "before")
        assert primary.wait(1, 5000) == 1  # on the replica too, so the failover keeps it
    others = {port: k for port, k in keys_on_every_primary(cluster, "killed").items() if port != old}
    cluster.kill_primary(old)
    try:
        new = cluster.wait_promoted(old)

        def answer(call):  # a failed call raised, and nothing was re-sent; the next call asks again
            try:
                return [call()]
            except DURING_FAILOVER:
                return None
        assert wait_until(lambda: answer(lambda: client.get(key)), STARTUP, 0.05, "a read on the new primary") == \
            [b"before"]
        assert wait_until(lambda: answer(lambda: client.set(key, "after")), STARTUP, 0.05, "a write") == [True]
        with redis.Redis("127.0.0.1", new) as primary:
            assert primary.get(key) == b"after"
        for other in others.values():  # the shards that kept their primary work as before
            assert client.set(other, "x") and client.get(other) == b"x"
    finally:
        cluster.restart(old)

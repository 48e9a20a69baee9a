"""`api.cluster` reads CLUSTER SHARDS in every shape it reaches it: the server's own reply over
RESP2 and RESP3, with bytes or str keys, and what each redis-py's parser makes of it (up to 7 the
reply's flat slot list, from 8 (first, last) tuples: `sidequest stats` on a Cluster crashed with
redis-py 8). Each reply comes from a real one-node cluster serving two slot ranges."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from conftest import redis_server_binary
from topology import ClusterMember

from sidequest.api.cluster import Shard, _from_shards

RANGES = [(0, 99), (200, 16383)]  # 100-199 left unserved: two ranges, in the reply as four numbers


@pytest.fixture(scope="module")
def node() -> Iterator[ClusterMember]:
    member = ClusterMember(redis_server_binary())
    try:
        with member.client() as c:
            try:
                c.execute_command("CLUSTER", "SHARDS")
            except redis.ResponseError:
                pytest.skip("this redis-server has no CLUSTER SHARDS (Redis 7+): api.cluster reads CLUSTER SLOTS")
            c.config_set("cluster-announce-ip", "127.0.0.1")  # a node alone has met no peer to learn its address from
            for first, last in RANGES:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        yield member
    finally:
        member.kill()


def reply(node: ClusterMember, protocol: int, decode: bool) -> list[Any]:
    """CLUSTER SHARDS as the server sent it, before any redis-py callback."""
    client = redis.Redis(port=node.port, protocol=protocol, decode_responses=decode)
    try:
        connection = client.connection_pool.get_connection()
        try:
            connection.send_command("CLUSTER", "SHARDS")
            answer: list[Any] = connection.read_response()
            return answer
        finally:
            client.connection_pool.release(connection)
    finally:
        client.close()


def expected(node: ClusterMember) -> list[Shard]:
    return [Shard(f"127.0.0.1:{node.port}", RANGES, [])]


@pytest.mark.parametrize(("protocol", "decode"), [(2, False), (2, True), (3, False), (3, True)],
                         ids=["resp2-bytes", "resp2-str", "resp3-bytes", "resp3-str"])
def test_the_servers_own_reply(node, protocol, decode):
    raw = reply(node, protocol, decode)
    assert _from_shards(raw) == expected(node)


PARSERS = [name for name in ("parse_cluster_shards", "parse_cluster_shards_with_str_keys",
                             "parse_cluster_shards_unified") if hasattr(redis.cluster, name)]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("protocol", [2, 3])
def test_what_redis_py_parses_it_into(node, parser, protocol):
    parse: Callable[..., list[Any]] = getattr(redis.cluster, parser)
    parsed = parse(reply(node, protocol, False))
    if redis.__version__.startswith("8.") and protocol == 2:
        assert isinstance(parsed[0]["slots"][0], tuple)  # the shape that crashed `int()`
    assert _from_shards(parsed) == expected(node)


def test_what_the_cluster_client_returns(node):
    """`Cluster._shards` asks through redis-py's RedisCluster, with its callbacks."""
    client = redis.RedisCluster(host="127.0.0.1", port=node.port, require_full_coverage=False)
    try:
        assert _from_shards(client.execute_command("CLUSTER SHARDS")) == expected(node)
    finally:
        client.close()

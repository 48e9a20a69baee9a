"""A Redis Cluster as an operator sees it: each primary, its replicas and slots, what it holds,
and which primary holds which queue (Cluster mode only; see `keys.ClusterKeyspace`).

    cluster = Cluster()                  # raises ValueError on a single Redis or Sentinel
    for shard in cluster.shards:
        shard.primary, shard.replicas, shard.slots, shard.keys, shard.memory_human, shard.queues
    cluster.queues                       # {"mail": "10.0.0.2:6379", ...}
    cluster.node_of("mail")              # "10.0.0.2:6379"

The map comes from CLUSTER SHARDS (Redis and Valkey 7+; it also lists a replica still loading,
which CLUSTER SLOTS leaves out), or CLUSTER SLOTS on Redis 6.2, asked of one node; a queue's
primary is the one serving the slot of its keys' hash tag. Keys and memory are DBSIZE and INFO
memory of each primary, one round trip each (`usage=False` skips them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys


class ShardDict(TypedDict):
    """A shard as plain JSON (`Shard.as_dict()`)."""

    primary: str
    """`host:port` of the primary."""
    replicas: list[str]
    """`host:port` of each replica, with its state in brackets when it is not online."""
    slots: int
    """How many of the 16384 hash slots the primary serves."""
    ranges: list[list[int]]
    """Those slots, as [first, last] ranges."""
    keys: int | None
    """Keys the primary holds (DBSIZE); None when not read."""
    memory: int | None
    """Bytes of memory the primary uses (INFO's used_memory); None when not read."""
    queues: list[str]
    """The queues whose keys live on this primary, by name."""


@dataclass
class Shard:
    """One primary of the cluster, its replicas, and what it holds."""

    primary: str  # host:port
    ranges: list[tuple[int, int]]  # the hash slots it serves
    replicas: list[str] = field(default_factory=list)  # host:port, with " (state)" when not online
    keys: int | None = None  # DBSIZE
    memory: int | None = None  # used_memory, bytes
    memory_human: str | None = None  # used_memory_human
    queues: list[str] = field(default_factory=list)

    @property
    def slots(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges)

    def serves(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.ranges)

    def as_dict(self) -> ShardDict:
        return {"primary": self.primary, "replicas": self.replicas, "slots": self.slots,
                "ranges": [[first, last] for first, last in self.ranges], "keys": self.keys,
                "memory": self.memory, "queues": self.queues}


class Cluster:
    """A snapshot of the cluster's primaries and of where each queue lives (see module)."""

    def __init__(self, client: Client | None = None, *, usage: bool = True) -> None:
        self.client = client or default_client()
        if not self.client.keys.cluster:
            raise ValueError("this client's Redis is not a Redis Cluster (use a redis+cluster:// URL)")
        self.redis: Any = self.client.redis  # a redis.cluster.RedisCluster
        self.shards = sorted(self._shards(), key=lambda shard: shard.ranges[0] if shard.ranges else (0, 0))
        names = sorted(n.decode("utf-8", "replace") for n in cast("set[bytes]", self.redis.smembers(keys.QUEUES)))
        self.queues: dict[str, str] = {}
        for name in names:
            shard = self._shard_of(name)
            if shard is not None:
                self.queues[name] = shard.primary
                shard.queues.append(name)
        if usage:
            for shard in self.shards:
                self._read_usage(shard)

    def node_of(self, queue: str) -> str | None:
        """`host:port` of the primary holding `queue`'s keys (listed in `queues` or not)."""
        if queue in self.queues:
            return self.queues[queue]
        shard = self._shard_of(queue)
        return shard.primary if shard is not None else None

    @property
    def replicas(self) -> int:
        return sum(len(shard.replicas) for shard in self.shards)

    def _shard_of(self, queue: str) -> Shard | None:
        slot = int(self.redis.keyslot(self.client.keys.queue(queue)))
        return next((shard for shard in self.shards if shard.serves(slot)), None)

    def _shards(self) -> list[Shard]:
        try:
            described = self.redis.execute_command("CLUSTER SHARDS")
        except redis.ResponseError:  # Redis 6.2: no CLUSTER SHARDS
            return _from_slots(self.redis.cluster_slots())
        return _from_shards(described)

    def _read_usage(self, shard: Shard) -> None:
        host, _, port = shard.primary.rpartition(":")
        node = self.redis.get_node(host=host, port=int(port))
        if node is None:  # not in this client's map yet: shown without its numbers
            return
        pipe = self.redis.get_redis_connection(node).pipeline(transaction=False)
        pipe.dbsize()
        pipe.info("memory")
        size, memory = pipe.execute()
        shard.keys = int(size)
        shard.memory = int(memory.get("used_memory", 0))
        shard.memory_human = str(memory.get("used_memory_human", "?"))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _from_shards(described: list[Any]) -> list[Shard]:
    """Shards from CLUSTER SHARDS: per shard its slot ranges and its nodes, each a map. As the
    server sends it (RESP2: maps as flat lists; RESP3: maps) or as redis-py parsed it (up to 7:
    the reply's flat slot list; from 8: (first, last) pairs), with bytes or str keys."""
    shards: list[Shard] = []
    for raw in described:
        entry = {_text(k): v for k, v in (raw.items() if isinstance(raw, dict) else _pairs(raw))}
        ranges = _ranges(entry.get("slots") or [])
        primary: str | None = None
        replicas: list[str] = []
        for node in entry.get("nodes", []):
            facts = {_text(k): v for k, v in (node.items() if isinstance(node, dict) else _pairs(node))}
            host = _text(facts.get("endpoint") or "") or _text(facts.get("ip") or "")
            if host in ("", "?"):
                host = _text(facts.get("ip") or "?")
            address = f"{host}:{facts.get('port') or facts.get('tls-port')}"
            health = _text(facts.get("health", "online"))
            if _text(facts.get("role")) == "master" and ranges:
                primary = address
            elif _text(facts.get("role")) != "master":
                replicas.append(address if health == "online" else f"{address} ({health})")
        if primary is not None:
            shards.append(Shard(primary, ranges, replicas))
    return shards


def _ranges(slots: list[Any]) -> list[tuple[int, int]]:
    """[(first, last), ...] of a shard's `slots`: flat `[first, last, first, last...]` (the
    reply; numbers, or their text) or already paired (redis-py 8's tuples)."""
    if all(isinstance(item, list | tuple) for item in slots):
        return [(int(first), int(last)) for first, last in slots]
    flat = [int(n) for n in slots]
    return list(zip(flat[::2], flat[1::2], strict=True))


def _pairs(flat: list[Any]) -> list[tuple[Any, Any]]:
    """A RESP2 map sent as a flat list: [k1, v1, k2, v2, ...]."""
    return list(zip(flat[::2], flat[1::2], strict=True))


def _from_slots(slots: dict[tuple[int, int], dict[str, Any]]) -> list[Shard]:
    """Shards from redis-py's parsed CLUSTER SLOTS: {(first, last): {"primary": (host, port), "replicas": [...]}}."""
    by_primary: dict[str, Shard] = {}
    for (first, last), entry in sorted(slots.items()):
        host, port = entry["primary"]
        address = f"{_text(host)}:{port}"
        shard = by_primary.setdefault(address, Shard(address, []))
        shard.ranges.append((int(first), int(last)))
        for replica_host, replica_port in entry.get("replicas", []):
            replica = f"{_text(replica_host)}:{replica_port}"
            if replica not in shard.replicas:
                shard.replicas.append(replica)
    return list(by_primary.values())

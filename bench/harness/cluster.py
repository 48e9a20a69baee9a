"""The Redis Cluster of the rows that run in sidequest's Cluster mode (`Row.cluster`): three
primaries started for the run, and the harness's own Redis work over them (`ClusterCounted`,
harness/redisops.py's `Counted` node by node).

The cluster has no replicas, on purpose: the single redis-server of the other rows has none, and
on a 2-core machine a replica per primary would replay every write on the same two cores as the
worker, a cost of the set-up rather than of Cluster mode (tests/topology.py's ClusterSet, with
replicas, is for failover: bench/failover.py). Its slots are split in three even ranges, as
`redis-cli --cluster create` splits them, so the sidequest peer can name queues that land two on
each primary (bench/peers/sidequest_peer.py, BENCH_QUEUES). Three primaries on 2 cores show the
per-job cost of Cluster mode and that it runs, not how it scales."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from sidequest.store.dev_server import server_binary
from sidequest.store.keys import CLUSTER

from .peers import PhaseError
from .redisops import ASIDE, Counted

SLOTS = 16384
SHARDS = 3
START_TIMEOUT = 30.0


def slot_ranges(shards: int = SHARDS) -> list[tuple[int, int]]:
    """(first, last) slot of each primary: 0-5460, 5461-10922, 10923-16383 for three."""
    bounds = [round(i * SLOTS / shards) for i in range(shards + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(shards)]


def cluster_port(taken: set[int]) -> int:
    """A free port, not in `taken`, whose cluster bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in taken or port + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            pass


class PrivateCluster:
    """Three `redis-server --cluster-enabled yes` on free loopback ports, persistence off, each
    serving a third of the slots, joined by CLUSTER MEET; stopped on exit."""

    def __enter__(self) -> PrivateCluster:
        self.dir = tempfile.mkdtemp(prefix="sq-bench-cluster-")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        try:
            for _ in range(SHARDS):
                port = cluster_port(set(self.ports))
                self.ports.append(port)
                self.procs.append(subprocess.Popen(
                    [server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--dir", self.dir, "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.form()
        except BaseException:
            self.__exit__()
            raise
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return self

    def form(self) -> None:
        """Slots to each node, every node met, then wait until all of them say the cluster is ok."""
        deadline = time.monotonic() + START_TIMEOUT
        nodes = [redis.Redis("127.0.0.1", port, socket_timeout=5) for port in self.ports]
        for node in nodes:
            self._wait(deadline, node.ping, "a cluster node to start")
        for node, (first, last) in zip(nodes, slot_ranges(), strict=True):
            node.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))  # ADDSLOTSRANGE is Redis 7's
        for port in self.ports[1:]:
            nodes[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)

        def ok() -> bool:
            infos = [node.execute_command("CLUSTER", "INFO") for node in nodes]
            texts = [info.decode() if isinstance(info, bytes) else str(info) for info in infos]
            return all("cluster_state:ok" in t and f"cluster_known_nodes:{SHARDS}" in t for t in texts)
        self._wait(deadline, ok, "the cluster nodes to agree (cluster_state:ok)")
        for node in nodes:
            node.close()

    @staticmethod
    def _wait(deadline: float, check: Any, what: str) -> None:
        while True:
            try:
                if check():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(proc.pid for proc in self.procs)

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class ClusterCounted(Counted):
    """`Counted` over the cluster: commands go through a cluster client (to the node of their
    key); the node-wide ones (CONFIG RESETSTAT, INFO, KEYS) go to every primary, and a command
    is counted once per node it ran on, as the sum of the nodes' INFO commandstats counts it.

    A staged key keeps its hash tag aside (`queue:{q}` -> `bench:aside:queue:{q}`: RENAME stays
    in one slot), and the keys come back node by node without MULTI (a transaction cannot span
    slots): every job appears within one round trip per primary."""

    keys = CLUSTER

    def __init__(self, url: str, pids: tuple[int, ...]) -> None:
        host, _, port = url.partition("://")[2].split(",")[0].rpartition(":")
        self.r = RedisCluster(startup_nodes=[ClusterNode(host, int(port))])  # type: ignore[assignment]
        self.r.ping()
        self.pids = pids
        self.calls: Counter[str] = Counter()

    @property
    def cluster(self) -> RedisCluster:
        return self.r  # type: ignore[return-value]

    def primaries(self) -> dict[str, redis.Redis]:
        """A client of each primary, by its name (host:port)."""
        return {node.name: self.cluster.get_redis_connection(node) for node in self.cluster.get_primaries()}

    def by_node(self, keys: list[str]) -> dict[str, list[str]]:
        """The keys grouped by the name of the primary that holds their slot."""
        found: dict[str, list[str]] = {}
        for key in keys:
            found.setdefault(self.cluster.get_node_from_key(key).name, []).append(key)
        return found

    def reset_stats(self) -> None:
        self.calls.clear()
        for node in self.primaries().values():
            node.config_resetstat()
            self.calls["config|resetstat"] += 1  # counted by each node after its reset

    def aside(self, keys: list[str]) -> list[str]:
        present = [key for key in keys if self.r.exists(key)]
        if not present:
            raise PhaseError(f"none of the staged keys {keys} exists after the enqueue")
        for key in present:
            self.r.rename(key, ASIDE + key)
        return present

    def back(self, keys: list[str]) -> None:
        nodes = self.primaries()
        for name, held in self.by_node([ASIDE + key for key in keys]).items():
            pipe = nodes[name].pipeline(transaction=False)
            for aside in held:
                pipe.rename(aside, aside.removeprefix(ASIDE))
            pipe.execute()
        self.calls["rename"] += len(keys)

    def wait_sidequest_acked(self, queues: list[str], timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        held = self.by_node(queues)
        pattern = self.keys.reserved("*", "*", "*")
        while True:
            waiting, reserved = 0, []
            for name, node in self.primaries().items():
                mine = held.get(name, [])
                pipe = node.pipeline(transaction=False)
                for key in mine:
                    pipe.llen(key)
                pipe.keys(pattern)
                *lengths, found = pipe.execute()
                waiting += sum(lengths)
                reserved += found
                self.calls.update({"llen": len(mine), "keys": 1})
            if not waiting and not reserved:
                return time.time()
            if time.monotonic() > deadline:
                raise PhaseError(f"jobs still unacknowledged after {timeout:.0f} s: {reserved}")
            time.sleep(0.001)

    def commandstats(self) -> dict[str, int]:
        calls: Counter[str] = Counter()
        for node in self.primaries().values():
            for name, value in node.info("commandstats").items():
                calls[name.removeprefix("cmdstat_")] += int(value["calls"])
        calls.subtract(self.calls)
        return {name: count for name, count in calls.most_common() if count}

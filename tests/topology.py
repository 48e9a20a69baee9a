"""Real Redis topologies on loopback ports, each part a process of the test's own, stopped by
pid: for the Sentinel tests a primary, a replica and three Sentinels (`redis-server --sentinel`);
for the Cluster tests three primaries and a replica of each, joined by `redis-cli --cluster create`.

    with SentinelSet(redis_server_binary()) as s:
        url = s.url()                  # redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,.../mymaster/0
        s.kill_primary()               # SIGKILL; the Sentinels promote the replica
        s.wait_promoted()              # the replica is the primary the Sentinels name
        s.rejoin_old_primary()         # restarted, it replicates from the new primary

Failure is detected after `DOWN_AFTER_MS` and a failover is under way about a second later, so a
test sees a new primary within a few seconds of the kill.

    with ClusterSet(redis_server_binary()) as c:   # skips without redis-cli or cluster support
        url = c.url()                  # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
        port = c.node_of("queue:default")   # the primary that owns the key's slot
        c.manual_failover(port)        # its replica takes over, the old primary follows it
        c.kill_primary(port)           # SIGKILL ...
        c.wait_promoted(port)          # ... and its replica is voted primary (`NODE_TIMEOUT_MS`)
        c.restart(port)                # it comes back as a replica of the new primary

Every change waits until the nodes agree again: each reachable node reports cluster_state:ok,
the same primary for every one of the 16384 slots, and each replica in sync.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import STARTUP, RedisServer, free_port, wait_until
from redis.crc import key_slot

SERVICE = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


class Sentinel:
    """One `redis-server --sentinel` watching SERVICE."""

    def __init__(self, binary: str, primary_port: int, quorum: int) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sq-sentinel-"))
        conf = self.dir / "sentinel.conf"  # a Sentinel rewrites its file as it learns the set
        conf.write_text("\n".join([
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.dir}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
            "",
        ]))
        self.proc = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            wait_until(self._ready, STARTUP, 0.05, f"Sentinel on port {self.port}")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, socket_timeout=2)

    def primary(self) -> tuple[str, int] | None:
        """The primary this Sentinel names now (None when it cannot be asked)."""
        try:
            with self.client() as c:
                found = c.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
        except (redis.RedisError, OSError):
            return None
        return (found[0].decode(), int(found[1])) if found else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelSet:
    """A primary, one replica and three Sentinels (quorum 2), on loopback ports."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.started: list[RedisServer | Sentinel] = []
        self.primary = self._server([])
        self.replica = self._server(["--replicaof", "127.0.0.1", str(self.primary.port)])
        wait_until(self._replica_in_sync, STARTUP, 0.05, "the replica to sync with the primary")
        self.sentinels = []
        for _ in range(3):
            sentinel = Sentinel(binary, self.primary.port, quorum=2)
            self.started.append(sentinel)
            self.sentinels.append(sentinel)
        wait_until(self._sentinels_see_all, STARTUP, 0.1, "the Sentinels to find each other and the replica")

    def _server(self, extra: list[str]) -> RedisServer:
        # a replica that must sync in full (the old primary, restarted empty) starts at once,
        # not after the 5 s Redis 7 waits by default for more replicas to share one transfer
        server = RedisServer(self.binary, ["--repl-diskless-sync-delay", "0", *extra])
        self.started.append(server)
        return server

    def _replica_in_sync(self) -> bool:
        with redis.Redis("127.0.0.1", self.replica.port) as c:
            return c.info("replication").get("master_link_status") == "up"

    def _sentinels_see_all(self) -> bool:
        for sentinel in self.sentinels:
            try:
                with sentinel.client() as c:
                    state = c.sentinel_master(SERVICE)
            except (redis.RedisError, OSError):
                return False
            if int(state.get("num-other-sentinels", 0)) < 2 or int(state.get("num-slaves", 0)) < 1:
                return False
        return True

    def url(self, db: int = 0, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"{scheme}://{hosts}/{SERVICE}/{db}"

    def direct_url(self, db: int = 0) -> str:
        """The primary as the Sentinels name it now, by its plain address."""
        host, port = self.named_primary()
        return f"redis://{host}:{port}/{db}"

    def named_primary(self) -> tuple[str, int]:
        return wait_until(lambda: self.sentinels[0].primary(), STARTUP, 0.05, "a Sentinel to name the primary")

    def kill_primary(self) -> None:
        self.primary.proc.kill()
        self.primary.proc.wait()

    def wait_promoted(self, timeout: float = STARTUP) -> None:
        """Every Sentinel names the replica, and the replica takes writes."""
        want = ("127.0.0.1", self.replica.port)

        def promoted() -> bool:
            if any(s.primary() != want for s in self.sentinels):
                return False
            with redis.Redis("127.0.0.1", self.replica.port) as c:
                return c.info("replication").get("role") == "master"
        wait_until(promoted, timeout, 0.05, "the Sentinels to promote the replica")

    def failovers(self) -> int:
        """How many failovers the Sentinels have completed: the service's configuration epoch
        (0 at the start, one more for each primary they promoted)."""
        epochs = []
        for sentinel in self.sentinels:
            with sentinel.client() as c:
                epochs.append(int(c.sentinel_master(SERVICE)["config-epoch"]))
        return max(epochs)

    def rejoin_old_primary(self, timeout: float = STARTUP) -> None:
        """Start the killed primary again as a replica of the new one, as a restarted node is
        configured after a failover (the Sentinels would convert it too, but only after some
        seconds of seeing it as a primary), so `wait_replicas` pushes are confirmed again."""
        self.primary.args += ["--replicaof", "127.0.0.1", str(self.replica.port)]
        self.primary.start()

        def replicating() -> bool:
            with redis.Redis("127.0.0.1", self.replica.port) as c:
                info = c.info("replication")
            return int(info.get("connected_slaves", 0)) >= 1 and "slave0" in info and \
                info["slave0"].get("state") == "online"
        wait_until(replicating, timeout, 0.1, "the old primary to replicate from the new one")

    def close(self) -> None:
        for part in reversed(self.started):
            part.stop()

    def __enter__(self) -> SentinelSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- Redis Cluster -------------------------------------------------------------------------------

NODE_TIMEOUT_MS = 1000  # a primary silent this long is failing; its replica is voted up a second or two later
SLOTS = 16384
MANUAL_FAILOVER_S = 5.5  # a replica gives up a CLUSTER FAILOVER after 5 s (CLUSTER_MF_TIMEOUT)


class ClusterMember:
    """One `redis-server --cluster-enabled yes`, with its data and nodes.conf in a directory of its own
    (kept across `kill` and `start`, so a restarted node knows its cluster)."""

    def __init__(self, binary: str) -> None:
        self.port = _cluster_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sq-cluster-"))
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                     "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                     "--appendonly", "no", "--save", "", "--dir", str(self.dir),
                     "--repl-diskless-sync-delay", "0",  # a replica (re)joining syncs at once
                     "--logfile", str(self.dir / "redis.log")]
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(self._ready, STARTUP, 0.02, f"cluster node on port {self.port}")
        except BaseException:
            self.kill()
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            log = self.dir / "redis.log"
            tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
            raise AssertionError(f"cluster node on port {self.port} exited ({self.proc.returncode}): {tail}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis("127.0.0.1", self.port, socket_timeout=2, socket_connect_timeout=1, decode_responses=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000, fixed by Redis before 7) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
                return port
            except OSError:
                pass


@dataclass(frozen=True)
class NodeEntry:
    """One line of CLUSTER NODES: a node as the node asked sees it."""

    id: str
    port: int
    primary: bool
    failed: bool  # flagged fail, or suspected (fail?), by the node asked
    primary_id: str | None  # for a replica, the id of its primary
    slots: tuple[tuple[int, int], ...]  # ranges, both ends included

    @classmethod
    def parse(cls, line: str) -> NodeEntry:
        node_id, address, flags, primary_id, *fields = line.split()
        ranges = []
        for item in fields[4:]:  # after ping-sent, pong-recv, config-epoch, link-state
            if not item.startswith("["):  # [slot->-id]: a slot on the move, listed in a range as well
                first, _, last = item.partition("-")
                ranges.append((int(first), int(last or first)))
        flag_set = set(flags.split(","))
        return cls(id=node_id, port=int(address.split("@")[0].rpartition(":")[2]), primary="master" in flag_set,
                   failed=bool(flag_set & {"fail", "fail?"}), primary_id=None if primary_id == "-" else primary_id,
                   slots=tuple(ranges))


def _owners(view: list[NodeEntry]) -> dict[int, tuple[tuple[int, int], ...]]:
    return {e.port: e.slots for e in view if e.primary and e.slots and not e.failed}


class ClusterSet:
    """Three primaries and a replica of each, in one Redis Cluster on loopback ports (see module)."""

    def __init__(self, binary: str, shards: int = 3) -> None:
        cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
        if cli is None:
            pytest.skip("redis-cli not found: the Cluster tests build their cluster with `redis-cli --cluster create`")
        self.members: dict[int, ClusterMember] = {}
        self.successors: dict[int, int] = {}  # killed primary's port -> its replica's
        try:
            for _ in range(shards * 2):
                member = ClusterMember(binary)
                self.members[member.port] = member
            with member.client() as c:
                try:
                    c.execute_command("CLUSTER", "INFO")
                except redis.ResponseError as exc:
                    pytest.skip(f"{binary} has no cluster support: {exc}")
            addresses = [f"127.0.0.1:{port}" for port in self.members]
            done = subprocess.run([cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
                                  capture_output=True, text=True, timeout=STARTUP)
            if done.returncode != 0:
                raise AssertionError(f"redis-cli --cluster create failed: {done.stdout[-500:]} {done.stderr[-500:]}")
            self.wait_settled()
        except BaseException:
            self.close()
            raise

    # -- what the nodes say ---------------------------------------------------------------------

    def view(self, port: int | None = None) -> list[NodeEntry]:
        """CLUSTER NODES as the node on `port` (else the first one running) answers it."""
        asked = port if port is not None else self._running()[0]
        with self.members[asked].client() as c:
            text = c.execute_command("CLUSTER", "NODES")
        return [NodeEntry.parse(line) for line in text.splitlines() if line.strip()]

    def _running(self) -> list[int]:
        return [port for port, member in self.members.items() if member.alive()]

    def _owners(self, port: int | None = None) -> dict[int, tuple[tuple[int, int], ...]]:
        """primary port -> its slot ranges, as the node on `port` sees them."""
        return _owners(self.view(port))

    def primaries(self) -> list[tuple[str, int]]:
        """(host, port) of each primary serving slots, in slot order."""
        owners = self._owners()
        return [("127.0.0.1", port) for port in sorted(owners, key=lambda p: owners[p][0])]

    def node_of(self, key: str | bytes) -> int:
        """The port of the primary that owns `key`'s slot."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for port, ranges in self._owners().items():
            if any(first <= slot <= last for first, last in ranges):
                return port
        raise AssertionError(f"no primary owns slot {slot} of {key!r}")

    def replica_of(self, port: int) -> int:
        """The port of a replica of the primary on `port`, as the primary sees it."""
        entries = self.view(port)
        primary_id = next(e.id for e in entries if e.port == port)
        return next(e.port for e in entries if e.primary_id == primary_id and not e.failed)

    def _replicates(self, replica: int, primary: int) -> bool:
        """The node on `primary` serves slots and sees the one on `replica` as its replica."""
        try:
            entries = {e.port: e for e in self.view(primary)}
        except (redis.RedisError, OSError):  # a node busy switching roles
            return False
        follower, leader = entries.get(replica), entries[primary]
        return leader.primary and bool(leader.slots) and follower is not None and follower.primary_id == leader.id

    def url(self, scheme: str = "redis+cluster") -> str:
        return f"{scheme}://" + ",".join(f"{host}:{port}" for host, port in self.primaries())

    # -- changes --------------------------------------------------------------------------------

    def kill_primary(self, port: int) -> None:
        """SIGKILL the primary on `port`; its replica will be voted primary (`wait_promoted`)."""
        self.successors[port] = self.replica_of(port)
        self.members[port].kill()

    def wait_promoted(self, old_port: int, timeout: float = STARTUP) -> int:
        """Wait until the replica of the killed primary on `old_port` serves its slots and every
        running node agrees; the new primary's port."""
        new = self.successors[old_port]
        wait_until(lambda: new in self._owners(new), timeout, 0.05, f"port {new} to be voted primary")
        self.wait_settled(timeout)
        return new

    def manual_failover(self, port: int, timeout: float = STARTUP) -> int:
        """CLUSTER FAILOVER on the replica of the primary on `port`; wait until the two switched
        roles and every node agrees; the new primary's port."""
        replica = self.replica_of(port)
        asked = [0.0]

        def switched() -> bool:
            if self._replicates(port, replica):
                return True
            # A primary votes for a replica of the same shard once per 2 x node timeout, so a
            # failover soon after another can miss its votes and is dropped after 5 s: ask again.
            if time.monotonic() - asked[0] > MANUAL_FAILOVER_S:
                with self.members[replica].client() as c:
                    c.execute_command("CLUSTER", "FAILOVER")
                asked[0] = time.monotonic()
            return False
        wait_until(switched, timeout, 0.05, f"port {replica} to take over from port {port}")
        self.wait_settled(timeout)
        return replica

    def restart(self, port: int, timeout: float = STARTUP) -> None:
        """Start the killed node on `port` again: it rejoins as a replica of its successor."""
        self.members[port].start()
        self.successors.pop(port, None)
        self.wait_settled(timeout)

    def wait_settled(self, timeout: float = STARTUP) -> None:
        wait_until(self._settled, timeout, 0.05, "the running cluster nodes to agree on every slot's "
                   "primary, each replica in sync")

    def _settled(self) -> bool:
        try:
            running = self._running()
            views = [self.view(port) for port in running]
            maps = [_owners(view) for view in views]
            covered = sum(last - first + 1 for ranges in maps[0].values() for first, last in ranges)
            if covered != SLOTS or any(m != maps[0] for m in maps):
                return False
            if any(e.failed for view in views for e in view if e.port in running):
                return False  # a restarted node not yet cleared by all
            roles = [{e.port: (e.primary, e.primary_id) for e in view if e.port in running} for view in views]
            if any(r != roles[0] for r in roles):
                return False  # a node not yet told of a failover (a demoted primary still a primary, without slots)
            for port in running:
                with self.members[port].client() as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
                    info = c.info("replication")
                if port not in maps[0] and info.get("master_link_status") != "up":
                    return False
            return True
        except (redis.RedisError, OSError):
            return False

    def close(self) -> None:
        for member in self.members.values():
            member.stop()

    def __enter__(self) -> ClusterSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def crossslot_free_client(cluster: ClusterSet) -> Iterator[Any]:
    """A sidequest `Client` on the cluster's URL, every primary emptied and its error stats reset
    first; after the test (the generator resumed) no primary may have refused a CROSSSLOT call."""
    from sidequest import Client, Config

    chosen = Client(Config(redis_url=cluster.url()))
    cluster_client: object = chosen.redis
    assert isinstance(cluster_client, redis.RedisCluster)
    nodes = [cluster_client.get_redis_connection(node) for node in cluster_client.get_primaries()]
    assert len(nodes) == 3
    for node in nodes:
        node.flushall()
        node.config_resetstat()
    yield chosen
    for node in nodes:
        assert "errorstat_CROSSSLOT" not in node.info("errorstats"), node
    chosen.redis.close()


class ClusterPrimaryOf:
    """A ClusterSet in the shape `failover_under_load` drives (SentinelSet's), over the primary
    that owns `key`: `kill_primary` SIGKILLs it, `wait_promoted` waits for its replica to be
    voted up, `rejoin_old_primary` restarts it as a replica of the new one."""

    def __init__(self, cluster: ClusterSet, key: str) -> None:
        self.cluster = cluster
        self.key = key
        self.queue_key = key  # the list `failover_under_load` watches drain
        self.old = 0

    def url(self) -> str:
        return self.cluster.url()

    def kill_primary(self) -> None:
        self.old = self.cluster.node_of(self.key)
        self.cluster.kill_primary(self.old)

    def wait_promoted(self) -> None:
        self.cluster.wait_promoted(self.old)

    def rejoin_old_primary(self) -> None:
        self.cluster.restart(self.old)


# -- a failover under load: what the Sentinel and Cluster tests assert on, bench/failover.py measures

def runs_in(log: Path) -> Counter[int]:
    """n -> how many times the Logged job (jobs_for_tests) ran with it."""
    if not log.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in log.read_text().splitlines() if line.strip())


def run_times(log: Path) -> list[float]:
    return [float(line.split()[2]) for line in log.read_text().splitlines() if line.strip()]


@dataclass
class FailoverRun:
    """What happened around one SIGKILL of the primary."""

    replicas: int  # wait_replicas of the producer
    confirmed: set[int] = field(default_factory=set)  # pushes that returned: each must run
    unconfirmed: set[int] = field(default_factory=set)  # pushes that raised: they may or may not be in Redis
    ran: Counter[int] = field(default_factory=Counter)
    killed_at: float = 0.0
    producer_back: float = 0.0  # seconds from the kill to the next confirmed push
    worker_back: float = 0.0  # ... to the next job a worker ran
    worker_exit: int | None = None
    worker_output: str = ""

    @property
    def lost(self) -> set[int]:
        return self.confirmed - set(self.ran)

    @property
    def twice(self) -> set[int]:
        return {n for n, count in self.ran.items() if count > 1}

    def summary(self) -> str:
        return (f"wait_replicas={self.replicas}: {len(self.confirmed)} confirmed pushes, {len(self.unconfirmed)} "
                f"refused during the switch, lost {len(self.lost)}, ran twice {len(self.twice)}; producer back "
                f"{self.producer_back:.1f} s and worker running jobs {self.worker_back:.1f} s after the kill")


def failover_under_load(topology: Any, replicas: int, log_dir: Path, *, before: int = 100,
                        after: int = 100) -> FailoverRun:
    """A `sidequest worker` (-c 5) and a producer (a push every 5 ms, `wait_replicas`) both on
    the topology's URL (a SentinelSet, or a ClusterPrimaryOf); once `before` jobs ran, SIGKILL the
    primary; the old primary comes back as a replica (needed for `wait_replicas` pushes to be
    confirmed again); once `after` more pushes are confirmed, stop pushing and let the queue
    drain. Runs are counted from a file."""
    from jobs_for_tests import logged
    from scenarios.test_reliability import Worker

    from sidequest import Client, Config
    from sidequest.errors import NotReplicatedError
    from sidequest.store.connection import connect

    url = topology.url()
    log = log_dir / f"runs-{time.monotonic_ns()}.log"
    result = FailoverRun(replicas)
    worker = Worker(url, log_dir, "-c", "5", env={"SQ_TEST_RUN_LOG": str(log)})
    stop = threading.Event()
    try:
        watch = connect(url)
        # >= 1: the worker runs a process per CPU by default (`== 1` held only between two registrations)
        wait_until(lambda: watch.scard("processes") >= 1, STARTUP, 0.1, "the worker to register")
        client = Client(Config(redis_url=url, wait_replicas=replicas, wait_timeout=2))
        back: list[float] = []

        def produce() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    client.push(logged, [n, 0.01])
                    result.confirmed.add(n)
                    if result.killed_at and not back:
                        back.append(time.time())
                except (redis.ConnectionError, redis.TimeoutError, NotReplicatedError,
                        redis.exceptions.ClusterError, redis.exceptions.TryAgainError):  # a cluster mid-switch
                    result.unconfirmed.add(n)
                    time.sleep(0.05)  # a producer's pause before it pushes again, as an application's
                time.sleep(0.005)  # a producer's pace: a steady load through the failover
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        wait_until(lambda: len(runs_in(log)) >= before, STARTUP, 0.05, "jobs to run before the kill")
        topology.kill_primary()
        result.killed_at = time.time()
        topology.wait_promoted()
        if replicas:
            topology.rejoin_old_primary()
        wait_until(lambda: back, STARTUP, 0.05, "the producer to push again")
        if not replicas:
            topology.rejoin_old_primary()
        resumed = len(result.confirmed)
        wait_until(lambda: len(result.confirmed) >= resumed + after, STARTUP, 0.05, "pushes after the failover")
        stop.set()
        producer.join(30)
        watch = connect(url)

        queue_key = getattr(topology, "queue_key", "queue:default")  # Cluster mode's is `queue:{default}`

        def drained() -> bool:
            return not watch.llen(queue_key) and result.confirmed - set(runs_in(log)) <= \
                (set() if replicas else result.confirmed)
        wait_until(drained, STARTUP, 0.1, "the queue to drain")
        if replicas:
            wait_until(lambda: result.confirmed <= set(runs_in(log)), STARTUP, 0.1, "every confirmed push to run")
        result.ran = runs_in(log)
        result.producer_back = back[0] - result.killed_at
        result.worker_back = min(t for t in run_times(log) if t > result.killed_at + 0.05) - result.killed_at
        result.worker_exit = worker.stop()
        result.worker_output = worker.output()
        return result
    finally:
        stop.set()
        worker.cleanup()

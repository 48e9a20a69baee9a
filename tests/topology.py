"""Real Redis topologies on loopback ports, for the Sentinel tests: a primary, a replica and
three Sentinels (`redis-server --sentinel`), each a process of the test's own, stopped by pid.

    with SentinelSet(redis_server_binary()) as s:
        url = s.url()                  # redis+sentinel://127.0.0.1:p1,127.0.0.1:p2,.../mymaster/0
        s.kill_primary()               # SIGKILL; the Sentinels promote the replica
        s.wait_promoted()              # the replica is the primary the Sentinels name
        s.rejoin_old_primary()         # restarted, it replicates from the new primary

Failure is detected after `DOWN_AFTER_MS` and a failover is under way about a second later, so a
test sees a new primary within a few seconds of the kill.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis
from conftest import STARTUP, RedisServer, free_port, wait_until

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


# -- a failover under load: what the Sentinel test asserts on and bench/failover.py measures ------

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


def failover_under_load(topology: SentinelSet, replicas: int, log_dir: Path, *, before: int = 100,
                        after: int = 100) -> FailoverRun:
    """A `sidequest worker` (-c 5) and a producer (a push every 5 ms, `wait_replicas`) both on
    the Sentinel URL; once `before` jobs ran, SIGKILL the primary; the old primary comes back as
    a replica (needed for `wait_replicas` pushes to be confirmed again); once `after` more
    pushes are confirmed, stop pushing and let the queue drain. Runs are counted from a file."""
    from jobs_for_tests import logged
    from test_reliability import Worker

    from sidequest import Client, Config
    from sidequest.connection import connect
    from sidequest.errors import NotReplicatedError

    url = topology.url()
    log = log_dir / f"runs-{time.monotonic_ns()}.log"
    result = FailoverRun(replicas)
    worker = Worker(url, log_dir, "-c", "5", env={"SQ_TEST_RUN_LOG": str(log)})
    stop = threading.Event()
    try:
        watch = connect(url)
        wait_until(lambda: watch.scard("processes") == 1, STARTUP, 0.1, "the worker to register")
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
                except (redis.ConnectionError, redis.TimeoutError, NotReplicatedError):
                    result.unconfirmed.add(n)
                    time.sleep(0.05)
                time.sleep(0.005)
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

        def drained() -> bool:
            return not watch.llen("queue:default") and result.confirmed - set(runs_in(log)) <= \
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

"""Small helpers shared by the worker tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until


def cli_ok(result) -> str:
    """A CliRunner result's output, once it exited 0 (else the output says why it did not)."""
    assert result.exit_code == 0, result.output
    return result.output


def ran(r, kind: str | None = None) -> list[list]:
    """What jobs recorded in `test:ran` (see jobs_for_tests.record), optionally of one kind."""
    items = [json.loads(x) for x in r.lrange("test:ran", 0, -1)]
    return [i[1:] for i in items if kind is None or i[0] == kind]


def reserved(r, identity: str | None = None) -> list[bytes]:
    """Every job held in reserved lists (one list per processor), of one process or of all."""
    pattern = f"sidequest:reserved:{identity}:*" if identity else "sidequest:reserved:*"
    return [raw for key in r.scan_iter(pattern) for raw in r.lrange(key, 0, -1)]


def queue_items(r, queue: str = "default") -> list[dict]:
    return [json.loads(x) for x in r.lrange(f"queue:{queue}", 0, -1)]


def zset_items(r, key: str) -> list[tuple[dict, float]]:
    return [(json.loads(m), s) for m, s in r.zrange(key, 0, -1, withscores=True)]


class WorkerProcess:
    """`sidequest worker` as a real subprocess, with short test intervals.

    Its output goes to a file, not a pipe: a busy worker logs more than a pipe buffer holds,
    and a full pipe would block every thread that logs.
    """

    def __init__(self, redis_url: str, *args: str, cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.args = [PYTHON, "-m", "sidequest.cli", "worker", "-r", "jobs_for_tests",
                     "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3", "--poll-interval", "0.2",
                     "--recovery-interval", "1", *args]
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (open while the worker runs)
            prefix="sq-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                     env=python_env(REDIS_URL=redis_url, SQ_TEST_REDIS_URL=redis_url, **(env or {})))

    @property
    def output(self) -> str:
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_registered(self, r, timeout: float = STARTUP) -> str:
        """Wait until this process is in the `processes` set; return its identity."""
        def find():
            for ident in r.smembers("processes"):
                if f":{self.proc.pid}:" in ident.decode():
                    return ident.decode()
            assert self.proc.poll() is None, self.output
            return None
        return wait_until(find, timeout, message="worker to register")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 30.0) -> str:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.output

    def stop(self, timeout: float = 30.0) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.finish(timeout)


def eventually_empty(r, key: str, timeout: float = 10.0) -> None:
    wait_until(lambda: r.llen(key) == 0, timeout, message=f"{key} to drain")


def now() -> float:
    return time.time()


def pause_seen(launcher, queue: str, timeout: float = 15.0) -> None:
    """Wait until the processors of `launcher` (in this process) leave `queue` out of their
    fetches: they share one view of the paused set, read again at most once a second."""
    wait_until(lambda: queue in launcher.paused.names(), timeout, 0.05, f"the worker to see {queue} paused")


def beats(r, identities, count: int = 2, timeout: float = 30.0) -> None:
    """Wait until each process in `identities` has written `count` more heartbeats: the event
    after which whatever a process does once a beat (read its signals, see a pause, flush its
    counts) has been done at least once since the call, instead of sleeping a guessed time."""
    identities = [identities] if isinstance(identities, str) else list(identities)
    start = {i: r.hget(i, "beat") for i in identities}
    seen = {i: 0 for i in identities}

    def advanced() -> bool:
        for ident in identities:
            now = r.hget(ident, "beat")
            if now != start[ident]:
                start[ident], seen[ident] = now, seen[ident] + 1
        return all(n >= count for n in seen.values())
    wait_until(advanced, timeout, 0.02, f"{count} more heartbeats of {', '.join(identities)}")


def push_fillers(client, queue: str, concurrency: int) -> None:
    """Queue jobs ahead of one a test means to stay untouched while `queue` is paused.

    Once the pause is seen, a fetch that began before it may still end with a job of the queue:
    each of the `concurrency` processors has at most one such fetch, and a fetch takes at most one
    job per processor. The fillers (oldest first) are all such fetches can reach.
    """
    from jobs_for_tests import echo

    client.push_bulk(echo, [["filler"]] * concurrency**2, queue=queue)


def pttl_and_spent(r, key: str, since: float) -> tuple[int, float]:
    """`key`'s PTTL, then the milliseconds since `since` (a time.monotonic() taken before the
    write that set it): a TTL of T reads between T - spent and T, however late this test runs."""
    pttl = int(r.pttl(key))
    return pttl, (time.monotonic() - since) * 1000


def fetches_blocked(r) -> int:
    """Connections to this test's database waiting in a blocking command: idle processors'
    fetches. A quiet worker's processors end with their fetch in hand; once none is left, a job
    pushed is not taken (and put back) by a fetch begun before the quiet."""
    db = int(r.connection_pool.connection_kwargs.get("db") or 0)
    return sum(1 for c in r.client_list() if int(c.get("db", -1)) == db and "b" in c.get("flags", ""))


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_cost(call, server, tries: int = 1) -> tuple[float, object]:
    """The CPU time `call` costs this process and `server` (its own redis-server: see the
    `private_redis` fixture), the least of `tries`, and its result. CPU time, not elapsed time:
    a loaded machine stretches the wait for a CPU, not the work, so a bound on it holds there."""
    best, result = float("inf"), None
    for _ in range(tries):
        began = time.process_time() + cpu_seconds(server.proc.pid)
        result = call()
        best = min(best, time.process_time() + cpu_seconds(server.proc.pid) - began)
    return best, result


def doc_examples(doc: str, names: set[str], into: Path, redis_url: str) -> Callable[[str], list[str]]:
    """Write the ```python blocks of docs/`doc` whose first line names one of `names` (`# x.py --
    ...`) into `into` (all must be there), and return `run(name)`: that file run with Python in
    `into`, on the test's Redis, its output's lines once it exited 0."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        name = block.splitlines()[0].removeprefix("# ").split(" ")[0]
        if name in names:
            (into / name).write_text(block, encoding="utf-8")
    assert {p.name for p in into.iterdir()} >= names
    env = python_env(REDIS_URL=redis_url)

    def run(name: str) -> list[str]:
        done = subprocess.run([PYTHON, name], cwd=into, env=env, capture_output=True, text=True, timeout=2 * STARTUP)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run


def http_get(port: int, path: str) -> tuple[int, str]:
    """`GET path` on 127.0.0.1:port (a health port): (status, body); (0, why) while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


class ShiftedClock:
    """The wall clock moved by `offset` seconds: a worker's clock a test walks through past minutes."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def worked_for_minutes(config, client, r, minutes: int = 10) -> list[tuple[float, int, int]]:
    """A real worker that ran through the `minutes` finished minutes before this one, as if it had
    run for that long: in minute i, i + 1 `Noop` runs and, every third minute, one `NoDead`
    failure. Returns (minute's start, runs, failed) per minute, oldest first, once every count has
    reached Redis with the worker's heartbeat."""
    from jobs_for_tests import no_dead, noop

    from sidequest.worker.launcher import Launcher

    clock = ShiftedClock()
    start = (int(time.time()) // 60 - minutes) * 60
    clock.offset = start + 1 - time.time()
    launcher = Launcher(config, clock=clock)
    launcher.run()
    expected = []
    try:
        for i in range(minutes):
            at = start + 60 * i
            clock.offset = at + 1 - time.time()  # jobs of minute i run (and are counted) in minute i
            failed = 1 if i % 3 == 0 else 0
            client.push_bulk(noop, [[i, n] for n in range(i + 1)])
            if failed:
                client.push(no_dead)
            wait_until(lambda at=at, want=i + 1 + failed: _runs_in(r, at) == want, message=f"minute {i} counted")
            expected.append((float(at), i + 1 + failed, failed))
    finally:
        launcher.stop()
    return expected


def _runs_in(r, at: float) -> int:
    """Runs of every job counted in Redis in the minute starting at `at`."""
    from sidequest.features.job_metrics import minute_of, read

    return sum(job.per_minute.get(minute_of(at), (0, 0, 0.0))[0] for job in read(r, 2, at + 30).values())


def waited_for_minutes(config, r, waits: list[dict[str, float]]) -> list[tuple[float, dict[str, float]]]:
    """A real worker taking from every queue `waits` names, through the len(waits) finished minutes
    before this one: in minute i, one `Noop` per queue q pushed by a producer whose clock is
    waits[i][q] seconds behind the worker's, so each job has waited that long when it starts.
    Returns (minute's start, {queue: longest wait Redis holds}) per minute, oldest first, once
    every minute's waits have reached Redis with the worker's heartbeat."""
    import dataclasses

    from jobs_for_tests import noop

    from sidequest.client.sync_client import Client
    from sidequest.features.job_metrics import minute_of, read_latency
    from sidequest.worker.launcher import Launcher

    names = sorted({queue for minute in waits for queue in minute})
    clock, behind = ShiftedClock(), ShiftedClock()
    start = (int(time.time()) // 60 - len(waits)) * 60
    clock.offset = start + 1 - time.time()
    launcher = Launcher(dataclasses.replace(config, queues=names), clock=clock)
    producer = Client(config, clock=behind)
    launcher.run()
    found = []
    try:
        for i, minute in enumerate(waits):
            at = start + 60 * i
            clock.offset = at + 1 - time.time()  # jobs of minute i start (and are counted) in minute i
            for queue, seconds in minute.items():
                behind.offset = clock.offset - seconds
                producer.push(noop, [i], queue=queue)
            stored = wait_until(lambda at=at, want=set(minute): set(
                got := read_latency(r, 2, at + 30)[minute_of(at)]) == want and got, message=f"minute {i}'s waits")
            found.append((float(at), stored))
    finally:
        launcher.stop()
    return found

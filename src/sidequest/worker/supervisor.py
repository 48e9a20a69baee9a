"""The multi-process supervisor: `sidequest worker --processes N` (N >= 1).

The supervisor runs no jobs; its one Redis connection checks the server at start and puts
back a dead child's jobs (below). It starts N worker processes (each
a full `sidequest worker` with its own threads and identity), restarts any that exits without
being asked to, with a back-off per slot so a crash loop does not spin (0.25 s doubling to
30 s, reset once a child has lived 10 s; a child that exits 0 recycled itself on purpose and
is replaced at once), forwards TSTP and TTIN to every child, and on INT/TERM sends TERM to all
and waits for them (each has its own shutdown deadline; a second INT/TERM is forwarded too,
and makes them stop now), killing stragglers after `timeout + 10` seconds.

Before it starts any child, the supervisor checks the server once, as a worker process does
(it answers as Redis, 6.2 or newer): a wrong REDIS_URL is one line and a fast exit, not a fleet
restarting. A child that cannot start writes its one-line reason to a file the supervisor gave
it and exits non-zero. A configuration error only a child can see (a `-r` module that is not
there, a setting the launcher refuses) exits `CONFIG_EXIT`: the supervisor logs that reason once,
stops the others and exits 2, since no restart can fix it. Other failures at start (Redis
refused) are retried with back-off; after `START_FAILURES` in a row the supervisor exits 1.

Each child's identity is `hostname:pid:nonce` with a nonce the supervisor passes in, so the
supervisor knows it. When it reaps a child (killed, crashed, or stopped), that process is
certainly dead: the supervisor deletes its heartbeat and puts back the jobs of exactly its
reserved lists at once (`Recovery.recover_process`, the same per-job move the recovery thread
makes), instead of leaving them for a live worker's recovery after `heartbeat_ttl`.

A capsule's concurrency is for the whole fleet, not per child: child k gets its share
(`capsule_share`; the shares add up to the configured concurrency), so a capsule of
concurrency 1 runs in one child only and stays serial. `-c` stays per process.

Children are fresh interpreters started with the supervisor's own arguments, not forks: the
job code is imported cleanly in each, and nothing is inherited from a process with threads.

A supervisor that dies without stopping them (kill -9, the OOM killer) takes its children with
it, so a restarted supervisor does not run a second fleet beside the orphaned first one. Each
child holds the read end of a pipe whose only write end the supervisor keeps open and never
writes to (its "lifeline"): when the supervisor dies, the kernel closes that end, the child's
main loop sees end-of-file and stops as on TERM (running jobs get `timeout` seconds, the rest
go back to their queues). On Linux the child also asks for SIGTERM when its parent dies
(PR_SET_PDEATHSIG), a backstop that needs no loop to notice.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from sidequest.config import Config
from sidequest.errors import ConfigError
from sidequest.worker.background.heartbeat import make_identity
from sidequest.worker.probes.fleet import FleetWatch
from sidequest.worker.probes.server import ProbeServer
from sidequest.worker.signals import SignalPipe

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX, HEALTHY_AFTER = 0.25, 30.0, 10.0
START_FAILURES = 5
CONFIG_EXIT = 78  # sysexits.h EX_CONFIG: a child's configuration error, which no restart can fix


@dataclass
class Slot:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = 0.0
    restart_at: float | None = None
    restarts: int = field(default=0)
    error_file: Path | None = None
    identity: str | None = None  # the running child's (see `Supervisor._spawn`)


def child_arguments(argv: list[str]) -> list[str]:
    """The worker arguments for a child: the supervisor's, without `--processes`, plus the child flag."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return [*out, "--swarm-child"]


def capsule_share(concurrency: int, slot: int, count: int, index: int = 0) -> int:
    """Child `slot`'s part of a capsule's `concurrency` over `count` children: the parts add up
    to it, so a capsule of concurrency 1 runs in one child only. The remainder goes to the
    children from `index` (the capsule's place in the list) on, so serial capsules spread out."""
    return concurrency // count + (1 if (slot - index) % count < concurrency % count else 0)


def shared_capsules(config: Config, slot: int, count: int) -> Config:
    """A child's configuration: each capsule with its share, those whose share is 0 left out."""
    capsules = tuple(dataclasses.replace(c, concurrency=n) for i, c in enumerate(config.capsules)
                     if (n := capsule_share(c.concurrency, slot, count, i)))
    return dataclasses.replace(config, capsules=capsules)


def log_capsule_shares(config: Config, count: int) -> None:
    for i, capsule in enumerate(config.capsules):
        shares = "+".join(str(capsule_share(capsule.concurrency, k, count, i)) for k in range(count))
        log.info("capsule %s: concurrency %d over %d worker processes: %s", capsule.name,
                 capsule.concurrency, count, shares)


def read_error(path: Path | None) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() if path else ""
    except OSError:
        return ""


class Supervisor:
    def __init__(self, count: int, child_args: list[str], timeout: float, env: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, hostname: str | None = None,
                 on_death: Callable[[str], None] | None = None) -> None:
        self.env = env
        self.slots = [Slot(i) for i in range(count)]
        self.command = [sys.executable, "-m", "sidequest.cli", "worker", *child_args, "--swarm-size", str(count)]
        self.timeout = timeout
        self.clock = clock
        self.hostname = hostname  # the children's identities are made with it (config.hostname)
        self.on_death = on_death  # called with a reaped child's identity
        self.stopping = False
        self.start_failures = 0  # children in a row that exited before they could start
        self.last_error = ""
        self.config_error = ""  # a child's configuration error: stop, do not restart
        self._errors = tempfile.TemporaryDirectory(prefix="sidequest-swarm-")
        # Not inheritable (os.pipe's default): only the read end is passed on, so the write end
        # closes when the supervisor dies, however it dies.
        self.lifeline, self._lifeline_writer = os.pipe()
        for slot in self.slots:
            slot.error_file = Path(self._errors.name) / f"child-{slot.index}.err"

    @property
    def failing(self) -> bool:
        """Children keep failing at start: restarting them cannot help."""
        return self.start_failures >= START_FAILURES

    def _spawn(self, slot: Slot) -> None:
        assert slot.error_file is not None
        slot.error_file.write_text("")
        nonce = secrets.token_hex(6)
        # A group of its own: a Ctrl-C or a service manager's TERM to the supervisor's group must not
        # reach the children too, or the supervisor's forwarded TERM would be their second (stop now).
        slot.proc = subprocess.Popen([*self.command, "--swarm-error-file", str(slot.error_file),
                                      "--swarm-slot", str(slot.index), "--swarm-lifeline", str(self.lifeline),
                                      "--swarm-nonce", nonce],
                                     env=self.env, process_group=0, pass_fds=(self.lifeline,))
        slot.identity = make_identity(nonce, self.hostname, slot.proc.pid)
        slot.started = self.clock()
        slot.restart_at = None
        log.info("started worker process %d (pid %d)", slot.index, slot.proc.pid)

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def tend(self) -> None:
        """Notice children that exited and restart those whose back-off has passed."""
        now = self.clock()
        for slot in self.slots:
            if slot.proc is not None and slot.restart_at is None:
                code = slot.proc.poll()
                if code is None:
                    continue
                self._reaped(slot)
                if self.stopping:  # it exited as asked (or on a TERM of its own while we stop)
                    log.info("worker process %d (pid %d) exited with code %s", slot.index, slot.proc.pid, code)
                    slot.restart_at = float("inf")
                    continue
                lived = now - slot.started
                error = read_error(slot.error_file)
                if code == CONFIG_EXIT and error:  # restarting cannot fix a setting: the loop stops
                    self.config_error = self.config_error or error
                    slot.restart_at = float("inf")
                    continue
                if code != 0 and error:
                    self.start_failures += 1
                    self.last_error = error
                elif code == 0 or lived >= HEALTHY_AFTER:
                    self.start_failures = 0
                if code == 0:  # a planned recycle (--max-jobs, --max-memory, a stuck job): at once
                    slot.delay = 0.0
                elif lived >= HEALTHY_AFTER:
                    slot.delay = BACKOFF_START
                else:
                    slot.delay = min(max(slot.delay * 2, BACKOFF_START), BACKOFF_MAX)
                slot.restart_at = now + slot.delay
                slot.restarts += 1
                log.warning("worker process %d (pid %d) exited with code %s after %.1f s; restarting in %.2f s",
                            slot.index, slot.proc.pid, code, lived, slot.delay)
            if (slot.restart_at is not None and now >= slot.restart_at and not self.stopping and not self.failing
                    and not self.config_error):
                self._spawn(slot)

    def _reaped(self, slot: Slot) -> None:
        """A child is gone for sure (waited for): its jobs need not wait for its heartbeat to expire.
        Even after a clean exit: a put-back that failed left its job reserved."""
        if slot.identity is not None and self.on_death is not None:
            self.on_death(slot.identity)
        slot.identity = None

    def forward(self, sig: int) -> None:
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(sig)

    def begin_stop(self) -> None:
        """TERM every child (again: a second TERM makes them stop now)."""
        self.stopping = True
        self.forward(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> bool:
        """Reap children; kill those still running at `deadline`. True once all are gone."""
        running = [s for s in self.slots if s.proc is not None and s.proc.poll() is None]
        if running and self.clock() < deadline:
            return False
        for slot in running:
            assert slot.proc is not None
            log.error("worker process %d (pid %d) did not stop in time; killing it", slot.index, slot.proc.pid)
            slot.proc.kill()
            slot.proc.wait()
            self._reaped(slot)
        self._errors.cleanup()
        os.close(self.lifeline)
        os.close(self._lifeline_writer)
        log.info("all worker processes stopped")
        return True

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.slots if s.proc is not None and s.proc.poll() is None]

    def ages(self) -> list[tuple[int, float]]:
        """(pid, seconds it has run) of each running child, for the fleet's probes."""
        now = self.clock()
        return [(s.proc.pid, now - s.started) for s in self.slots if s.proc is not None and s.proc.poll() is None]


class Lifeline:
    """A child's side of the lifeline: tells whether the supervisor is gone."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        die_with_parent()  # if the supervisor died before this, supervisor_gone() already says so

    def supervisor_gone(self) -> bool:
        """The supervisor never writes: the read end turns readable only at end-of-file."""
        ready, _, _ = select.select([self.fd], [], [], 0)
        return bool(ready)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: have the kernel send `sig` to this process when its parent dies (else nothing).

    Sound here because the supervisor is single-threaded (the signal follows the thread that
    forked us), and harmless before the child takes jobs (TERM's default action ends it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            log.debug("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:  # no libc to load, or no prctl in it
        log.debug("cannot ask for a signal at the supervisor's death: %s", exc)


def recoverer(config: Config, client: redis.Redis) -> Callable[[str], None]:
    """What the supervisor calls with the identity of a child it reaped: put back its jobs now."""
    from sidequest.worker.launcher import orphan_recovery

    recovery = orphan_recovery(config, client, make_identity("supervisor", config.hostname))

    def recover(identity: str) -> None:
        try:
            try:
                moved = recovery.recover_process(identity)
            except redis.ConnectionError:  # the connection sat idle since the last death: once more, on a new one
                moved = recovery.recover_process(identity)  # (each move checks the job is still there)
        except (redis.RedisError, OSError) as exc:  # a live worker's recovery takes them after heartbeat_ttl
            log.warning("could not put back the jobs of dead worker process %s (%s); recovery will after "
                        "heartbeat_ttl", identity, exc)
        else:
            if moved:
                log.info("put back %d job(s) of dead worker process %s", moved, identity)
    return recover


def run_swarm(count: int, argv: list[str], config: Config, client: redis.Redis) -> int:
    """Main loop of the supervisor; signals arrive through the self-pipe. `config.redis_url` is
    resolved and `client` checked (see `cli.worker.run_supervisor`)."""
    # Children use the Redis the supervisor resolved (the embedded one, say), not each their own.
    assert config.redis_url is not None
    swarm = Supervisor(count, child_arguments(argv), config.timeout, env={**os.environ, "REDIS_URL": config.redis_url},
                  hostname=config.hostname, on_death=recoverer(config, client))
    # probes: the supervisor answers for the fleet (`probes.fleet`); its children serve no port
    fleet = FleetWatch(config, swarm.ages)
    probes = ProbeServer(config, live=fleet.report.live, ready=fleet.ready) if config.health_port else None
    try:
        if probes is not None:
            probes.start()
    except ConfigError as exc:
        log.error("%s", exc)
        client.close()
        return 2
    pipe = SignalPipe()
    log.info("supervisor %d starting %d worker process(es)", os.getpid(), count)
    log_capsule_shares(config, count)
    swarm.start()
    deadline: float | None = None
    code = 0
    while deadline is None or not swarm.wait_stopped(deadline):
        for action in pipe.wait(0.2):
            if action == "stop":
                log.info("stopping all worker processes" if deadline is None else "stopping them now")
                swarm.begin_stop()
                deadline = deadline or swarm.clock() + config.timeout + 10.0
            elif action == "quiet":
                swarm.forward(signal.SIGTSTP)
            elif action == "dump":
                swarm.forward(signal.SIGTTIN)
        swarm.tend()
        fleet.judge()
        if deadline is None and (swarm.failing or swarm.config_error):
            if swarm.config_error:
                log.error("%s", swarm.config_error)
            else:
                log.error("worker processes failed at start %d times in a row; giving up. Last error: %s",
                          swarm.start_failures, swarm.last_error)
            swarm.begin_stop()
            deadline, code = swarm.clock() + config.timeout + 10.0, 2 if swarm.config_error else 1
    fleet.stop()
    if probes is not None:
        probes.stop()
    client.close()
    return code

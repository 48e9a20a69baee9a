"""A process's liveness, as it last judged it: kept in memory for its `GET /live`, and written
to a small file for `sidequest health --live`, which must answer without Redis and without a
port to ask.

Every worker process (and a supervisor, for its fleet) writes `<health_dir>/<pid>.json` each
time it judges itself (`LiveReport.record`), atomically (a temporary file renamed over it):

    {"pid": 4242, "identity": "jobs-1:4242:3c0a1b2e4f5a", "live": true, "ready": true,
     "reason": "...", "at": 1790000000.0, "stale_after": 2.0}

A reader trusts it while it is fresh (written within `stale_after` seconds) and its pid runs:
a process that is frozen (SIGSTOP, a debugger) or whose judging thread is stuck stops writing,
and the file goes stale. The file is removed at a clean stop. `health_dir` defaults to a folder
of the user's own under the temporary directory; a process that cannot write there logs it once
and keeps its port (`GET /live`) working.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidequest.config import Config
from sidequest.worker.probes.readiness import Health

log = logging.getLogger(__name__)


def folder(config: Config) -> Path:
    """Where this machine's worker processes write their liveness files."""
    if config.health_dir:
        return Path(config.health_dir)
    return Path(tempfile.gettempdir()) / f"sidequest-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


class LiveReport:
    """The last verdict of one process on itself: `record` it, `live()` reads it back (stale,
    it says so: the judge stopped judging)."""

    def __init__(self, config: Config, identity: str, stale_after: float,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.dir = folder(config)
        self.identity = identity
        self.stale_after = stale_after
        self.clock, self.wall = clock, wall
        self.path = self.dir / f"{os.getpid()}.json"
        self._last = (Health(False, "not judged yet"), False, -float("inf"))  # (live, ready, when): replaced whole
        self._lock = threading.Lock()  # one writer of the file at a time
        self._unwritable = False
        self._swept = False

    def record(self, live: Health, ready: bool) -> None:
        self._last = (live, ready, self.clock())
        state = {"pid": os.getpid(), "identity": self.identity, "live": live.ok, "ready": ready,
                 "reason": live.reason, "at": self.wall(), "stale_after": self.stale_after}
        with self._lock:
            try:
                self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                if hasattr(os, "getuid") and self.dir.stat().st_uid != os.getuid():  # not ours: another
                    raise PermissionError(errno.EPERM, "the folder belongs to another user")  # could forge it
                if not self._swept:  # files of processes killed (-9) before they could remove them
                    self._swept = True
                    sweep(self.dir)
                temporary = self.path.with_suffix(".tmp")
                temporary.write_text(json.dumps(state), encoding="utf-8")
                os.replace(temporary, self.path)
            except OSError as exc:
                if not self._unwritable:
                    log.warning("cannot write the liveness file %s (%s): `sidequest health --live` cannot see "
                                "this process; set health_dir to a writable folder, or probe --health-port",
                                self.path, exc.strerror)
                self._unwritable = True
            else:
                self._unwritable = False

    def live(self) -> Health:
        verdict, _, when = self._last
        age = self.clock() - when
        if age > self.stale_after:
            return Health(False, f"{self.identity}: its liveness was last judged {age:.1f} s ago")
        return verdict

    def ready(self) -> bool:
        return self._last[1] and self.live().ok

    def remove(self) -> None:
        """At a clean stop: remove the file, if it is still this one's (two launchers embedded in one
        process share a pid, hence a file: the last to judge wrote it)."""
        with self._lock:
            state = read(self.dir, os.getpid())
            if state is not None and state.get("identity") == self.identity:
                self.path.unlink(missing_ok=True)


def read(where: Path, pid: int) -> dict[str, Any] | None:
    """The liveness file of process `pid`, or None if it has none (or one that does not parse)."""
    try:
        data = json.loads((where / f"{pid}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def judge(config: Config, pids: list[int] | None = None, *, ready: bool = False,
          wall: Callable[[], float] = time.time) -> Health:
    """Each of `pids` (None: every process with a liveness file in `health_dir` that still
    runs, at least one) wrote its file within its `stale_after` and says it is live (with
    `ready`: also that it is registered and working)."""
    where = folder(config)
    if pids is None:
        pids = sorted(int(p.stem) for p in where.glob("*.json") if p.stem.isdigit() and running(int(p.stem)))
        if not pids:
            return Health(False, f"no worker process of this machine has a liveness file in {where} "
                                 "(not started, or another health_dir)")
    names = []
    for pid in pids:
        state = read(where, pid)
        if state is None:
            return Health(False, f"process {pid} has no liveness file in {where} (not started yet, "
                                 "or another health_dir)")
        name = str(state.get("identity") or pid)
        age = wall() - float(state.get("at", 0))
        if age > float(state.get("stale_after", 0)):
            return Health(False, f"{name} last said it was live {age:.1f} s ago (stuck or frozen)")
        if not state.get("live"):
            return Health(False, str(state.get("reason") or f"{name} is not live"))
        if ready and not state.get("ready"):
            return Health(False, f"{name} is not working yet (not registered in Redis, or stopping)")
        names.append(name)
    return Health(True, f"{len(names)} process{'es' if len(names) != 1 else ''} live: {', '.join(names)}")


def sweep(where: Path) -> None:
    """Remove the liveness files of processes that no longer run: a pid used again later by
    another process must not inherit a dead worker's file."""
    for path in where.glob("*.json"):
        if path.stem.isdigit() and not running(int(path.stem)):
            path.unlink(missing_ok=True)


def running(pid: int) -> bool:
    """Whether process `pid` exists (the pidfile's check too: `cli.pidfile`)."""
    if pid <= 0:  # not a process: kill() would address a group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True

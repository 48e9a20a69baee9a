"""`sidequest worker -P/--pidfile`: one live process per pidfile.

The worker (or the supervisor, under `--processes`) claims the file at start: it refuses, in
one line, while the file names a live process, and takes over a stale file left by a process
that died. It holds a lock on the file while it runs, so two workers started at the same moment
cannot both claim it, and at exit it removes the file only if the file still holds its own pid
(an operator or a newer process may have written another).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sidequest.cli.root import UserError
from sidequest.worker.probes.state import running as alive  # one check of a pid, the probes' too

CLAIM_ATTEMPTS = 3  # an owner that removes the file as we open it: open the new one


@contextlib.contextmanager
def pidfile(path: str | None) -> Iterator[None]:
    """Hold `path` (if given) for the duration of the block; UserError if a live process holds it."""
    if not path:
        yield
        return
    fd = claim(Path(path))
    try:
        yield
    finally:
        release(Path(path), fd)


def claim(path: Path) -> int:
    """Write our pid to `path`; return the descriptor that keeps it locked until `release`."""
    for _ in range(CLAIM_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the children we start
        except OSError as exc:
            raise UserError(f"-P/--pidfile {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a running worker holds it
            os.close(fd)
            raise taken(path, read_pid(path)) from None
        if same_file(fd, path):
            break
        os.close(fd)
    else:
        raise UserError(f"-P/--pidfile {path}: the file keeps being replaced; is another worker starting?")
    other = read_pid(path)
    if other is not None and other != os.getpid() and alive(other):  # written by a process that takes no lock
        os.close(fd)
        raise taken(path, other)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release(path: Path, fd: int) -> None:
    """Remove the file if it still holds our pid, then let go of the lock."""
    try:
        if read_pid(path) == os.getpid():
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def taken(path: Path, pid: int | None) -> UserError:
    who = f"process {pid}" if pid is not None else "another process"
    return UserError(f"-P/--pidfile {path}: {who} is running with this pidfile (another sidequest worker?); "
                     "stop it first, or give this worker another pidfile")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii", errors="replace").strip())
    except (OSError, ValueError):
        return None




def same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False

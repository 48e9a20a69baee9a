"""Driving one peer's command line (the contract in bench/peers/_peer.py): its client commands,
each a subprocess whose JSON line is the answer, and its worker, started with its output in a
log file under bench/results/logs/ so that a failure can be diagnosed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .install import peer_file
from .rows import PEERS_DIR, Row


class PhaseError(Exception):
    """A phase failed for one peer: recorded as n/a with this message, and the run goes on."""


def tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


@dataclass
class Peer:
    """A row's peer file run with the peer's interpreter, logging under `log_dir`."""

    row: Row
    python: str
    url: str
    log_dir: Path

    def env(self, total: int = 0) -> dict[str, str]:
        path = os.pathsep.join([*([self.row.src] if self.row.src else []), str(PEERS_DIR)])
        return {**os.environ, "PYTHONPATH": path, "BENCH_TOTAL": str(total), "REDIS_URL": self.url,
                **dict(self.row.env)}

    def argv(self, command: str, *extra: str) -> list[str]:
        return [self.python, str(peer_file(self.row.peer)), command, "--url", self.url, *extra]

    def log(self, name: str) -> Path:
        return self.log_dir / f"{self.row.id}-{name}.log"

    def run(self, command: str, *extra: str, name: str, timeout: float, total: int = 0) -> object:
        """Run one client command; return the JSON value it printed last."""
        log = self.log(name)
        with log.open("w") as err:
            try:
                done = subprocess.run(self.argv(command, *extra), cwd=PEERS_DIR, env=self.env(total),
                                      stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise PhaseError(f"`{command}` did not finish in {timeout:.0f} s\n{tail(log)}") from exc
        if done.returncode != 0:
            raise PhaseError(f"`{command}` exited with {done.returncode}\n{tail(log)}")
        for line in reversed(done.stdout.splitlines()):
            if line.strip().startswith(("{", "[")):
                return json.loads(line)
        raise PhaseError(f"`{command}` printed no JSON: {done.stdout[-300:]!r}\n{tail(log)}")

    def enqueue(self, mode: str, count: int, name: str, timeout: float) -> float:
        answer = self.run("enqueue", "--mode", mode, "--count", str(count), name=name, timeout=timeout)
        return float(answer["seconds"])  # type: ignore[index]

    def staged_keys(self, name: str) -> list[str]:
        return [str(key) for key in self.run("staged-keys", name=name, timeout=60)]  # type: ignore[attr-defined]

    def start_worker(self, total: int, name: str) -> subprocess.Popen[bytes]:
        """The worker, in a session of its own (so nothing of it outlives the harness's kill)."""
        argv = self.argv("worker", "--processes", str(self.row.processes),
                         "--concurrency", str(self.row.concurrency))
        with self.log(name).open("w") as out:
            out.write(f"$ {' '.join(argv)}\n# started {time.strftime('%H:%M:%S')}\n")
            out.flush()
            return subprocess.Popen(argv, cwd=PEERS_DIR, env=self.env(total), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

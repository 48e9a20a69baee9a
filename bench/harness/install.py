"""Getting each peer ready to run, and saying which versions ran.

A peer file's header says where it runs: `# requires: pkg>=x ...` (its own virtualenv at
bench/.venvs/<peer>, made with `python3 -m venv`, then `pip install -q` of those requirements;
a stamp file holds the requirement line, so it reinstalls only when the line changes), or
`# python: main` (sidequest's own .venv, i.e. this interpreter). Ruby Sidekiq comes from
Debian's ruby-sidekiq, installed with apt-get when missing and we are root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .rows import BENCH, PEERS_DIR

VENVS = BENCH / ".venvs"
STAMP = ".requires"


class Unavailable(Exception):
    """This peer cannot run here; the message says why (printed, and the run goes on)."""


def peer_file(peer: str) -> Path:
    return PEERS_DIR / f"{peer}_peer.py"


def header(peer: str) -> str | None:
    """'main', or the peer's requirement line; None when the file says neither."""
    path = peer_file(peer)
    if not path.is_file():
        raise Unavailable(f"{path.relative_to(BENCH.parent)} does not exist")
    for line in path.read_text().splitlines():  # the header sits above the code: its docstring may be long
        if line.startswith(("import ", "from ")):
            break
        if match := re.match(r"#\s*requires:\s*(.+)", line):
            return match.group(1).strip()
        if re.match(r"#\s*python:\s*main\b", line):
            return "main"
    return None


def requirement_names(line: str) -> list[str]:
    return [re.split(r"[\[<>=!~;@ ]", token, maxsplit=1)[0] for token in line.split()]


def peer_python(peer: str, skip_install: bool, log_dir: Path) -> str:
    """The interpreter that runs `peer`'s file, its virtualenv made or updated first."""
    line = header(peer)
    if line is None:
        raise Unavailable(f"{peer_file(peer).name} has neither '# requires:' nor '# python: main'")
    if line == "main":
        return sys.executable
    venv = VENVS / peer
    python = venv / "bin" / "python"
    stamp = venv / STAMP
    if python.exists() and stamp.exists() and stamp.read_text().strip() == line:
        return str(python)
    if skip_install:
        raise Unavailable(f"{venv} is missing or out of date and --skip-install was given")
    make_venv(peer, venv, line, log_dir / f"install-{peer}.log")
    stamp.write_text(line + "\n")
    return str(python)


def make_venv(peer: str, venv: Path, line: str, log: Path) -> None:
    print(f"  installing {peer}: {line}  (into {venv.relative_to(BENCH.parent)}, log {log.name})", flush=True)
    requirements = line.split()
    if "redis" not in [name.lower() for name in requirement_names(line)]:
        requirements.append("redis")  # every peer file imports redis-py (the jobs' INCR)
    base = shutil.which("python3") or sys.executable
    with log.open("w") as out:
        for argv in ([base, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *requirements]):
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise Unavailable(f"could not install {peer} ({' '.join(argv[:4])} ...): see {log}")


def ruby_sidekiq_present() -> bool:
    return bool(shutil.which("ruby")) and shutil.which("sidekiq") is not None and subprocess.run(
        ["ruby", "-e", "require 'sidekiq'"], capture_output=True).returncode == 0


def ensure_sidekiq(skip_install: bool, log_dir: Path) -> None:
    """Ruby Sidekiq from Debian's ruby-sidekiq, installed when missing (root only)."""
    if ruby_sidekiq_present():
        return
    if skip_install or os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("Ruby Sidekiq is not installed (as root: apt-get install ruby-sidekiq)")
    log = log_dir / "install-sidekiq.log"
    print(f"  installing Ruby Sidekiq: apt-get install -y ruby-sidekiq  (log {log.name})", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("w") as out:
        for argv in (["apt-get", "install", "-y", "ruby-sidekiq"], ["apt-get", "update"],
                     ["apt-get", "install", "-y", "ruby-sidekiq"]):
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
            if argv[1] == "install" and ruby_sidekiq_present():
                return
    raise Unavailable(f"apt-get could not install ruby-sidekiq: see {log}")


def versions(peer: str, python: str) -> dict[str, str]:
    """The versions of what a peer runs: its requirements' distributions (or sidequest, or Ruby's)."""
    if peer == "sidekiq":
        return ruby_versions()
    line = header(peer)
    names = ["sidequest", "redis"] if line == "main" else [*requirement_names(line or ""), "redis"]
    code = ("import importlib.metadata as m, json, sys\n"
            "def v(n):\n    try:\n        return m.version(n)\n"
            "    except m.PackageNotFoundError:\n        return None\n"
            "print(json.dumps({n: v(n) for n in sys.argv[1:]}))")
    out = subprocess.run([python, "-c", code, *dict.fromkeys(names)], capture_output=True, text=True)
    try:
        found: dict[str, str] = json.loads(out.stdout)
    except ValueError:
        return {"error": out.stderr.strip()[-200:]}
    found["python"] = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                                     capture_output=True, text=True).stdout.strip()
    return {name: value for name, value in found.items() if value}


def ruby_versions() -> dict[str, str]:
    code = 'require "sidekiq"; require "redis"; print [Sidekiq::VERSION, Redis::VERSION, RUBY_VERSION].join(" ")'
    out = subprocess.run(["ruby", "-e", code], capture_output=True, text=True).stdout.split()
    if len(out) != 3:
        return {}
    yjit = subprocess.run(["ruby", "--yjit", "-e", "print RubyVM::YJIT.enabled?"], capture_output=True, text=True)
    return {"sidekiq": out[0], "redis-rb": out[1], "ruby": out[2], "yjit": yjit.stdout.strip() or "unavailable"}

"""A baseline version of sidequest measured in the same run (`--baseline REF`).

REF is checked out, detached, into a git worktree at bench/.baseline/<short sha> (ignored by git;
reused by later runs). Its rows run the same peer file with the checkout's `src` first on
PYTHONPATH, ahead of the working tree's editable install (a .pth line, which Python puts after
PYTHONPATH), so both the client commands and the worker import the baseline's sidequest. The
harness checks that before the rounds (`imported_from`), and the peer file logs which sidequest
each worker process imported (phases.py reads it back)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .rows import BENCH

REPO = BENCH.parent
BASELINES = BENCH / ".baseline"


@dataclass(frozen=True)
class Baseline:
    ref: str
    sha: str
    short: str
    path: Path

    @property
    def src(self) -> Path:
        return self.path / "src"


def git(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def checkout(ref: str) -> Baseline:
    """The worktree of `ref` under bench/.baseline/, made unless it is there already."""
    found = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode != 0:
        raise SystemExit(f"--baseline {ref}: not a commit of this repository (try a hash or a branch name)")
    sha = found.stdout.strip()
    short = git("rev-parse", "--short", sha).stdout.strip()
    path = BASELINES / short
    if path.exists():
        head = git("rev-parse", "HEAD", cwd=path)
        if head.returncode == 0 and head.stdout.strip() == sha and (path / "src" / "sidequest").is_dir():
            return Baseline(ref, sha, short, path)
        raise SystemExit(f"{path.relative_to(REPO)} is not a checkout of {sha}: remove it "
                         f"(git worktree remove --force {path.relative_to(REPO)}) and run again")
    BASELINES.mkdir(parents=True, exist_ok=True)
    # -f: also when git still lists a worktree at that path whose directory was deleted
    made = git("worktree", "add", "-f", "--detach", str(path), sha)
    if made.returncode != 0:
        raise SystemExit(f"could not check out {ref} into {path.relative_to(REPO)}: {made.stderr.strip()}")
    print(f"  baseline {ref} = {short}: checked out into {path.relative_to(REPO)}", flush=True)
    return Baseline(ref, sha, short, path)


def imported_from(python: str, env: dict[str, str]) -> dict[str, str]:
    """Which sidequest `python` imports with `env`: its version and directory."""
    code = ("import json, os, platform, redis, sidequest\n"
            "print(json.dumps({'sidequest': sidequest.__version__, 'redis': redis.__version__,\n"
            "                  'python': platform.python_version(), 'from': os.path.dirname(sidequest.__file__)}))")
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    try:
        found: dict[str, str] = json.loads(out.stdout)
    except ValueError:
        return {"error": (out.stderr.strip() or "no output")[-300:]}
    return found


def is_under(path: str, src: str) -> bool:
    return Path(path).resolve().is_relative_to(Path(src).resolve())

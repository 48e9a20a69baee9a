"""The Celery guide (issue 30 item 1): docs/coming-from-celery.md and its worked port in
examples/celery_port/. The port, run against a real worker, prints what real Celery printed for the
same work (expected.txt, made once with Celery in eager mode: see examples/celery_port/README.md);
the page shows the example's files as they are, and its other snippets run as written.
The suite never imports Celery: celery_app.py and run_celery.py are only read here."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from conftest import PYTHON, ROOT, STARTUP, python_env

EXAMPLE = ROOT / "examples" / "celery_port"
DOC = ROOT / "docs" / "coming-from-celery.md"
EXPECTED = (EXAMPLE / "expected.txt").read_text(encoding="utf-8")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def snippets(tmp_path: Path) -> dict[str, str]:
    """The page's snippets that are not quotes of the example (`# name.py` first), written to tmp_path."""
    named = {}
    for block in python_blocks():
        first = block.splitlines()[0]
        if "examples/celery_port/" in first:
            continue
        name = re.match(r"# (\w+\.py) ", first)
        assert name, f"a snippet of the page names no file on its first line: {first!r}"
        named[name[1]] = block
        (tmp_path / name[1]).write_text(block, encoding="utf-8")
    return named


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run a reader's command: it succeeds, and says nothing on stderr (no warning either)."""
    done = subprocess.run([PYTHON, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=4 * STARTUP)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout


def snippet_env(tmp_path: Path, redis_url: str, **extra: str) -> dict[str, str]:
    """The snippets next to the example's modules, as a reader has them; Celery's broker is the
    test's Redis (nothing of Celery runs: its keys are written by the test)."""
    env = python_env(REDIS_URL=redis_url, CELERY_BROKER_URL=redis_url, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(EXAMPLE), env["PYTHONPATH"]])
    return env


def test_the_port_prints_what_celery_printed(redis_url):
    """The Done-means of item 1: the ported example, pushed to a real worker (run_sidequest.py),
    prints the lines Celery 5 printed for the same inputs: keyword arguments, a bound task's retry
    and its own id, autoretry_for, Celery's argument order in a chain and a chord, a group's
    results, a beat entry's job and its next runs."""
    out = run(["run_sidequest.py"], EXAMPLE, python_env(REDIS_URL=redis_url))
    assert out.splitlines() == EXPECTED.splitlines()
    assert out == EXPECTED


def code_lines(name: str) -> list[str]:
    """The example file's lines without their comments, stripped."""
    return [line.split("  #")[0].strip() for line in (EXAMPLE / name).read_text(encoding="utf-8").splitlines()]


def test_the_ports_canvas_and_priority_are_written_as_celerys():
    """Issue 37 item 7: `a.s() | b.s()`, a chain called, a group `|` a task and
    `apply_async(..., priority=9)` failed (TypeError, not callable) though the page says a canvas
    is written the same. The port's lines are now Celery's, character for character, and the run
    above prints Celery's output with them."""
    celery, port = code_lines("run_celery.py"), code_lines("run_sidequest.py")
    for shape in ('(price.s("B-2") | discount.s(50))()', '| total.s("basket 8")', "priority=9)"):
        [line] = [line for line in celery if shape in line]
        assert line in port, f"the port writes {shape} otherwise than Celery: {line}"
    assert any('price.s("C-3", 2).delay()' in line for line in port)  # a signature's delay: its jid


def test_the_page_shows_the_example_as_it_is():
    """Whole files are the files; an excerpt (`# from examples/celery_port/x.py`) is found in
    its file as written; the output shown is expected.txt."""
    wholes, excerpts = set(), 0
    for block in python_blocks():
        first, _, body = block.partition("\n")
        whole = re.fullmatch(r"# examples/celery_port/(\w+\.py)", first)
        part = re.fullmatch(r"# from examples/celery_port/(\w+\.py)", first)
        if whole:
            assert body == (EXAMPLE / whole[1]).read_text(encoding="utf-8"), f"the page's {whole[1]} is not the file"
            wholes.add(whole[1])
        elif part:
            assert body in (EXAMPLE / part[1]).read_text(encoding="utf-8"), f"not in {part[1]}:\n{body}"
            excerpts += 1
    assert wholes == {"celery_app.py"} and excerpts >= 12
    assert f"```\n{EXPECTED}```" in DOC.read_text(encoding="utf-8")


def test_the_snippets_are_the_ones_tested_here(tmp_path):
    assert set(snippets(tmp_path)) == {"test_shop.py", "switch.py", "drained.py", "sidequest_left.py"}


def test_the_pages_test_of_the_port_passes(tmp_path, redis_url):
    snippets(tmp_path)
    out = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shop.py"], tmp_path,
              snippet_env(tmp_path, redis_url))
    assert "1 passed" in out


def test_the_switch_pushes_a_moved_job_to_sidequest_with_its_keywords(tmp_path, redis_url, r):
    snippets(tmp_path)
    env = snippet_env(tmp_path, redis_url, MOVED_TO_SIDEQUEST="send_email charge")
    jid = run(["-c", "import switch; print(switch.delay('send_email', 42, template='reset'))"], tmp_path, env)
    [payload] = [json.loads(raw) for raw in r.lrange("queue:emails", 0, -1)]
    assert (payload["jid"], payload["class"]) == (jid.strip(), "shop.send_email")
    assert (payload["args"], payload["kwargs"]) == ([42], {"template": "reset"})


def test_the_drain_checks_see_what_is_left_on_each_side(tmp_path, redis_url, r):
    snippets(tmp_path)
    env = snippet_env(tmp_path, redis_url)
    assert run(["drained.py"], tmp_path, env) == "waiting=0 unacked=0 drained\n"
    assert run(["sidequest_left.py"], tmp_path, env) == "waiting=0 later=0 running=0 empty\n"
    # what kombu's Redis transport writes: a message at priority 6 in its own list, a taken one in `unacked`
    r.rpush("shop\x06\x166", json.dumps({"body": "..."}))
    r.hset("unacked", "a-delivery-tag", json.dumps([{"body": "..."}, "", "shop"]))
    assert run(["drained.py"], tmp_path, env) == "waiting=1 unacked=1 not yet\n"
    # sidequest's side: a job in a queue of the port, one scheduled; another project's job is not counted
    code = ("import sidequest\n"
            "sidequest.push('shop.send_email', [1], queue='emails')\n"
            "sidequest.push('shop.send_email', [2], queue='emails', in_=3600)\n"
            "sidequest.push('OtherApp', [3], queue='elsewhere', in_=3600)\n")
    run(["-c", code], tmp_path, env)
    assert run(["sidequest_left.py"], tmp_path, env) == "waiting=1 later=1 running=0 not yet\n"

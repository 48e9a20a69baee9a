"""Capsules (Sidekiq 7's): groups of threads in one worker process, each with its own queues,
concurrency and batch fetch. Real `sidequest worker` subprocesses on a real Redis: a serial
capsule never overlaps its jobs while the default one does, each takes only its own queues,
kill -9 and a clean stop keep every capsule's jobs, and the heartbeat shows the capsules the way
Sidekiq 7 writes them, which real Ruby Sidekiq 6.4's ProcessSet still reads.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import wait_until
from helpers import ran
from jobs_for_tests import capsule_span
from ruby_peer import ruby_api
from scenarios.test_reliability import procs  # noqa: F401  (the fixture)
from starlette.testclient import TestClient

from sidequest import Config
from sidequest.cli import main
from sidequest.config import Capsule
from sidequest.errors import ConfigError
from sidequest.web import create_app

YAML = """\
:concurrency: 10
:queues: [default]
:capsules:
  :serial:
    :queues: [ledger]
    :concurrency: 1
"""


@pytest.fixture
def config_file(tmp_path: Path) -> str:
    path = tmp_path / "sidekiq.yml"
    path.write_text(YAML)
    return str(path)


def push(client, queue: str, numbers: range, seconds: float) -> None:
    capsule_span.set(queue=queue, client=client).perform_bulk([[n, queue, seconds] for n in numbers])


def spans(r) -> dict[int, tuple[str, float, float]]:
    return {n: (queue, start, end) for n, queue, _, start, end in ran(r, "span")}


def overlaps(intervals: list[tuple[float, float]]) -> bool:
    ordered = sorted(intervals)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ordered))


def batch_queues(r, identity: str) -> dict[str, set[str]]:
    """The queues of the jobs each capsule's batch list holds now."""
    found: dict[str, set[str]] = {}
    for name, key in (("default", f"sidequest:reserved:{identity}:batch"),
                      ("serial", f"sidequest:reserved:{identity}:batch-serial")):
        found[name] = {json.loads(raw)["queue"] for raw in r.lrange(key, 0, -1)}
    return found


def test_a_serial_capsule_runs_one_job_at_a_time_beside_a_parallel_default(procs, r, client, config_file,  # noqa: F811
                                                                            redis_url, ruby):
    worker = procs("-C", config_file)
    identity = worker.wait_registered(r)
    push(client, "ledger", range(0, 6), 0.3)
    push(client, "default", range(100, 110), 0.6)
    capsule_span.set(queue="elsewhere", client=client).perform_async(999, "elsewhere", 0)  # in no capsule
    seen: dict[str, set[str]] = {"default": set(), "serial": set()}

    def done() -> bool:
        for name, queues in batch_queues(r, identity).items():
            seen[name] |= queues
        return len(spans(r)) >= 16

    wait_until(done, 60, 0.01, "every capsule's jobs to run")
    got = spans(r)
    ledger = [(start, end) for queue, start, end in got.values() if queue == "ledger"]
    default = [(start, end) for queue, start, end in got.values() if queue == "default"]
    assert len(ledger) == 6 and len(default) == 10
    assert not overlaps(ledger), f"the serial capsule ran two jobs at once: {sorted(ledger)}"
    assert overlaps(default), "the default capsule (10 threads) ran its jobs one by one"
    assert seen["serial"] <= {"ledger"} and seen["default"] <= {"default"}, seen
    assert 999 not in got and r.llen("queue:elsewhere") == 1  # a queue of no capsule is never taken

    info = json.loads(r.hget(identity, "info"))
    assert info["capsules"] == {
        "default": {"concurrency": 10, "mode": "strict", "weights": {"default": 0}},
        "serial": {"concurrency": 1, "mode": "strict", "weights": {"ledger": 0}},
    }
    assert info["concurrency"] == 11 and int(r.hget(identity, "concurrency")) == 11
    assert info["queues"] == ["default", "ledger"]
    assert info["weights"] == [{"default": 0}, {"ledger": 0}]
    [theirs] = [p for p in ruby_api(redis_url)["processes"] if p["identity"] == identity]
    assert theirs["queues"] == ["default", "ledger"] and theirs["concurrency"] == 11

    from sidequest.api import ProcessSet
    [ours] = [p for p in ProcessSet(client) if p.identity == identity]
    assert ours.capsules["serial"] == {"concurrency": 1, "mode": "strict", "weights": {"ledger": 0}}
    assert ours.weights == [{"default": 0}, {"ledger": 0}]
    page = TestClient(create_app(client)).get("/busy").text
    assert "serial (1):" in page and "default (10):" in page
    listed = CliRunner().invoke(main, ["processes", "--redis-url", redis_url])
    assert listed.exit_code == 0, listed.output
    assert "default 10 threads (strict: default); serial 1 thread (strict: ledger)" in listed.output
    as_json = json.loads(CliRunner().invoke(main, ["processes", "--json", "--redis-url", redis_url]).output)
    [shown] = [p for p in as_json["processes"] if p["identity"] == identity]
    assert shown["capsules"]["serial"]["weights"] == {"ledger": 0}
    assert worker.stop() == 0


def test_kill_9_with_jobs_in_flight_in_both_capsules_loses_nothing(procs, r, client, config_file):  # noqa: F811
    first = procs("-C", config_file)
    first.wait_registered(r)
    push(client, "ledger", range(0, 3), 3.0)
    push(client, "default", range(100, 105), 3.0)
    wait_until(lambda: len(ran(r, "span-start")) >= 6, 60, 0.02, "jobs of both capsules to start")
    started = {n for n, _ in ran(r, "span-start")}
    assert len(started & {0, 1, 2}) == 1 and started >= set(range(100, 105))
    first.sigkill()
    second = procs("-C", config_file)
    second.wait_registered(r)
    wait_until(lambda: set(spans(r)) >= {0, 1, 2, *range(100, 105)}, 90, 0.05,
               "the second worker to recover and run every job")
    assert r.llen("queue:ledger") == 0 and r.llen("queue:default") == 0
    assert second.stop() == 0


def test_a_clean_stop_puts_both_capsules_jobs_back(procs, r, client, config_file):  # noqa: F811
    worker = procs("-C", config_file, "-t", "1")
    identity = worker.wait_registered(r)
    push(client, "ledger", range(0, 3), 30.0)
    push(client, "default", range(100, 104), 30.0)
    wait_until(lambda: len(ran(r, "span-start")) >= 5, 60, 0.02, "jobs of both capsules to start")
    assert worker.stop() == 0
    assert r.llen("queue:ledger") == 3 and r.llen("queue:default") == 4
    assert not r.keys(f"sidequest:reserved:{identity}:*")
    assert not {m.decode() for m in r.smembers("sidequest:reservations")} & {
        f"sidequest:reserved:{identity}:batch", f"sidequest:reserved:{identity}:batch-serial"}


def test_capsules_in_code_run_and_show_weighted_modes(start, r, client):
    launcher = start(queues=("default",), concurrency=2,
                     capsules=(Capsule("bulk", queues=["a,2", "b,1"], concurrency=3),
                               Capsule("even", queues=[("c", 1), ("d", 1)])))
    wait_until(lambda: r.exists(launcher.identity), 30, 0.02, "the heartbeat")
    info = json.loads(r.hget(launcher.identity, "info"))
    assert info["capsules"]["bulk"] == {"concurrency": 3, "mode": "weighted", "weights": {"a": 2, "b": 1}}
    assert info["capsules"]["even"] == {"concurrency": 1, "mode": "random", "weights": {"c": 1, "d": 1}}
    assert info["concurrency"] == 6 and info["queues"] == ["default", "a", "b", "c", "d"]
    for queue, n in (("a", 1), ("c", 2), ("default", 3)):
        capsule_span.set(queue=queue, client=client).perform_async(n, queue, 0)
    wait_until(lambda: set(spans(r)) == {1, 2, 3}, 30, 0.02, "each capsule's job to run")


def test_the_yaml_capsules_forms(tmp_path):
    plain = tmp_path / "plain.yml"
    plain.write_text("capsules:\n  serial:\n    queues: ['ledger,1', 'audit,2']\n    concurrency: 2\n")
    assert Config.from_file(plain).capsules == (Capsule("serial", [("ledger", 1), ("audit", 2)], 2),)
    # a single queue as a string, and concurrency 1 by default
    short = tmp_path / "short.yml"
    short.write_text(":capsules:\n  :serial:\n    :queues: ledger\n")
    assert Config.from_file(short).capsules == (Capsule("serial", ["ledger"], 1),)
    assert Config.from_file(short).total_concurrency == 11


@pytest.mark.parametrize(("text", "error"), [
    ("capsules: [serial]\n", "capsules must be a mapping"),
    ("capsules:\n  serial: 1\n", "capsule 'serial' must be a mapping"),
    ("capsules:\n  serial:\n    concurrency: 1\n", "capsule 'serial': queues: is required"),
    ("capsules:\n  serial:\n    queues: [a]\n    threads: 1\n", "unknown key(s) threads"),
    ("capsules:\n  serial:\n    queues: [a]\n    concurrency: 0\n", "capsule 'serial': concurrency must be"),
    ("capsules:\n  serial:\n    queues: []\n", "queues must be a non-empty list"),
    ("capsules:\n  default:\n    queues: [a]\n", "capsule 'default' is the process's own"),
    ("capsules:\n  'a b':\n    queues: [a]\n", "must be letters, digits"),
    ("capsules:\n  serial:\n    queues: [default]\n", "queue 'default' is in capsules 'default' and 'serial'"),
    ("capsules:\n  x:\n    queues: [a]\n  y:\n    queues: [a]\n", "queue 'a' is in capsules 'x' and 'y'"),
    ("capsules:\n  x:\n    queues: ['a,2', b]\n", "capsule 'x': give every queue a weight"),
])
def test_config_file_mistakes_are_one_line_errors(tmp_path, text, error):
    path = tmp_path / "bad.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        Config.from_file(path)
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_code_mistakes_are_errors():
    with pytest.raises(ConfigError, match="capsule 'x' is given twice"):
        Config(capsules=(Capsule("x", ["a"]), Capsule("x", ["b"])))
    with pytest.raises(ConfigError, match=r"capsules must be a tuple of sidequest\.Capsule"):
        Config(capsules=("serial",))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="queues must be a non-empty list"):
        Capsule("x", "ledger")
    assert Config(capsules={"x": {"queues": ["a"]}}).capsules == (Capsule("x", ["a"]),)  # type: ignore[arg-type]

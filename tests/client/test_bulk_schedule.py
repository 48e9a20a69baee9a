"""A bulk push spread over an interval (`perform_bulk(..., spread=...)`, Sidekiq 8's
`spread_interval`): even times within the interval, the same single MULTI as any bulk push, and
a real worker runs each job no earlier than its time."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until
from helpers import ran
from jobs_for_tests import bulk_at
from scenarios.test_reliability import procs  # noqa: F401  (the fixture)

from sidequest import Client, Config, JobArgumentError

NOW = 1_900_000_000.0  # a fixed clock: the times below are exact


def schedule(r) -> list[tuple[int, float]]:
    """(first argument, score) of every scheduled job, by score."""
    return sorted(((json.loads(raw)["args"][0], score) for raw, score in r.zrange("schedule", 0, -1, withscores=True)),
                  key=lambda item: item[1])


def test_spread_times_are_even_and_within_the_interval(config, r):
    client = Client(config, clock=lambda: NOW)
    jids = bulk_at.set(client=client).perform_bulk([[n] for n in range(10)], at=NOW + 100,
                                                   spread=timedelta(seconds=50))
    assert len(set(jids)) == 10
    assert schedule(r) == [(n, NOW + 100 + 5 * n) for n in range(10)]


def test_without_at_the_spread_starts_now_and_the_first_job_is_enqueued(config, r):
    client = Client(config, clock=lambda: NOW)
    bulk_at.set(client=client).perform_bulk([[n] for n in range(4)], spread=8)  # seconds, as Sidekiq's
    assert r.llen("queue:default") == 1  # its time is now: enqueued, as perform_at(now) is
    assert schedule(r) == [(1, NOW + 2), (2, NOW + 4), (3, NOW + 6)]


def test_a_datetime_start_and_the_asyncio_api(config, r):
    client = Client(config, clock=lambda: NOW)
    start = datetime.fromtimestamp(NOW + 60, UTC)

    async def produce() -> list[str | None]:
        return await bulk_at.set(client=client).aio.perform_bulk([[n] for n in range(3)], at=start,
                                                                 spread=timedelta(minutes=3))

    assert len(asyncio.run(produce())) == 3
    assert schedule(r) == [(0, NOW + 60), (1, NOW + 120), (2, NOW + 180)]


def commands_of(r, push) -> int:
    """Commands Redis ran for `push()` (the first INFO is counted by the second: taken off)."""
    before = r.info("stats")["total_commands_processed"]
    push()
    return r.info("stats")["total_commands_processed"] - before - 1


def test_a_spread_bulk_push_costs_what_a_bulk_push_costs(config, r):
    client = Client(config, clock=lambda: NOW)
    jobs = bulk_at.set(client=client)
    jobs.perform_bulk([[0]], at=NOW + 10)  # connections made, scripts loaded
    plain = commands_of(r, lambda: jobs.perform_bulk([[n] for n in range(500)], at=NOW + 10))
    spread = commands_of(r, lambda: jobs.perform_bulk([[n] for n in range(500)], at=NOW + 10,
                                                      spread=timedelta(hours=1)))
    small = commands_of(r, lambda: jobs.perform_bulk([[n] for n in range(5)], at=NOW + 10, spread=60))
    assert 3 <= spread == plain == small <= 4, (plain, spread, small)  # MULTI, ZADD, EXEC (and no per-job command)
    assert r.zcard("schedule") == 1006


@pytest.mark.parametrize(("spread", "at", "error"), [
    (timedelta(seconds=-1), None, "spread must be a duration of 0 or more"),
    (-5, None, "spread must be a duration of 0 or more"),
    (float("inf"), None, "spread must be a duration of 0 or more"),
    ("10m", None, "spread takes a timedelta or a number of seconds, got str"),
    (True, None, "spread takes a timedelta or a number of seconds, got bool"),
    (60, [NOW + 1, NOW + 2], "either a list of times or spread, not both"),
])
def test_a_bad_spread_is_one_clear_error(config, r, spread, at, error):
    client = Client(config, clock=lambda: NOW)
    with pytest.raises(JobArgumentError, match=error):
        client.push_bulk(bulk_at, [[1], [2]], at=at, spread=spread)
    assert r.dbsize() == 0


def test_a_worker_runs_each_job_at_its_time(procs, r, client):  # noqa: F811
    worker = procs()
    worker.wait_registered(r)
    start = client.clock() + 1.0
    bulk_at.set(client=client).perform_bulk([[n] for n in range(5)], at=start, spread=timedelta(seconds=4))
    wait_until(lambda: len(ran(r, "bulk-at")) == 5, 60, 0.05, "the five spread jobs to run")
    for n, at in ran(r, "bulk-at"):
        due = start + 0.8 * n
        assert at >= due - 0.01, f"job {n} ran {due - at:.3f} s before its time"
        assert at < due + 15, f"job {n} ran {at - due:.1f} s after its time"
    order = [n for n, _ in sorted(ran(r, "bulk-at"), key=lambda item: item[1])]
    assert order == [0, 1, 2, 3, 4]
    assert worker.stop() == 0


# -- the docs: docs/scheduling.md's "Spreading a bulk push" and docs/configuration.md's "Capsules"



def doc_section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_the_spread_docs_example_runs(tmp_path, redis_url, r):
    [block] = blocks(doc_section("scheduling.md", "## Spreading a bulk push"), "python")
    (tmp_path / "reminders.py").write_text(block, encoding="utf-8")
    done = subprocess.run([PYTHON, "reminders.py"], cwd=tmp_path, env=python_env(REDIS_URL=redis_url),
                          capture_output=True, text=True, timeout=2 * STARTUP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "10000 reminders, one every 0.36 seconds"
    assert r.llen("queue:reminders") == 1 and r.zcard("schedule") == 9999
    scores = [score for _, score in r.zrange("schedule", 0, -1, withscores=True)]
    assert all(abs(b - a - 0.36) < 1e-6 for a, b in itertools.pairwise(scores))


def test_the_capsules_docs_examples_run(tmp_path, redis_url, r):
    section = doc_section("configuration.md", "## Capsules")
    [yaml_block] = blocks(section, "yaml")
    [python_block] = blocks(section, "python")
    (tmp_path / "sidekiq.yml").write_text(yaml_block, encoding="utf-8")
    from_file = Config.from_file(tmp_path / "sidekiq.yml")
    namespace: dict[str, object] = {}
    exec(compile(python_block, "capsules-in-code", "exec"), namespace)
    in_code = namespace["config"]
    assert isinstance(in_code, Config)
    assert in_code.capsules == from_file.capsules and in_code.total_concurrency == 15
    assert [c.name for c in from_file.capsules] == ["serial", "imports"]
    # the file starts a real worker whose heartbeat shows the capsules
    worker = subprocess.Popen([PYTHON, "-m", "sidequest.cli", "worker", "-C", "sidekiq.yml", "-r", "jobs_for_tests"],
                              cwd=tmp_path, env=python_env(REDIS_URL=redis_url, SQ_TEST_REDIS_URL=redis_url),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        identity = wait_until(lambda: next((m.decode() for m in r.smembers("processes")), None), 2 * STARTUP,
                              0.05, "the worker to register")
        info = json.loads(r.hget(identity, "info"))
        assert set(info["capsules"]) == {"default", "serial", "imports"}
        assert info["capsules"]["imports"]["mode"] == "weighted" and info["concurrency"] == 15
    finally:
        worker.terminate()
        assert worker.wait(30) == 0


USER_CODE = '''\
from datetime import timedelta

import sidequest


@sidequest.job(name="Tick")
def tick(n: int) -> None: ...


async def produce() -> None:
    await tick.aio.perform_bulk([[1]], spread=timedelta(minutes=5))
    await tick.aio.perform_bulk([[1]], spread="5m")  # error


tick.perform_bulk([[1], [2]], spread=timedelta(hours=1))
tick.perform_bulk([[1], [2]], at=1_900_000_000.0, spread=3600)
tick.set(queue="q").perform_bulk([[1]], spread=1.5)
tick.perform_bulk([[1]], spread="1h")  # error
tick.set(queue="q").perform_bulk([[1]], spred=60)  # error
'''


def test_users_mypy_sees_the_spread_argument(tmp_path):
    (tmp_path / "user_spread.py").write_text(USER_CODE, encoding="utf-8")
    result = subprocess.run([PYTHON, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
                             "--cache-dir", str(tmp_path / ".mypy_cache"), "user_spread.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    reported = {int(m.group(1)) for m in re.finditer(r"user_spread\.py:(\d+): error", result.stdout)}
    expected = {i for i, line in enumerate(USER_CODE.splitlines(), 1) if line.endswith("# error")}
    assert reported == expected, result.stdout

"""Past one machine: worker processes on many hosts (simulated with SIDEQUEST_HOSTNAME) share
one Redis. Each has an identity of its own, takes its share of the work, and a host that dies
has its jobs recovered by the others; nothing is lost. docs/performance.md gives the numbers."""

from __future__ import annotations

import signal
from collections import Counter

from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import work

from scenarios.test_reliability import done_set, no_reserved_left, procs, runs  # noqa: F401 (fixture)


def test_workers_on_four_hosts_share_one_redis_and_a_dead_host_loses_nothing(procs, r, client):  # noqa: F811
    hosts = ["web-1", "web-2", "jobs-1", "jobs-2"]
    total = 1200
    workers = {host: procs("-c", "5", env={"SIDEQUEST_HOSTNAME": host}) for host in hosts}
    identities = {host: worker.wait_registered(r) for host, worker in workers.items()}
    # pushed once every host is up: on a loaded machine one start can take many seconds, in
    # which the hosts already up would run everything
    client.push_bulk(work, [[n, 0.005] for n in range(total)])
    assert {ident.split(":")[0] for ident in identities.values()} == set(hosts)  # one identity per host
    for host, ident in identities.items():  # the heartbeat hash names the host, as Sidekiq's UI shows it
        assert f'"hostname":"{host}"'.encode() in r.hget(ident, "info")

    victim = workers["web-2"]
    wait_until(lambda: any(pid == victim.pid for n, pid in _done(r)), 30, 0.05, "web-2 to finish a job")
    victim.signal(signal.SIGSTOP)  # frozen: what it holds now is what the kill leaves behind
    held = len(reserved(r, identities["web-2"]))
    victim.sigkill()  # the host dies with its jobs in hand (about five, under way or handed over)

    wait_until(lambda: len(done_set(r)) == total, 90, 0.25, f"all {total} jobs to be done")
    wait_until(lambda: no_reserved_left(r), 30, 0.1, "the dead host's jobs to be recovered")
    seen = runs(r)
    assert sorted(seen) == list(range(total))  # nothing lost
    by_pid = Counter(pid for _, pid in _done(r))
    for host in ("web-1", "jobs-1", "jobs-2"):
        assert by_pid[workers[host].pid] > 0, f"{host} took no share of the work"
    again = sum(len(v["start"]) - 1 for v in seen.values())
    assert again <= held, f"{again} jobs ran twice; the dead host held {held}"
    assert r.llen("queue:default") == 0 and r.zcard("dead") == 0


def _done(r) -> list[tuple[int, int]]:
    return [(n, pid) for n, pid in ran(r, "work-done")]

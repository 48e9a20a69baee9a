"""The per-job metrics feature (`job_metrics`): counted in memory by the worker, written with the
heartbeat, read per window."""

from conftest import wait_until
from helpers import ran, waited_for_minutes
from jobs_for_tests import FastBoom, work

from sidequest.features import job_metrics
from sidequest.features.job_metrics import BUCKETS, JobMetricsFeature, minute_of, read, read_latency
from sidequest.worker.outcome import Outcome


def test_runs_failures_and_run_times_per_job_name(start, client, r):
    start()
    client.push_bulk(work, [[n, 0.03] for n in range(10)])
    client.push(FastBoom, ["metrics"])  # retry=2, fast: three failed runs, then dead
    wait_until(lambda: r.zcard("dead") == 1 and len(ran(r, "work-done")) == 10)
    found = wait_until(lambda: (m := read(r, minutes=5)).get("Work") and m["Work"].runs == 10
                       and m.get("FastBoom") and m["FastBoom"].runs == 3 and m, message="metrics flushed")
    work_metrics, boom = found["Work"], found["FastBoom"]
    assert work_metrics.failed == 0 and 300 <= work_metrics.total_ms <= 30_000  # in ms: not s, not µs
    # 30 ms each: the 20-50 ms bucket, or a later one when a loaded machine wakes the job late;
    # never an earlier one (the exact mapping of times to buckets is tested just below)
    assert sum(work_metrics.histogram[:BUCKETS.index(50)]) == 0, work_metrics.histogram
    assert 50 <= work_metrics.percentile(0.5) <= work_metrics.percentile(0.99)
    assert boom.failed == 3 and boom.failure_rate == 1.0
    assert sum(work_metrics.per_minute[m][0] for m in work_metrics.per_minute) == 10
    minutes = list(r.scan_iter("sidequest:metrics:*"))  # two when the runs straddle a minute's end
    assert minutes and all(0 < r.ttl(key) <= job_metrics.RETENTION for key in minutes)


def test_a_window_reads_only_its_minutes(r):
    feature = JobMetricsFeature(clock=lambda: 1_800_000_000.0)
    from sidequest.worker.outcome import Outcome
    for elapsed in (0.001, 0.004, 0.2, 3.0):
        feature.observe("finished", {"class": "J"}, Outcome.done(elapsed))
    feature.observe("retried", {"class": "J"}, Outcome("retry", elapsed=0.01))
    pipe = r.pipeline()
    JobMetricsFeature.write(pipe, feature.take())
    pipe.execute()
    [j] = read(r, minutes=2, now=1_800_000_030.0).values()
    assert (j.runs, j.failed) == (5, 1) and j.histogram[BUCKETS.index(5)] == 1 and j.percentile(1.0) == 5000
    assert read(r, minutes=2, now=1_800_000_000.0 + 3 * 3600) == {}


def test_each_queues_wait_is_kept_in_the_minute_its_jobs_started(config, r):
    """What the latency chart draws, per minute: a real worker takes jobs that waited 30 s and
    5 s, then 2 s, then 90 s; Redis holds each queue's wait in the minute the job started."""
    waits = [{"default": 30.0, "mail": 5.0}, {"default": 2.0}, {"mail": 90.0}]
    found = waited_for_minutes(config, r, waits)
    for (_, stored), asked in zip(found, waits, strict=True):
        assert stored.keys() == asked.keys()
        for queue, seconds in asked.items():  # plus the few ms the worker took to start it
            assert seconds <= stored[queue] < seconds + 5, (queue, stored)
    start = found[0][0]
    assert all(0 < r.ttl(f"sidequest:metrics:{minute_of(at)}:latency") <= job_metrics.RETENTION for at, _ in found)
    assert read_latency(r, 5, start + 30)[minute_of(start - 60)] == {}  # a minute no job started in


def test_the_longest_wait_of_every_process_stays_and_a_failed_flush_gives_it_back(r):
    at = 1_800_000_030.0  # the middle of a minute: each job started and ended in it

    def finished(feature: JobMetricsFeature, queue: str, waited: float, enqueued_at: float | None = None) -> None:
        enqueued = at - 0.5 - waited if enqueued_at is None else enqueued_at
        payload = {"class": "J", "queue": queue, "enqueued_at": enqueued}
        feature.observe("finished", payload, Outcome.done(0.5))  # started half a second before `at`

    def flushed(feature: JobMetricsFeature) -> None:
        pipe = r.pipeline()
        JobMetricsFeature.write(pipe, feature.take())
        pipe.execute()
    one, two = JobMetricsFeature(clock=lambda: at), JobMetricsFeature(clock=lambda: at)
    finished(one, "default", 4.0)
    finished(one, "default", 1.0)
    finished(two, "default", 9.0)
    finished(two, "mail", 0.0, enqueued_at=(at - 0.5 - 7.25) * 1000)  # Sidekiq 8: integer milliseconds
    finished(two, "mail", 0.0, enqueued_at=at + 60)  # a producer's clock ahead: no negative wait
    flushed(two)
    flushed(one)  # written after: a shorter wait does not replace the longest (ZADD GT)
    assert read_latency(r, 1, at) == {minute_of(at): {"default": 9.0, "mail": 7.25}}
    finished(one, "mail", 12.0)
    one.give_back(one.take())  # the heartbeat's MULTI failed: counted again with the next
    flushed(one)
    assert read_latency(r, 1, at)[minute_of(at)] == {"default": 9.0, "mail": 12.0}
    assert read(r, 1, at)["J"].runs == 6  # the runs are written beside the waits, as before

"""The per-job metrics feature (`job_metrics`): counted in memory by the worker, written with the
heartbeat, read per window."""

from conftest import wait_until
from helpers import ran
from jobs_for_tests import FastBoom, work

from sidequest.features import job_metrics
from sidequest.features.job_metrics import BUCKETS, JobMetricsFeature, read


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

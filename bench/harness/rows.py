"""What a run measures: the configurations (rows of the table, each a peer with its processes and
concurrency), the figures reported for each, and the settings of a full or a quick run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
PEERS_DIR = BENCH / "peers"
RESULTS = BENCH / "results"
TIMES = "\N{MULTIPLICATION SIGN}"
REFERENCE = "sidekiq"  # every ratio divides by this row's figure of the same round
CONCURRENCY = 10
PYTHON_PEERS = ["huey", "dramatiq", "rq", "celery", "taskiq", "arq", "saq", "streaq"]
ASYNCIO_PEERS = ["taskiq", "arq", "saq", "streaq"]  # what the async row is measured against (report.py)
ASYNC_ROW = "sidequest-async"
ASYNC_IN_FLIGHT = 100  # jobs in flight per process on sidequest's asyncio runner (its --async-jobs default)
ASYNC_GOAL = 2.0  # the async row's throughput over the best asyncio peer's, same run (report.py)
# Jobs in flight per process where a peer's documented best is not CONCURRENCY (each peer file says why),
# and the peers that run one process whatever --processes says (their rows are labelled so).
IN_FLIGHT = {"taskiq": 100, "saq": 100, "streaq": 16}
ONE_PROCESS = {"arq"}


@dataclass(frozen=True)
class Row:
    """One configuration: peer file `bench/peers/<peer>_peer.py`, `--processes`, `--concurrency`, and
    `env`, (name, value) pairs added to the environment of all its commands (harness/peers.py: the
    worker's processes and the client commands, enqueue included). A baseline row (`--baseline`)
    runs the same peer file with `src`, an older checkout's source, first on PYTHONPATH, and names
    the row it is the baseline of in `baseline_of`. A `cluster` row runs on the run's private
    3-primary Redis Cluster (harness/cluster.py, a `redis+cluster://` URL) instead of the one
    redis-server of the others."""

    id: str
    peer: str
    processes: int
    concurrency: int = CONCURRENCY
    env: tuple[tuple[str, str], ...] = ()
    note: str = ""
    src: str = ""
    baseline_of: str = ""
    cluster: bool = False
    held: bool = False  # the held-groups row: its set-up (harness/groups.py) before its throughput

    @property
    def label(self) -> str:
        return f"{self.id} ({self.processes}p{TIMES}c{self.concurrency})"


GROUPS_ROW = "sidequest-groups"  # "fairness: 1,000 groups", measured against the `sidequest` row (report.py)
GROUPS = 1000
OPEN_ROW, HELD_ROW = "sidequest-open", "sidequest-held"  # one group's jobs alone, and among held groups
GROUP_ROWS = (GROUPS_ROW, OPEN_ROW, HELD_ROW)  # throughput only; SLOWLOG read (harness/groups.py)
OPEN = (("BENCH_SIDEQUEST_DEFAULT", "1"), ("BENCH_OPEN_GROUP", "1"))
SPREAD = (("BENCH_QUEUES", "6"),)  # the jobs over 6 queues, two on each primary of the Cluster (sidequest_peer.py)


def all_rows(cores: int) -> list[Row]:
    """Every configuration of a full run, the reference first."""
    default = cores if cores > 1 else 1
    rows = [
        Row("sidekiq", "sidekiq", 1, note="Ruby Sidekiq 6 OSS with YJIT, one process (OSS has no multi-process "
            "mode); Ruby 3.1's YJIT maps its whole 256 MiB code region at start: most of this row's RSS"),
        Row("sidekiq-nojit", "sidekiq", 1, env=(("BENCH_SIDEKIQ_YJIT", "0"),), note="Ruby Sidekiq without YJIT"),
        Row("sidequest", "sidequest", default, env=(("BENCH_SIDEQUEST_DEFAULT", "1"),),
            note="`sidequest worker` with no flags: one process per CPU, each on its own CPU (one process "
                 "on 1 CPU), 10 threads each, reliable fetch; a --baseline row: that commit's default"),
    ]
    if cores > 1:
        rows.append(Row("sidequest-1p", "sidequest", 1, note="--processes 0: one process, free to use every CPU"))
        rows.append(Row("sidequest-pinned", "sidequest", 1, env=(("BENCH_SIDEQUEST_ARGS", "--pin-cpu"),),
                        note="--processes 0 --pin-cpu: one process kept on one CPU"))
    rows.append(Row(GROUPS_ROW, "sidequest", default,
                    env=(("BENCH_SIDEQUEST_DEFAULT", "1"), ("BENCH_GROUPS", str(GROUPS))),
                    note=f"fairness: the `sidequest` row's jobs, each pushed with `group=i % {GROUPS:,}` ({GROUPS:,} "
                         "groups served round-robin, staged from their lanes into the queue as jobs end)"))
    rows.append(Row(OPEN_ROW, "sidequest", default, env=OPEN,
                    note="one open group: the `sidequest` row's worker, --group-jobs no-op jobs all in group `open`, "
                         "nothing else on the queue"))
    rows.append(Row(HELD_ROW, "sidequest", default, env=OPEN, held=True,
                    note="the `sidequest-open` row's jobs among --past-groups groups whose one job ran and "
                         "--held-groups held back (a third each: at group_concurrency=1 with its slot's job running "
                         "in a quiet holder worker, out of group_rate=(1, 3600), paused), each with jobs waiting"))
    rows.append(Row("sidequest-6q", "sidequest", default, env=(("BENCH_SIDEQUEST_DEFAULT", "1"), *SPREAD),
                    note="the `sidequest` row with the jobs spread over 6 equally weighted queues (`-q bench,1 "
                         "-q bench-1,1 ...`): sidequest-cluster's queues on the one redis-server"))
    rows.append(Row("sidequest-cluster", "sidequest", default, env=(("BENCH_SIDEQUEST_DEFAULT", "1"), *SPREAD),
                    cluster=True,
                    note="sidequest-6q in Cluster mode (`redis+cluster://`) on 3 primaries without replicas, "
                         "two of the queues on each; the job's INCR through the cluster client; Redis CPU and "
                         "commands are the 3 primaries' sums. On this machine's cores: the per-job cost, not scaling"))
    rows.append(Row(f"sidequest-{cores}p-plain", "sidequest", cores, env=(("BENCH_PLAIN_REDIS", "1"),),
                    note="job's INCR through a stock redis-py client instead of sidequest.redis()"))
    rows.append(Row(ASYNC_ROW, "sidequest", default, concurrency=ASYNC_IN_FLIGHT,
                    env=(("BENCH_SIDEQUEST_DEFAULT", "1"), ("BENCH_ASYNC", "1")),
                    note="async def no-op jobs: `sidequest worker` with no flags, as the `sidequest` row, whose "
                         "jobs are all `async def` (so `--runner auto` runs them on its asyncio runner, "
                         f"--async-jobs {ASYNC_IN_FLIGHT} in flight per process); the jobs' commands through "
                         "sidequest.aio.redis(), the worker's Redis on the loop (redis.asyncio), as the sync "
                         "rows' go through sidequest.redis()"))
    rows += [Row(name, name, 1 if name in ONE_PROCESS else cores, concurrency=IN_FLIGHT.get(name, CONCURRENCY),
                 note="the peer file's fast configuration") for name in PYTHON_PEERS]
    return rows


def quick_rows(cores: int) -> list[Row]:
    """The reference and sidequest's own settings on one queue, the async and fairness rows included (not the
    stock-redis-py variant, nor the 6-queue and Cluster rows: about 25 s each, `--quick --only
    sidequest,sidequest-cluster`; the asyncio peers the async row is measured against: `--quick
    --only sidequest-async,arq,saq,taskiq,streaq`)."""
    return [row for row in all_rows(cores) if row.id == REFERENCE or (
        row.peer == "sidequest" and not row.id.endswith("-plain") and not set(SPREAD) & set(row.env))]


def select(rows: list[Row], wanted: str | None) -> list[Row]:
    """Rows whose id or peer is named in the comma-separated `wanted`; the reference is always kept."""
    if not wanted:
        return rows
    names = {name.strip() for name in wanted.split(",") if name.strip()}
    unknown = names - {row.id for row in rows} - {row.peer for row in rows}
    if unknown:
        raise SystemExit(f"unknown peer(s) {', '.join(sorted(unknown))}; known: {', '.join(r.id for r in rows)}")
    return [row for row in rows if row.id == REFERENCE or row.id in names or row.peer in names]


def only(rows: list[Row], wanted: str) -> list[Row]:
    """The rows whose id is named in the comma-separated `wanted`, in the table's order (no reference added)."""
    names = {name.strip() for name in wanted.split(",") if name.strip()}
    unknown = names - {row.id for row in rows}
    if unknown:
        raise SystemExit(f"unknown row(s) {', '.join(sorted(unknown))}; known: {', '.join(r.id for r in rows)}")
    return [row for row in rows if row.id in names]


def with_baseline(rows: list[Row], short: str, src: Path, ref: str) -> list[Row]:
    """Each sidequest row followed by the same configuration run from `src` (the checkout of `ref`,
    commit `short`): `<id>@<short>`, measured next to its row in every round."""
    found = []
    for row in rows:
        found.append(row)
        if row.peer == "sidequest" and not row.src:  # a commit without groups: n/a in the group rows
            found.append(replace(row, id=f"{row.id}@{short}", src=str(src), baseline_of=row.id,
                                 note=f"{row.note}; sidequest as of {ref}{f' ({short})' if ref != short else ''}"))
    return found


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    digits: int = 0


FIGURES = [
    Figure("throughput", "throughput", "jobs/s", True),
    Figure("bulk_enqueue", "bulk enqueue", "jobs/s", True),
    Figure("single_enqueue", "single enqueue", "jobs/s", True),
    Figure("cpu_us_per_job", "worker CPU", "µs/job", False),
    Figure("redis_cpu_us_per_job", "Redis CPU", "µs/job", False),
    Figure("commands_per_job", "Redis cmds", "/job", False, 2),
    Figure("commands_besides_job", "cmds besides job's", "/job", False, 2),
    Figure("latency_p50_ms", "latency p50", "ms", False, 2),
    Figure("latency_p99_ms", "latency p99", "ms", False, 2),
    Figure("sched_p50_s", "sched. late p50", "s", False, 3),
    Figure("sched_p99_s", "sched. late p99", "s", False, 3),
    Figure("sched_max_s", "sched. late max", "s", False, 3),
    Figure("peak_rss_mb", "peak RSS", "MB", False, 1),
    Figure("idle_rss_mb", "idle RSS", "MB", False, 1),
    Figure("idle_rss_max_mb", "idle RSS/proc max", "MB", False, 1),
    Figure("backlog_jobs_per_s", "throughput, 1M waiting", "jobs/s", True),
    Figure("backlog_ratio", "backlog / no backlog", "ratio", True, 3),
    Figure("ack_p50_ms", "stay after end p50", "ms", False, 2),
    Figure("ack_p99_ms", "stay after end p99", "ms", False, 2),
    Figure("ack_max_ms", "stay after end max", "ms", False, 2),
    Figure("slow_commands", "commands over 10 ms", "", False),  # the group rows (harness/groups.py)
    Figure("slowest_ms", "longest command", "ms", False, 1),
]
FIGURE = {figure.key: figure for figure in FIGURES}


@dataclass
class Settings:
    """One run's sizes and limits (full defaults; `quick()` shrinks them to about a minute)."""

    rounds: int = 3
    jobs: int = 20_000
    single_jobs: int = 5_000
    latency_count: int = 200
    sched_count: int = 1_000
    sched_over: float = 30.0
    backlog: bool = False
    backlog_jobs: int = 1_000_000
    ack_jobs: int = 1_000  # jobs of the acknowledgement-window phase (sidequest rows; 0: skipped)
    ack_interval: float = 0.0005  # s between two of its snapshots (plus the call itself)
    group_jobs: int = 2_000  # the open group's no-op jobs (the open and held rows)
    past_groups: int = 90_000  # the held row's groups whose one job ran, beside
    held_groups: int = 10_000  # its held groups (with the open one: 100,001 groups)
    ceiling_requests: int = 200_000
    quick: bool = False
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    idle_timeout: float = 60.0  # a worker not idle by then is measured anyway (and noted)
    stop_timeout: float = 30.0  # SIGTERM, then SIGKILL of the whole tree

    def quicken(self) -> None:
        self.rounds, self.jobs, self.single_jobs = 1, 10_000, 2_000
        self.latency_count, self.sched_count, self.sched_over = 50, 200, 10.0
        self.ack_jobs = 400
        self.group_jobs, self.past_groups, self.held_groups = 500, 9_000, 1_000
        self.ceiling_requests, self.quick = 20_000, True

    @property
    def run_timeout(self) -> float:
        """Longest wait for the last of N jobs (a peer slower than N/timeout jobs/s gets n/a)."""
        return max(180.0, self.jobs / 100)

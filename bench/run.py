"""`make bench` and `make bench-quick`: sidequest against Ruby Sidekiq and the Python job queues on
one private redis-server, each peer in its own virtualenv and its documented fast configuration.

    .venv/bin/python bench/run.py [--quick] [--rounds 3] [--jobs 20000] [--peers sidequest,huey]
                                  [--only sidequest,sidequest-cluster] [--skip-install] [--scheduled-over 30]
                                  [--backlog] [--no-extras] [--baseline REF] [--ack-jobs 1000]
                                  [--group-jobs 2000] [--past-groups 90000] [--held-groups 10000]
    .venv/bin/python bench/run.py --report bench/results/latest.json [--to-docs]   (tables, chart, markdown again)

A full run measures every configuration of harness/rows.py in 3 interleaved rounds (about half an
hour on 2 cores), then runs the single-purpose benchmarks (bulk_push.py, throughput.py: reliable vs
basic fetch, tasks.py, scripts.py: each worker script's cost by queue length, drain.py: 1,000,000
jobs drained by 2 processes, SLOWLOG and throughput by decile, and weights.py: the weighted groups'
run, `make bench-weights` alone); --quick is sidequest vs Sidekiq, one short round (about a minute).
The group rows (harness/groups.py: sidequest-groups, -open, -held) measure throughput only; `--quick
--only sidequest,sidequest-groups,sidequest-open,sidequest-held` checks them in about 3 minutes (500
jobs of the open group, 9,000 past and 1,000 held groups instead of 2,000, 90,000 and 10,000). The
`sidequest-cluster` row runs on a private 3-primary Redis Cluster started beside the redis-server
when a row needs it (harness/cluster.py); it and `sidequest-6q` are not among --quick's rows, but
`--quick --only sidequest,sidequest-6q,sidequest-cluster` measures just those, at the quick sizes.
--baseline REF adds, after each sidequest row, the same row run from a checkout of the git commit
REF (bench/.baseline/<short sha>, see harness/baseline.py): `sidequest@<short sha>`.
What is measured and how: harness/phases.py; the peers' contract: peers/_peer.py.
Results: a table here, bench/results/<UTC time>.json and latest.json, the same tables as markdown
in <UTC time>.md and latest.md, the chart in latest.png/.svg, and for a full run the markdown
between the bench:begin/end lines of docs/performance.md and the chart as docs/images/bench.png/.svg;
the peers' logs in bench/results/logs/<UTC time>/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psutil
import redis
from common import PrivateRedis
from harness import baseline, install
from harness.baseline import imported_from, is_under
from harness.chart import write_chart
from harness.cluster import ClusterCounted, PrivateCluster
from harness.markdown import DOCS_PAGE, render, update_docs, write_markdown
from harness.peers import Peer, PhaseError
from harness.redisops import Counted, ceiling
from harness.report import print_report, write_json
from harness.rounds import run_rounds, summarise
from harness.rows import REFERENCE, RESULTS, Row, Settings, all_rows, only, quick_rows, select, with_baseline

HERE = Path(__file__).resolve().parent
LEGACY = ["bulk_push.py", "throughput.py", "tasks.py", "scripts.py", "drain.py", "weights.py"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="sidequest vs Sidekiq only, 1 round of 10,000 jobs (~1 min)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (3; quick: 1)")
    p.add_argument("--jobs", type=int, help="no-op jobs per throughput run (20,000; quick: 10,000)")
    p.add_argument("--peers", help="comma-separated peers or row ids (sidekiq, the reference, is always added)")
    p.add_argument("--only", metavar="ROWS", help="comma-separated row ids, exactly those (no reference added;\n"
                                                   "with --quick: any row, at the quick run's sizes)")
    p.add_argument("--skip-install", action="store_true", help="use the virtualenvs as they are; skip what is missing")
    p.add_argument("--scheduled-over", type=float, help="seconds the scheduled jobs are spread over (30; quick: 10)")
    p.add_argument("--backlog", nargs="?", type=int, const=1_000_000, metavar="WAITING",
                   help="also: sidequest's throughput for --jobs jobs with WAITING (1,000,000) queued")
    p.add_argument("--baseline", metavar="REF",
                   help="also measure sidequest as of git commit REF (a row after each sidequest row)")
    p.add_argument("--ack-jobs", type=int, metavar="N",
                   help="jobs of the acknowledgement-window phase, sidequest rows (1,000; quick: 400; 0: skip)")
    p.add_argument("--group-jobs", type=int, metavar="N", help="the open group's jobs (2,000; quick: 500)")
    p.add_argument("--past-groups", type=int, metavar="N", help="held row: groups whose job ran (90,000; quick: 9,000)")
    p.add_argument("--held-groups", type=int, metavar="N", help="held row: groups held back (10,000; quick: 1,000)")
    p.add_argument("--no-extras", action="store_true", help="skip the single-purpose benchmarks after a full run")
    p.add_argument("--report", type=Path,
                   help="print the tables, draw the chart and write latest.md of a results JSON, then stop")
    p.add_argument("--to-docs", nargs="?", type=Path, const=DOCS_PAGE, metavar="PAGE",
                   help="with --report: also put the markdown between the bench:begin/end lines of\n"
                        "docs/performance.md (or PAGE); the chart in docs/images/ is left as it is")
    args = p.parse_args(argv)
    if args.to_docs and not args.report:
        p.error("--to-docs goes with --report (a full run updates the docs by itself)")
    if args.only and args.peers:
        p.error("--only names the rows itself: no --peers with it")
    return args


def settings_from(args: argparse.Namespace) -> Settings:
    s = Settings()
    if args.quick:
        s.quicken()
    s.rounds = args.rounds or s.rounds
    s.jobs = args.jobs or s.jobs
    s.sched_over = args.scheduled_over or s.sched_over
    s.backlog = args.backlog is not None
    s.backlog_jobs = args.backlog or s.backlog_jobs
    s.ack_jobs = s.ack_jobs if args.ack_jobs is None else args.ack_jobs
    s.group_jobs = args.group_jobs or s.group_jobs
    s.past_groups = s.past_groups if args.past_groups is None else args.past_groups
    s.held_groups = args.held_groups or s.held_groups
    return s


def prepare(rows: list[Row], urls: dict[str, str], skip_install: bool,
            log_dir: Path) -> tuple[dict[str, Peer], dict[str, str]]:
    """A Peer per row whose peer is installed and answers `staged-keys`; the others, with why.
    `urls`: row id -> its Redis (the shared server's, or the Cluster's)."""
    pythons: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for peer in dict.fromkeys(row.peer for row in rows):
        try:
            if peer == "sidekiq":
                install.ensure_sidekiq(skip_install, log_dir)
            pythons[peer] = install.peer_python(peer, skip_install, log_dir)
            row = next(row for row in rows if row.peer == peer)
            # imports the peer file and its library
            Peer(row, pythons[peer], urls[row.id], log_dir).staged_keys("check")
        except (install.Unavailable, PhaseError) as exc:
            lines = str(exc).strip().splitlines() or ["?"]
            skipped[peer] = lines[0] + (f": {lines[-1].strip()}" if len(lines) > 1 else "")
            pythons.pop(peer, None)
            print(f"  skipping {peer}: {skipped[peer]}", flush=True)
    peers = {row.id: Peer(row, pythons[row.peer], urls[row.id], log_dir) for row in rows if row.peer in pythons}
    for peer in [peer for peer in peers.values() if peer.row.src]:  # a baseline row: its checkout shadows ours?
        found = imported_from(peer.python, peer.env())
        if not is_under(found.get("from", ""), peer.row.src):
            skipped[peer.row.id] = f"imports sidequest from {found.get('from') or found}, not {peer.row.src}"
            print(f"  skipping {peer.row.id}: {skipped[peer.row.id]}", flush=True)
            del peers[peer.row.id]
    return peers, skipped


def version_key(row: Row) -> str:
    """The peer's name; `sidequest@<short sha>` for the rows of a baseline."""
    return f"{row.peer}@{row.id.rsplit('@', 1)[1]}" if row.src else row.peer


def versions(peer: Peer) -> dict[str, str]:
    """What the peer runs; a baseline row's sidequest is the checkout's (its version, and where from)."""
    if not peer.row.src:
        return install.versions(peer.row.peer, peer.python)
    found = imported_from(peer.python, peer.env())
    found[version_key(peer.row)] = found.pop("sidequest", "?")
    found["from"] = os.path.relpath(found.get("from", "?"), HERE.parent)
    return found


def machine(counted: Counted) -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cpu_count": os.cpu_count(), "cpu_model": model,
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "kernel": platform.release(),
            "python": platform.python_version(),
            "redis_version": counted.r.info("server")["redis_version"], "load_average_start": os.getloadavg()}


def measure(args: argparse.Namespace, settings: Settings, rows: list[Row], stamp: str) -> dict[str, Any]:
    log_dir = RESULTS / "logs" / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    with PrivateRedis() as server, ExitStack() as stack:
        counted = Counted(server.url, (server.proc.pid,))
        on = {row.id: counted for row in rows}
        urls = {row.id: server.url for row in rows}
        skipped_rows: dict[str, str] = {}
        if clustered := [row for row in rows if row.cluster]:
            try:
                cluster = stack.enter_context(PrivateCluster())
                on_cluster = ClusterCounted(cluster.url, cluster.pids)
                print(f"private Redis Cluster on ports {', '.join(map(str, cluster.ports))}", flush=True)
                on.update({row.id: on_cluster for row in clustered})
                urls.update({row.id: cluster.url for row in clustered})
            except (OSError, RuntimeError, redis.RedisError) as exc:
                print(f"  skipping {', '.join(row.id for row in clustered)}: no Redis Cluster ({exc})", flush=True)
                skipped_rows = {row.id: f"no Redis Cluster: {exc}" for row in clustered}
                rows = [row for row in rows if not row.cluster]
        print(f"private redis-server on port {server.port}; preparing {len(rows)} configuration(s)", flush=True)
        peers, skipped = prepare(rows, urls, args.skip_install, log_dir)
        skipped.update(skipped_rows)
        if not any(row.id == REFERENCE for row in (p.row for p in peers.values())):
            print(f"  no {REFERENCE} row: ratios will be n/a", flush=True)
        doc: dict[str, Any] = {"started": stamp, "command": sys.argv, "settings": vars(settings).copy(),
                               "machine": machine(counted), "log_dir": str(log_dir.relative_to(HERE.parent)),
                               "skipped": skipped,
                               "versions": {version_key(peer.row): versions(peer) for peer in peers.values()}}
        print("measuring the Redis ceiling (redis-benchmark)", flush=True)
        doc["ceiling"] = ceiling(counted.r, server.port, settings.ceiling_requests)
        doc["rows"] = [{**vars(p.row), "label": p.row.label} for p in peers.values()]
        doc["rounds"] = run_rounds(peers, settings, on)
    for log in log_dir.iterdir():  # keep the logs that say something
        if log.stat().st_size == 0:
            log.unlink()
    doc["medians"], doc["ratios"] = summarise(doc["rounds"], list(peers))
    doc["machine"]["load_average_end"] = os.getloadavg()
    doc["finished"] = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return doc


def run_legacy() -> None:
    for name in LEGACY:
        print(f"\n== {name}", flush=True)
        subprocess.run([sys.executable, str(HERE / name)], check=False)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.report:
        doc = json.loads(args.report.read_text())
        print_report(doc)
        print("chart:", ", ".join(str(p) for p in write_chart(doc, to_docs=False)))
        text = render(doc)
        print("markdown:", ", ".join(str(p) for p in write_markdown(text)))
        if args.to_docs and update_docs(text, args.to_docs):
            print(f"tables of {args.to_docs} updated")
        return
    settings = settings_from(args)
    cores = settings.cores
    rows = only(all_rows(cores), args.only) if args.only else \
        select(quick_rows(cores) if args.quick else all_rows(cores), args.peers)
    if args.baseline:
        base = baseline.checkout(args.baseline)
        rows = with_baseline(rows, base.short, base.src, args.baseline)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    began = time.monotonic()
    doc = measure(args, settings, rows, stamp)
    path = write_json(doc, stamp)
    print_report(doc)
    full = not args.quick and not args.peers and not args.only
    charts = write_chart(doc, to_docs=full)
    text = render(doc)
    write_markdown(text, stamp)
    if full and update_docs(text):
        print(f"tables of {DOCS_PAGE.relative_to(HERE.parent)} updated")
    print(f"results: {path.relative_to(HERE.parent)} (and latest.json, .md); chart: "
          f"{', '.join(str(p.relative_to(HERE.parent)) for p in charts) or 'none'}; "
          f"{time.monotonic() - began:.0f} s")
    if full and not args.no_extras:
        run_legacy()


if __name__ == "__main__":
    main()

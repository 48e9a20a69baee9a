"""Ruby Sidekiq (Debian's ruby-sidekiq, 6.4 OSS) as a benchmark peer: the reference every other
peer's figures are divided by (see `_peer` for the contract).

The jobs are Ruby (`sidekiq_jobs.rb`, mirroring `_peer`'s noop and stamp bodies); the worker is
`ruby --yjit -S sidekiq -r sidekiq_jobs.rb -c C -q bench` with logging at WARN; enqueue, latency
and schedule run `sidekiq_client.rb` (push_bulk in slices of 1,000, perform_async, perform_at),
which times itself and prints the contract's JSON. BENCH_SIDEKIQ_YJIT=0 in the environment runs
Ruby without YJIT (the harness's no-YJIT row).

Sidekiq 6 OSS runs one process (several processes need Sidekiq Enterprise's swarm or a process
manager): asked for --processes P > 1, this peer still starts ONE process and says so on stderr.
"""
# python: main

from __future__ import annotations

import os
import sys

import _peer

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = os.path.join(HERE, "sidekiq_jobs.rb")
CLIENT = os.path.join(HERE, "sidekiq_client.rb")
QUEUE = "bench"


def ruby() -> list[str]:
    return ["ruby", "--yjit"] if os.environ.get("BENCH_SIDEKIQ_YJIT", "1") != "0" else ["ruby"]


def worker(url: str, processes: int, concurrency: int) -> list[str]:
    if processes > 1:
        print(f"sidekiq_peer: Sidekiq OSS runs one process: starting 1, not {processes}", file=sys.stderr)
    return [*ruby(), "-S", "sidekiq", "-r", JOBS, "-c", str(concurrency), "-q", QUEUE]


def main() -> None:
    args = _peer.arguments()
    if args.command == "staged-keys":
        print(f'["queue:{QUEUE}"]')
        return
    if args.command == "worker":
        argv = worker(args.url, args.processes, args.concurrency)
    else:
        argv = [*ruby(), CLIENT, args.command, "--url", args.url, "--mode", args.mode,
                "--count", str(args.count), "--over", str(args.over)]
    sys.stdout.flush()
    os.execvpe(argv[0], argv, {**os.environ, "REDIS_URL": args.url})


if __name__ == "__main__":
    main()

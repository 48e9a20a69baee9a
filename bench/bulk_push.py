"""Bulk push of 100,000 small jobs from one process: sidequest vs Ruby Sidekiq's push_bulk.

    .venv/bin/python bench/bulk_push.py [COUNT]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(__file__))
from common import PrivateRedis, ruby_sidekiq

import sidequest

RUBY = r"""
require "sidekiq"
class BenchJob; include Sidekiq::Worker; def perform(i); end; end
n = Integer(ARGV[0])
args = (0...n).map { |i| [i] }
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
args.each_slice(1000) { |slice| Sidekiq::Client.push_bulk("class" => BenchJob, "args" => slice) }
puts Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
"""


@sidequest.job(name="BenchJob", registry=sidequest.Registry())
def bench_job(i):
    pass


def main(count: int = 100_000) -> dict[str, float]:
    results: dict[str, float] = {}
    with PrivateRedis() as server:
        client = sidequest.Client(sidequest.Config(redis_url=server.url))
        args = [[i] for i in range(count)]
        client.push_bulk(bench_job, args[:1000])  # warm the connection
        redis.Redis.from_url(server.url).flushdb()
        t = time.perf_counter()
        jids = client.push_bulk(bench_job, args)
        results["sidequest"] = time.perf_counter() - t
        assert len(jids) == count and redis.Redis.from_url(server.url).llen("queue:default") == count
        if ruby_sidekiq():
            redis.Redis.from_url(server.url).flushdb()
            out = subprocess.run(["ruby", "-e", RUBY, str(count)], env={**os.environ, "REDIS_URL": server.url},
                                 capture_output=True, text=True, check=True)
            results["ruby_sidekiq"] = float(out.stdout.strip().splitlines()[-1])
    print(f"bulk push of {count:,} jobs")
    print(f"  sidequest    {results['sidequest']:.3f} s  ({count / results['sidequest']:,.0f} jobs/s)")
    if "ruby_sidekiq" in results:
        print(f"  Ruby Sidekiq {results['ruby_sidekiq']:.3f} s  ({count / results['ruby_sidekiq']:,.0f} jobs/s)")
        print(f"  ratio: sidequest is {results['ruby_sidekiq'] / results['sidequest']:.2f}x Ruby Sidekiq's speed")
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)

"""`make chaos`: 200 checkouts (examples/checkout.py) on 2 worker processes while a random worker
process gets `kill -9` 50 times; then checks that nothing was lost or charged twice.

    .venv/bin/python bench/chaos_checkout.py [--orders 200] [--kills 50] [--runner asyncio]

A local HTTP "payment provider" (stdlib http.server) counts every call per order and path,
deduped ones included, and dedupes by the Idempotency-Key header. The worker is `sidequest
worker --processes 2 --max-recoveries 20` (a supervisor restarts each killed child). Checks:
every checkout done; exactly one effective charge per order; charge calls per order <= 1 + kills
that landed inside its charge step; each step's body started at most once more than the kills
inside it (from the start/end records); nothing left in queues, retry or dead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from checkout import DONE, LOG, QUEUE  # noqa: E402


class Provider(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.calls: Counter[tuple[int, str]] = Counter()  # (order, path) -> calls, deduped included
        self.effects: dict[str, tuple[int, str]] = {}  # idempotency key -> (order, path): effective calls


class Handler(BaseHTTPRequestHandler):
    server: Provider

    def do_POST(self) -> None:  # http.server's name
        order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["order"]
        key = self.headers["Idempotency-Key"]
        with self.server.lock:
            self.server.calls[(order, self.path)] += 1
            self.server.effects.setdefault(key, (order, self.path))
        body = json.dumps({"id": f"{self.path[1:]}_{key[-8:]}"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--runner", choices=["threads", "asyncio"], default="threads")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    args = parser.parse_args()
    url = args.redis_url or _dev_redis()
    r = redis.Redis.from_url(url)
    r.flushdb()
    provider = Provider()
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    env = {**os.environ, "REDIS_URL": url, "PROVIDER_URL": f"http://127.0.0.1:{provider.server_port}",
           "PYTHONPATH": str(ROOT / "examples")}
    worker = subprocess.Popen([sys.executable, "-m", "sidequest.cli", "worker", "-r", "checkout", "-q", QUEUE,
                               "--processes", "2", "--max-recoveries", "20", "--runner", args.runner,
                               "--heartbeat-interval", "0.5", "--heartbeat-ttl", "2", "--recovery-interval", "0.5",
                               "--poll-interval", "0.2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import sidequest

    client = sidequest.Client(sidequest.Config(redis_url=url))
    name = "AsyncCheckout" if args.runner == "asyncio" else "Checkout"
    for order in range(args.orders):
        client.push(name, [order], queue=QUEUE)
    began, rng, kills = time.monotonic(), random.Random(7), 0
    try:
        while kills < args.kills and r.llen(DONE) < args.orders:
            time.sleep(rng.uniform(0.05, 0.4))
            seen = r.llen(LOG)
            while r.llen(LOG) == seen and r.llen(DONE) < args.orders:  # a kill only once steps are running
                time.sleep(0.02)
            pids = children(worker.pid)
            if pids:
                os.kill(rng.choice(pids), 9)
                kills += 1
        deadline = time.monotonic() + 300
        while r.llen(DONE) < args.orders and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(30)
    return report(r, provider, args.orders, kills, time.monotonic() - began)


def report(r: redis.Redis, provider: Provider, orders: int, kills: int, seconds: float) -> int:
    done = [json.loads(x) for x in r.lrange(DONE, 0, -1)]
    log = [json.loads(x) for x in r.lrange(LOG, 0, -1)]
    starts = Counter((o, s) for kind, o, s, _ in log if kind == "start")
    ends = Counter((o, s) for kind, o, s, _ in log if kind == "end")
    effective = Counter((o, p) for o, p in provider.effects.values())
    problems = []
    done_orders = Counter(o for o, _ in done)
    if set(done_orders) != set(range(orders)):
        problems.append(f"{orders - len(set(done_orders))} checkouts never ended")
    if any(effective[(o, "/charge")] != 1 for o in range(orders)):
        problems.append("an order was charged more or less than once")
    inside = {key: starts[key] - ends[key] for key in starts}  # bodies begun that never ended: killed inside
    extra_charge_calls = [o for o in range(orders) if provider.calls[(o, "/charge")]
                          > 1 + inside.get((o, "charge"), 0) + (ends[(o, "charge")] - 1)]
    if extra_charge_calls:
        problems.append(f"orders with charge calls past 1 + kills inside: {extra_charge_calls[:5]}")
    if any(ends[key] > 1 + inside.get(key, 0) for key in ends):
        problems.append("a step body ended more often than once plus the kills inside it")
    left = r.zcard("retry") + r.zcard("dead") + r.llen(f"queue:{QUEUE}")
    if left:
        problems.append(f"{left} jobs left in retry, dead or the queue")
    reran = sum(starts.values()) - sum(ends.values())
    print(f"chaos: {orders} checkouts, {kills} kill -9, {seconds:.1f} s: {len(set(done_orders))} done, "
          f"{sum(effective[(o, '/charge')] for o in range(orders))} effective charges, "
          f"{sum(provider.calls[(o, '/charge')] for o in range(orders))} charge calls, "
          f"{reran} step bodies cut by a kill, {sum(ends.values()) - 3 * orders} re-run after their side effect")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


def _dev_redis() -> str:
    import sidequest
    from sidequest.store.dev_server import resolve_url

    return resolve_url(sidequest.Config.from_env())


if __name__ == "__main__":
    sys.exit(main())

"""`make chaos`: 200 checkouts (examples/checkout.py) on 2 worker processes while a random worker
process gets `kill -9` 50 times; then checks that nothing was lost or charged twice.

    .venv/bin/python bench/chaos_checkout.py [--orders 200] [--kills 50] [--runner asyncio] [--cluster]
                                             [--provider-ms 2000] [--concurrency 2] [--redis-url URL]

The run has a private redis-server (with --cluster, a private 3-primary Redis Cluster), unless
--redis-url names one. A local HTTP "payment provider" (stdlib http.server) answers each call
after --provider-ms, counts every call per order and path, deduped ones included, and dedupes by
the Idempotency-Key header. The worker is `sidequest worker --processes 2 --max-recoveries 20`,
each process running --concurrency jobs at once (`-c`, and `--async-jobs` on the asyncio runner,
whose default of 100 in flight would put half the orders in each kill); its supervisor restarts
each killed child. A child is killed only once it has lived past the
supervisor's HEALTHY_AFTER, so its restart back-off stays at its first step (a child killed
younger doubles it, up to 30 s: 50 kills would then take most of the run waiting).

Where a kill landed is read from the body's records (checkout:steps, [start|end, order, step,
pid]) and the ends of the jobs (checkout:done, [order, charge id, pid]): a body run is *cut* by a
kill when its process was killed before it went past the step, that is before it began the
job's next step or ended the job. That counts a kill between the body's end record and the
step's record (STEP_END) as landing inside the step, as it does: the step runs again. A kill
"landed inside a step" when it cut a body before its end record, or after it and the step ran
again (the kill came before STEP_END).

Checks: every checkout done, nothing left in the queue, retry, dead, schedule, reserved, nor any
step record; exactly one effective charge (and receipt, and CRM call) per order; charge calls per
order <= 1 + the kills inside its charge step; each step's body began at most once more than the
kills inside it; every body run either went past its step or was cut by a kill.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
from checkout import DONE, LOG, QUEUE  # noqa: E402
from common import PrivateRedis  # noqa: E402
from harness.cluster import PrivateCluster  # noqa: E402

import sidequest  # noqa: E402
from sidequest.features.steps import read_steps  # noqa: E402
from sidequest.worker.supervisor import HEALTHY_AFTER  # noqa: E402

STEPS = ("charge", "receipt", "crm")


class Provider(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.delay = delay
        self.lock = threading.Lock()
        self.calls: Counter[tuple[int, str]] = Counter()  # (order, path) -> calls, deduped included
        self.effects: dict[str, tuple[int, str]] = {}  # idempotency key -> (order, path): effective calls

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller killed while it waited for the answer: expected here, not worth a traceback."""


class Handler(BaseHTTPRequestHandler):
    server: Provider

    def do_POST(self) -> None:  # http.server's name
        order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["order"]
        key = self.headers["Idempotency-Key"]
        with self.server.lock:
            self.server.calls[(order, self.path)] += 1
            self.server.effects.setdefault(key, (order, self.path))
        time.sleep(self.server.delay)  # the provider's own time: most kills land inside a step
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


def alive(pid: int) -> bool:
    """Running (not a zombie its supervisor has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--runner", choices=["threads", "asyncio"], default="threads")
    parser.add_argument("--cluster", action="store_true", help="on a private 3-primary Redis Cluster")
    parser.add_argument("--provider-ms", type=float, default=2000.0, help="the provider's time per call")
    parser.add_argument("--concurrency", type=int, default=2, help="jobs at once per worker process (both runners)")
    parser.add_argument("--redis-url", default=None, help="a Redis to use (flushed!) instead of a private one")
    args = parser.parse_args()
    if args.runner == "asyncio" and args.cluster:
        parser.error("the asyncio runner takes jobs on one Redis only (sidequest worker refuses it on a Cluster)")
    return args


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a TERM stops the servers and the worker too
    with ExitStack() as stack:
        url = args.redis_url or stack.enter_context(PrivateCluster() if args.cluster else PrivateRedis()).url
        client = sidequest.Client(sidequest.Config(redis_url=url))
        if args.redis_url:
            client.redis.flushdb()
        provider = Provider(args.provider_ms / 1000)
        threading.Thread(target=provider.serve_forever, daemon=True).start()
        stack.callback(provider.shutdown)
        name = "AsyncCheckout" if args.runner == "asyncio" else "Checkout"
        jids = [client.push(name, [order], queue=QUEUE) for order in range(args.orders)]
        began = time.monotonic()
        killed, log_path = run_worker(args, url, provider, client)
        return report(args, client, provider, jids, killed, time.monotonic() - began, log_path)


def run_worker(args: argparse.Namespace, url: str, provider: Provider,
               client: sidequest.Client) -> tuple[list[int], str]:
    """Run the worker until every order is done, killing a child `args.kills` times meanwhile."""
    env = {**os.environ, "REDIS_URL": url, "PROVIDER_URL": f"http://127.0.0.1:{provider.server_port}",
           "PYTHONPATH": str(ROOT / "examples")}
    log_file = tempfile.NamedTemporaryFile("w", prefix="sq-chaos-", suffix=".log", delete=False)  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "sidequest.cli", "worker", "-r", "checkout", "-q", QUEUE, "--processes", "2",
         "-c", str(args.concurrency), "--async-jobs", str(args.concurrency), "--max-recoveries", "20",
         "--runner", args.runner,
         # a TTL well above a loaded machine's pauses: a live process is never taken for dead
         "--heartbeat-interval", "1", "--heartbeat-ttl", "10", "--recovery-interval", "1", "--poll-interval", "0.2"],
        env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        killed = kill_loop(args, worker, client)
        deadline = time.monotonic() + 600
        while not all_done(client, args.orders) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.terminate()
        worker.wait(60)
        log_file.close()
    return killed, log_file.name


def kill_loop(args: argparse.Namespace, worker: subprocess.Popen[bytes], client: sidequest.Client) -> list[int]:
    """`kill -9` a random child old enough (see module) after a random pause; the pids killed."""
    rng, born, killed = random.Random(7), {}, []  # type: ignore[var-annotated]
    next_at = time.monotonic() + rng.uniform(0, 2)
    while len(killed) < args.kills and not all_done(client, args.orders):
        time.sleep(0.05)
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited with code {worker.returncode}: see its log")
        now = time.monotonic()
        pids = [pid for pid in children(worker.pid) if pid not in killed and alive(pid)]  # not a zombie yet reaped
        for pid in pids:
            born.setdefault(pid, now)
        ripe = [pid for pid in pids if now - born[pid] >= HEALTHY_AFTER + 0.5]
        if ripe and now >= next_at:
            victim = rng.choice(ripe)
            try:
                os.kill(victim, 9)
            except ProcessLookupError:  # it exited meanwhile
                continue
            killed.append(victim)
            next_at = now + rng.uniform(0, 2)
    return killed


def all_done(client: sidequest.Client, orders: int) -> bool:
    r = client.redis
    return bool(r.llen(DONE) >= orders and len({json.loads(x)[0] for x in r.lrange(DONE, 0, -1)}) == orders)


def runs(log: list[list[Any]], done: list[list[Any]], killed: set[int]) -> tuple[Any, ...]:
    """Per (order, step): bodies begun, runs cut by a kill, of those cut after the body's end
    record, of those the ones whose step ran again (the kill came before STEP_END), and runs
    neither past their step nor cut; and the killed pids that landed inside a step: before the
    body's end record, or after it with the step run again (see module)."""
    ended_by = {(order, pid) for order, _, pid in done}
    starts, cut, late, late_again, stray = (Counter(), Counter(), Counter(), Counter(), Counter())  # type: ignore[var-annotated]
    inside: set[int] = set()
    for i, (kind, order, step, pid) in enumerate(log):
        if kind != "start":
            continue
        starts[(order, step)] += 1
        later = [(k, s, p) for k, o, s, p in log[i + 1:] if o == order]
        mine = [(k, s) for k, s, p in later if p == pid]
        if any(k == "start" for k, _ in mine) or (order, pid) in ended_by:
            continue  # it went past the step: the step was recorded
        if pid not in killed:
            stray[(order, step)] += 1
            continue
        cut[(order, step)] += 1
        again = ("start", step) in [(k, s) for k, s, _ in later]
        if ("end", step) in mine:
            late[(order, step)] += 1
            late_again[(order, step)] += again
        if ("end", step) not in mine or again:
            inside.add(pid)
    return starts, cut, late, late_again, stray, inside


def leftovers(client: sidequest.Client, jids: list[str]) -> list[str]:
    r, space = client.redis, client.keys
    found = [f"{r.llen(space.queue(QUEUE))} queued", f"{r.zcard(space.retry(QUEUE))} in retry",
             f"{r.zcard(space.dead(QUEUE))} dead", f"{r.zcard(space.schedule(QUEUE))} scheduled",
             f"{sum(r.llen(k) for k in r.smembers(space.reservations(QUEUE)))} reserved",
             f"{sum(read_steps(r, jid) is not None for jid in jids)} with step records"]
    return [f for f in found if not f.startswith("0 ")]


def report(args: argparse.Namespace, client: sidequest.Client, provider: Provider, jids: list[str],
           killed: list[int], seconds: float, log_path: str) -> int:
    r, orders = client.redis, range(args.orders)
    log = [json.loads(x) for x in r.lrange(LOG, 0, -1)]
    done = [json.loads(x) for x in r.lrange(DONE, 0, -1)]
    starts, cut, late, late_again, stray, inside = runs(log, done, set(killed))
    effective = Counter(provider.effects.values())
    problems = check(args, provider, starts, cut, stray, effective, {o for o, _, _ in done})
    problems += [f"left: {', '.join(found)}" for found in [leftovers(client, jids)] if found]
    where = "a 3-primary Cluster" if args.cluster else "one Redis"
    print(f"chaos ({args.runner} runner, {where}): {args.orders} checkouts, {len(killed)} kill -9, {seconds:.0f} s; "
          f"{len({o for o, _, _ in done})} done; {sum(effective[(o, '/charge')] for o in orders)} effective charges "
          f"from {sum(provider.calls[(o, '/charge')] for o in orders)} charge calls")
    print(f"  kills that landed inside a step: {len(inside)} of {len(killed)}; step bodies cut: {sum(cut.values())} "
          f"({', '.join(f'{s} {sum(v for (_, x), v in cut.items() if x == s)}' for s in STEPS)}), of which after "
          f"the body's end record: {sum(late.values())} (the step ran again, the kill came before STEP_END: "
          f"{sum(late_again.values())}); bodies begun {sum(starts.values())} for {len(starts)} steps")
    print(f"  worker log: {log_path}")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


def check(args: argparse.Namespace, provider: Provider, starts: Counter[tuple[int, str]],
          cut: Counter[tuple[int, str]], stray: Counter[tuple[int, str]], effective: Counter[tuple[int, str]],
          ended: set[int]) -> list[str]:
    orders = range(args.orders)
    problems = []
    if len(ended) != args.orders:
        problems.append(f"{args.orders - len(ended)} checkouts never ended")
    if len(provider.calls) and args.kills and not cut:
        problems.append("no kill landed inside a step: the figures say nothing")
    for path in ("/charge", "/receipt", "/crm"):
        wrong = [o for o in orders if effective[(o, path)] != 1]
        if wrong:
            problems.append(f"{path}: orders with other than one effective call: {wrong[:5]}")
    over = [o for o in orders if provider.calls[(o, "/charge")] > 1 + cut[(o, "charge")]]
    if over:
        problems.append(f"orders with charge calls past 1 + kills inside the charge step: {over[:5]}")
    again = [key for key, n in starts.items() if n > 1 + cut[key]]
    if again:
        problems.append(f"step bodies begun more than once plus the kills inside them: {again[:5]}")
    if stray:
        problems.append(f"body runs neither past their step nor killed: {sorted(stray)[:5]}")
    return problems


if __name__ == "__main__":
    sys.exit(main())

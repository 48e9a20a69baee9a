"""celery_app.py's work, ported: pushed to a real sidequest worker, one line per result.

It prints what run_celery.py prints with Celery (expected.txt); the test suite checks that
(tests/scenarios/test_celery_port.py). From the repository's root:

    .venv/bin/python examples/celery_port/run_sidequest.py

Redis: REDIS_URL, else the one on localhost:6379, else sidequest's embedded one (as `sidequest demo`).
"""

import logging
from datetime import UTC, datetime

from sidequest_app import CALLS, MORNING_DIGEST, PAYMENTS, charge, discount, fetch_rate, price, send_email, total

import sidequest
from sidequest import Workflow, chain, chord, group
from sidequest.launcher import Launcher
from sidequest.store.dev_server import resolve_url


def main() -> None:
    base = sidequest.Config.from_env()
    # Celery's result backend: every job keeps its return value for 10 minutes. Short waits make
    # the one-second retries and the stop at the end quick.
    config = base.replace(redis_url=resolve_url(base), queues=("shop", "emails"), result_ttl=600,
                          fetch_timeout=0.5, poll_interval=0.2)
    sidequest.configure(config)
    logging.getLogger("sidequest").setLevel(logging.ERROR)  # the two planned failures log a warning each
    worker = Launcher(config)  # the worker, on threads of this process (`sidequest worker` elsewhere)
    worker.run()
    try:
        work()
    finally:
        worker.stop()


def work() -> None:
    print("send_email:", sidequest.result(send_email.delay(42, template="reset", lang="fr"), timeout=30))
    rush = send_email.apply_async((43,), {"template": "receipt"}, priority=9)  # ahead of the queue's others
    print("rush order:", sidequest.result(rush, timeout=30))
    payment = charge.apply_async(args=(7, 1999), kwargs={"currency": "EUR"}, expires=600)
    print("charge:", sidequest.result(payment, timeout=30))
    print("charge recorded its own id:", PAYMENTS[7] == payment)
    print("fetch_rate:", sidequest.result(fetch_rate.delay("USD"), timeout=30), "after", CALLS["rate USD"], "calls")
    flow = Workflow.find(chain(price.s("A-1", quantity=3), discount.s(10)).perform_async())
    print("chain:", *flow.results(timeout=30))  # its final steps' results: here the last step's, alone
    print("piped chain:", (price.s("B-2") | discount.s(50))().get(timeout=30))  # `|`, and a chain called
    print("signature:", sidequest.result(price.s("C-3", 2).delay(), timeout=30))  # one step, pushed alone: its jid
    print("group:", group(price.s(sku) for sku in ("A-1", "B-2", "C-3")).apply_async().get(timeout=30))
    basket = chord([price.s("A-1", 2), price.s("C-3")], total.s("basket 7", currency="EUR"))
    print("chord:", *Workflow.find(basket.perform_async()).results(timeout=30))
    piped = group(price.s("A-1", 2), price.s("B-2")) | total.s("basket 8")  # a group | a step: a chord
    print("piped chord:", piped.apply_async().get(timeout=30))
    digest = MORNING_DIGEST.job.delay(*MORNING_DIGEST.args)  # what the scheduler pushes at each tick
    print("beat:", sidequest.result(digest, timeout=30))
    at = datetime(2026, 3, 27, 12, 0, tzinfo=UTC).timestamp()  # a Friday
    runs = []
    for _ in range(3):
        at = MORNING_DIGEST.schedule.next_after(at)
        runs.append(f"{datetime.fromtimestamp(at, UTC):%a %Y-%m-%d %H:%M} UTC")
    print("beat next runs:", ", ".join(runs))


if __name__ == "__main__":
    main()

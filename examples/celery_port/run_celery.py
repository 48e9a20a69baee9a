"""celery_app.py's work, run by real Celery: one line per result.

Its output is kept as expected.txt, which run_sidequest.py (the port) must print too. Celery is not
a dependency of sidequest: run it in a venv of its own (see README.md). By default the tasks run in
eager mode; with CELERY_BROKER_URL (a Redis URL, `celery[redis]` installed) they go through that
broker to a worker this script runs on threads of its own, and the output is the same.
"""

import os
from datetime import UTC, datetime

from celery import chain, chord, group
from celery_app import CALLS, PAYMENTS, app, charge, discount, fetch_rate, price, send_email, total

# Eager: tasks run here, at once; no broker or result backend is needed for that.
# task_eager_propagates stays off: with it on, Celery raises the Retry of `self.retry()` and
# autoretry_for instead of running the task again (celery/celery#4661, #2164); a failure still
# reaches the caller, from `.get()`.
app.conf.update(task_always_eager=True, task_eager_propagates=False, broker_url="memory://",
                result_backend="cache+memory://")


def through_a_broker(url: str) -> None:
    """main(), with the tasks sent through a real Redis broker to a worker in this process."""
    from celery.contrib.testing.worker import start_worker

    app.conf.update(task_always_eager=False, broker_url=url, result_backend=url)
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, queues=["shop", "emails"],
                      loglevel="WARNING"):
        main()


def main() -> None:
    print("send_email:", send_email.delay(42, template="reset", lang="fr").get(timeout=30))
    rush = send_email.apply_async((43,), {"template": "receipt"}, priority=9)
    print("rush order:", rush.get(timeout=30))
    payment = charge.apply_async(args=(7, 1999), kwargs={"currency": "EUR"}, expires=600)
    print("charge:", payment.get(timeout=30))
    print("charge recorded its own id:", PAYMENTS[7] == payment.id)
    print("fetch_rate:", fetch_rate.delay("USD").get(timeout=30), "after", CALLS["rate USD"], "calls")
    print("chain:", chain(price.s("A-1", quantity=3), discount.s(10)).apply_async().get(timeout=30))
    print("piped chain:", (price.s("B-2") | discount.s(50))().get(timeout=30))  # `|`, and a chain called
    print("signature:", price.s("C-3", 2).delay().get(timeout=30))
    print("group:", group(price.s(sku) for sku in ("A-1", "B-2", "C-3")).apply_async().get(timeout=30))
    basket = chord([price.s("A-1", 2), price.s("C-3")], total.s("basket 7", currency="EUR"))
    print("chord:", basket.apply_async().get(timeout=30))
    piped = group(price.s("A-1", 2), price.s("B-2")) | total.s("basket 8")  # a group | a task: a chord
    print("piped chord:", piped.apply_async().get(timeout=30))
    entry = app.conf.beat_schedule["morning-digest"]
    print("beat:", app.tasks[entry["task"]].apply_async(args=entry["args"]).get(timeout=30))
    at = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # a Friday
    runs = []
    for _ in range(3):
        last, delta, _now = entry["schedule"].remaining_delta(at)
        at = (last + delta).astimezone(UTC)
        runs.append(f"{at:%a %Y-%m-%d %H:%M} UTC")
    print("beat next runs:", ", ".join(runs))


if __name__ == "__main__":
    if os.environ.get("CELERY_BROKER_URL"):
        through_a_broker(os.environ["CELERY_BROKER_URL"])
    else:
        main()

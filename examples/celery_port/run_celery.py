"""celery_app.py's work, run by real Celery in eager mode: one line per result.

Its output is kept as expected.txt, which run_sidequest.py (the port) must print too. Celery is not
a dependency of sidequest: run it in a venv of its own (see README.md).
"""

from datetime import UTC, datetime

from celery import chain, chord, group
from celery_app import CALLS, PAYMENTS, app, charge, discount, fetch_rate, price, send_email, total

# Tasks run here, at once; no broker or result backend is needed for that. task_eager_propagates
# stays off: with it on, Celery raises the Retry of `self.retry()` and autoretry_for instead of running
# the task again (celery/celery#4661, #2164); a failure still reaches the caller, from `.get()`.
app.conf.update(task_always_eager=True, task_eager_propagates=False, broker_url="memory://",
                result_backend="cache+memory://")


def main() -> None:
    print("send_email:", send_email.delay(42, template="reset", lang="fr").get(timeout=30))
    payment = charge.apply_async(args=(7, 1999), kwargs={"currency": "EUR"}, expires=600)
    print("charge:", payment.get(timeout=30))
    print("charge recorded its own id:", PAYMENTS[7] == payment.id)
    print("fetch_rate:", fetch_rate.delay("USD").get(timeout=30), "after", CALLS["rate USD"], "calls")
    print("chain:", chain(price.s("A-1", quantity=3), discount.s(10)).apply_async().get(timeout=30))
    print("group:", group(price.s(sku) for sku in ("A-1", "B-2", "C-3")).apply_async().get(timeout=30))
    basket = chord([price.s("A-1", 2), price.s("C-3")], total.s("basket 7", currency="EUR"))
    print("chord:", basket.apply_async().get(timeout=30))
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
    main()

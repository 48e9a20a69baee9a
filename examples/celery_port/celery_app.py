"""A small Celery 5 app: the one docs/coming-from-celery.md ports to sidequest (sidequest_app.py).

Read by people, and run by run_celery.py where Celery is installed; sidequest's tests never import it.
"""

from celery import Celery
from celery.schedules import crontab

app = Celery("shop", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")
app.conf.update(
    task_default_queue="shop",
    task_routes={"shop.send_email": {"queue": "emails"}},
    timezone="Europe/Paris",
    beat_schedule={"morning-digest": {"task": "shop.send_digest", "args": ("sales",),
                                      "schedule": crontab(minute=30, hour=6, day_of_week="mon-fri")}},
)

PRICES = {"A-1": 1250, "B-2": 800, "C-3": 430}  # cents
RATES = {"USD": 1.08, "GBP": 0.86}
PAYMENTS: dict[int, str] = {}  # order -> the task id that charged it (an idempotency key)
CALLS: dict[str, int] = {}  # calls to the flaky providers: each fails on its first call only


class ProviderTimeout(Exception):
    """The payment provider did not answer in time: worth another try."""


def flaky(key: str, error: type[Exception]) -> None:
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] == 1:
        raise error(f"{key}: no answer")


@app.task(name="shop.send_email")
def send_email(user_id, template="welcome", lang="en"):
    return f"{template} mail in {lang} to user {user_id}"


@app.task(bind=True, max_retries=3)
def charge(self, order_id, amount, currency="EUR"):
    try:
        flaky(f"charge {order_id}", ProviderTimeout)
    except ProviderTimeout as exc:
        raise self.retry(exc=exc, countdown=1) from exc
    PAYMENTS[order_id] = self.request.id
    return {"order": order_id, "charged": f"{amount / 100:.2f} {currency}", "retries": self.request.retries}


@app.task(autoretry_for=(ConnectionError,), max_retries=5, default_retry_delay=1)
def fetch_rate(currency):
    flaky(f"rate {currency}", ConnectionError)
    return RATES[currency]


@app.task
def price(sku, quantity=1):
    return PRICES[sku] * quantity


@app.task
def discount(amount, percent):
    return amount * (100 - percent) // 100


@app.task
def total(amounts, label, currency="EUR"):
    return f"{label}: {sum(amounts) / 100:.2f} {currency}"


@app.task(name="shop.send_digest")
def send_digest(period):
    return f"{period} digest sent"

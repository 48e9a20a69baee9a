"""celery_app.py ported to sidequest: the worked example of docs/coming-from-celery.md.

A worker runs these jobs with `sidequest worker -r sidequest_app -q shop -q emails` (from this
folder); run_sidequest.py pushes celery_app's work to a worker it runs in its own process.
"""

import sidequest

PRICES = {"A-1": 1250, "B-2": 800, "C-3": 430}  # cents
RATES = {"USD": 1.08, "GBP": 0.86}
PAYMENTS: dict[int, str] = {}  # order -> the jid that charged it (an idempotency key)
CALLS: dict[str, int] = {}  # calls to the flaky providers: each fails on its first call only


class ProviderTimeout(Exception):
    """The payment provider did not answer in time: worth another try."""


def flaky(key: str, error: type[Exception]) -> None:
    CALLS[key] = CALLS.get(key, 0) + 1
    if CALLS[key] == 1:
        raise error(f"{key}: no answer")


@sidequest.job(name="shop.send_email", queue="emails")
def send_email(user_id: int, template: str = "welcome", lang: str = "en") -> str:
    return f"{template} mail in {lang} to user {user_id}"


@sidequest.job(queue="shop", retry=3)
def charge(order_id: int, amount: int, currency: str = "EUR") -> dict[str, object]:
    job = sidequest.current_job()  # Celery's self.request: jid, retry_count, queue, name
    assert job is not None  # always set while a job runs
    try:
        flaky(f"charge {order_id}", ProviderTimeout)
    except ProviderTimeout as exc:
        raise sidequest.Retry(in_=1, exc=exc) from exc
    PAYMENTS[order_id] = job.jid
    return {"order": order_id, "charged": f"{amount / 100:.2f} {currency}", "retries": job.retry_count}


@sidequest.job(queue="shop", retry_on=(ConnectionError,), retry=5, retry_in=lambda count, exc: 1)
def fetch_rate(currency: str) -> float:
    flaky(f"rate {currency}", ConnectionError)
    return RATES[currency]


@sidequest.job(queue="shop")
def price(sku: str, quantity: int = 1) -> int:
    return PRICES[sku] * quantity


@sidequest.job(queue="shop")
def discount(amount: int, percent: int) -> int:
    return amount * (100 - percent) // 100


@sidequest.job(queue="shop")
def total(amounts: list[int], label: str, currency: str = "EUR") -> str:
    return f"{label}: {sum(amounts) / 100:.2f} {currency}"


@sidequest.job(name="shop.send_digest", queue="shop")
def send_digest(period: str) -> str:
    return f"{period} digest sent"


# Celery's beat_schedule entry, in the module the worker imports: every worker runs the scheduler
MORNING_DIGEST = sidequest.periodic("30 6 * * 1-5", send_digest, args=["sales"], tz="Europe/Paris",
                                    id="morning-digest")

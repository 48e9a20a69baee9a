"""The jobs of a small shop, tested by test_shop_jobs.py next to this file."""

import sidequest

OUTBOX: list[str] = []  # stands in for a mail server: what the jobs sent


@sidequest.job(queue="mail", retry=5)
def send_receipt(order_id: int, email: str) -> None:
    if "@" not in email:
        raise ValueError(f"order {order_id}: cannot mail {email!r}")
    OUTBOX.append(f"receipt for order {order_id} to {email}")


@sidequest.job(queue="mail")
async def ask_for_review(order_id: int, email: str) -> None:
    OUTBOX.append(f"review request for order {order_id} to {email}")


@sidequest.job
def close_order(order_id: int, email: str) -> None:
    send_receipt.perform_async(order_id, email)
    ask_for_review.perform_in(3 * 24 * 3600, order_id, email)  # in three days

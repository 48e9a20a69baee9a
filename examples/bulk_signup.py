"""Sign up 200 products for a seller, one job per product, tracked as one task.

    .venv/bin/python examples/bulk_signup.py [--no-worker]

Some sign-ups fail for business reasons (a price above the seller's limit, a category the
seller is not qualified for): the job raises `sidequest.JobFailed`, which records the reason
on the job's event and is never retried. At the end the script lists the failed products with
their reasons, read back from the task's events.
"""

from __future__ import annotations

import sys
import time

import sidequest

QUEUE = "examples-bulk-signup"
SELLER = 42
PRODUCTS = range(1001, 1201)
PRICE_LIMIT = 480
RESTRICTED = {0: "alcohol", 11: "medicine"}  # product_id % 29 -> a category this seller may not sell


def price_of(product_id: int) -> int:
    return (product_id * 37) % 500 + 1


@sidequest.job(name="examples.bulk_signup.sign_up", queue=QUEUE)
def sign_up(seller_id: int, product_id: int) -> None:
    time.sleep(0.05 + (product_id % 5) * 0.02)  # stands in for a call to the marketplace
    category = RESTRICTED.get(product_id % 29)
    if category:
        raise sidequest.JobFailed(f"seller {seller_id} is not qualified for category {category!r}")
    if price_of(product_id) > PRICE_LIMIT:
        raise sidequest.JobFailed(f"price {price_of(product_id)} is above the seller's limit of {PRICE_LIMIT}")


def main() -> int:
    from _common import arguments, connect, follow, worker  # not at the top: see _common's docstring

    args = arguments(__doc__).parse_args()
    config = connect(QUEUE)
    with worker(config, start=not args.no_worker):
        started = time.monotonic()
        task = sidequest.Task.create(f"sign up {len(PRODUCTS)} products", meta={"seller": SELLER})
        task.add_bulk(sign_up, [[SELLER, p] for p in PRODUCTS])
        task.seal()
        print(f"task {task.id}: {len(PRODUCTS)} sign-ups enqueued")
        status = follow(task)
        elapsed = time.monotonic() - started

    counts = status["counts"]
    print(f"\n{counts['finished']} of {status['total']} products signed up, {counts['failed']} failed,"
          f" {counts['error']} errors, in {elapsed:.1f} s")
    if counts["failed"]:
        for event in task.events(status="failed", limit=counts["failed"]):
            print(f"  product {event['params'][1]}: {event['error_message']}")
    return 0 if status["done"] else 1


if __name__ == "__main__":
    sys.exit(main())

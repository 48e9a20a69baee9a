"""Tests of shop_jobs.py: `pytest examples/testing` (sidequest's fixtures need no set-up)."""

import time

import pytest

import sidequest
from sidequest.launcher import Launcher

import shop_jobs


@pytest.fixture(autouse=True)
def empty_outbox() -> None:
    shop_jobs.OUTBOX.clear()


def test_closing_an_order_sends_a_receipt_then_asks_for_a_review(sidequest_fake):
    shop_jobs.close_order.perform_async(7, "ann@example.com")
    [pushed] = sidequest_fake.pushed(shop_jobs.close_order)
    assert pushed["args"] == [7, "ann@example.com"]

    sidequest_fake.drain()  # close_order, then the jobs it pushed, the scheduled one included

    assert shop_jobs.OUTBOX == ["receipt for order 7 to ann@example.com",
                                "review request for order 7 to ann@example.com"]
    assert sidequest_fake.pushed() == []


def test_what_close_order_pushes(sidequest_fake):
    shop_jobs.close_order(7, "ann@example.com")  # the function itself, run here and now
    [receipt] = sidequest_fake.pushed(shop_jobs.send_receipt)
    assert receipt["queue"] == "mail" and receipt["retry"] == 5
    [review] = sidequest_fake.pushed(shop_jobs.ask_for_review)
    assert sidequest_fake.scheduled_at(review["jid"]) > time.time() + 2 * 24 * 3600


def test_a_bad_address_fails_the_job(sidequest_fake):
    shop_jobs.send_receipt.perform_async(8, "nobody")
    with pytest.raises(ValueError, match="cannot mail"):
        sidequest_fake.drain()


def test_failures_can_be_collected_instead(sidequest_fake):
    shop_jobs.send_receipt.perform_bulk([[8, "nobody"], [9, "bob@example.com"]])
    sidequest_fake.drain(raise_errors=False)
    [failure] = sidequest_fake.failed
    assert failure.payload["args"] == [8, "nobody"] and isinstance(failure.error, ValueError)
    assert shop_jobs.OUTBOX == ["receipt for order 9 to bob@example.com"]


def test_arguments_must_be_json(sidequest_fake):
    with pytest.raises(sidequest.JobArgumentError):
        shop_jobs.send_receipt.perform_async({7}, "ann@example.com")  # a set is not JSON


def test_inline_runs_each_job_when_it_is_pushed(sidequest_inline):
    shop_jobs.close_order.perform_async(9, "bob@example.com")
    assert len(shop_jobs.OUTBOX) == 2


def test_a_real_worker_completes_a_task(sidequest_redis):
    task = sidequest.Task.create("receipts")
    task.add_bulk(shop_jobs.send_receipt.set(retry=False), [[1, "ann@example.com"], [2, "nobody"]])
    task.seal()

    worker = Launcher(sidequest_redis.config.replace(queues=("mail",), fetch_timeout=0.5))
    worker.run()
    try:
        deadline = time.monotonic() + 10
        while not task.status()["done"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()

    assert task.status()["counts"]["finished"] == 1
    [error] = task.events(status="error")
    assert error["params"] == [2, "nobody"] and "cannot mail" in error["error_message"]

"""Celery's `apply_async` options (issue 37 item 7): the ones sidequest has (`priority`,
`time_limit`, besides `countdown`, `eta`, `expires`, `queue`) are honoured by a real worker; each
of Celery's others is refused in one line naming it and what to use instead; a time error names
what the user called (`apply_async`'s eta), not a method behind it."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from conftest import wait_until

import sidequest
from sidequest import JobArgumentError


def _record(tag: str, *values: object) -> None:
    from jobs_for_tests import _r

    _r().rpush("test:porting", json.dumps([tag, *values]))


@sidequest.job(name="PortingPrice")
def price(label: str) -> None:
    _record("price", label)


class Resize(sidequest.Job, name="PortingResize"):
    def perform(self, label: str) -> None:
        _record("resize", label)


@sidequest.job(name="PortingSlow", retry=0)
async def slow(label: str) -> None:
    await asyncio.sleep(30)  # cancelled by its time limit long before


def records(r, tag: str) -> list[str]:
    return [item[1] for item in map(json.loads, r.lrange("test:porting", 0, -1)) if item[0] == tag]


def nothing_written(r) -> bool:
    return r.dbsize() == 0


def test_apply_async_takes_celerys_priority_and_the_worker_runs_that_job_first(client, r, start):
    """`add.apply_async((3, 3), priority=9)` was a bare TypeError. Behind a backlog of 200 jobs, the
    priority-9 ones (a function's, a Job class's, a setter's) run first, in push order."""
    for n in range(200):
        price.set(client=client).apply_async([f"plain-{n}"])
    price.set(client=client).apply_async(["rush-0"], priority=9)
    Resize.set(client=client).apply_async(["rush-1"], priority=9)
    price.set(client=client, queue="default").apply_async(("rush-2",), priority=9)
    start(concurrency=1)
    wait_until(lambda: len(records(r, "price")) + len(records(r, "resize")) == 203, timeout=30)
    order = [label for _, label in map(json.loads, r.lrange("test:porting", 0, -1))]
    assert order[:3] == ["rush-0", "rush-1", "rush-2"]


def test_apply_async_time_limit_is_the_jobs_timeout(client, r, start):
    """Celery's `time_limit` (a hard limit) is sidequest's `timeout`: the job is stopped there."""
    began = time.monotonic()
    jid = slow.set(client=client).apply_async(["late"], time_limit=0.3)
    start()
    wait_until(lambda: r.zcard("dead") == 1, timeout=20)
    [dead] = [json.loads(raw) for raw in r.zrange("dead", 0, -1)]
    assert (dead["jid"], dead["timeout"], dead["error_class"]) == (jid, 0.3, "sidequest.errors.JobTimeoutError")
    assert time.monotonic() - began < 20


# Celery 5's apply_async options (celery/app/task.py) that sidequest does not take, each with a
# word of the way the refusal points to
CELERY_ONLY = [
    ("soft_time_limit", 25, "time_limit"), ("task_id", "order-7", "unique_for"), ("shadow", "x", "name="),
    ("link", "a signature", "|"), ("link_error", "a signature", "on_failure"), ("retry", False, "retry=5"),
    ("retry_policy", {"max_retries": 3}, "retry=5"), ("exchange", "shop", "queue="),
    ("routing_key", "shop.x", "queue="), ("serializer", "pickle", "JSON"), ("compression", "zlib", "JSON"),
    ("headers", {"a": 1}, "custom="), ("ignore_result", True, "result_ttl"), ("add_to_parent", False, "workflow"),
    ("producer", object(), "client="), ("publisher", object(), "client="), ("connection", object(), "client="),
    ("router", object(), "queue="),
]


@pytest.mark.parametrize(("option", "value", "instead"), CELERY_ONLY, ids=[o for o, _, _ in CELERY_ONLY])
def test_apply_async_refuses_each_of_celerys_other_options_with_what_to_use(client, r, option, value, instead):
    with pytest.raises(JobArgumentError) as caught:
        price.set(client=client).apply_async(["x"], **{option: value})
    message = str(caught.value)
    assert message.startswith(f"apply_async does not take Celery's {option}=: ") and instead in message
    assert "\n" not in message
    assert nothing_written(r)


@pytest.mark.parametrize(("given", "expected"), [
    ({"eta": datetime(2030, 1, 1, 9, 0)},
     "apply_async's eta got a naive datetime 2030-01-01T09:00:00; give it a timezone"),
    ({"eta": timedelta(minutes=5)},
     "apply_async's eta takes an epoch time or a datetime; use countdown for a timedelta"),
    ({"countdown": datetime.now(UTC)}, "apply_async's countdown takes seconds or a timedelta; use eta for a datetime"),
    ({"countdown": "soon"}, "apply_async's countdown takes a number of seconds, a timedelta or a datetime, got str"),
    ({"expires": datetime(2030, 1, 1)}, "apply_async's expires got a naive datetime"),
    ({"priority": 10}, "apply_async(priority=...): option 'priority' must be an int from 0 to 9"),
    ({"time_limit": -1}, "apply_async(time_limit=...): option 'timeout' must be a number of seconds above 0"),
    ({"contdown": 5}, "apply_async got an unknown option 'contdown'; did you mean 'countdown'?"),
])
def test_apply_async_errors_name_what_the_user_wrote(client, r, given, expected):
    """`apply_async(eta=naive)` said "perform_at got a naive datetime": a method the user never called."""
    with pytest.raises(JobArgumentError) as caught:
        price.set(client=client).apply_async(["x"], **given)
    assert str(caught.value).startswith(expected)
    assert "perform_at" not in str(caught.value) and "perform_in" not in str(caught.value)
    assert nothing_written(r)

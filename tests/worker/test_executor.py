"""How a job's `perform` is called (`executor`, and the asyncio runner's own call): keyword
arguments pushed with a job reach it, and its hooks, on both runners, for sync, `async def` and
timed jobs and Job classes. In-process workers on the test Redis."""

from __future__ import annotations

import pytest
from conftest import wait_until
from helpers import ran
from jobs_for_tests import KwClass, kw_async, kw_fn_hooks, kw_sync, kw_timed, kw_timed_async

from sidequest.jobs.middleware import Chain


@pytest.fixture
def config(config):
    """Without process-wide server middleware another test may have left: with it, the asyncio
    runner takes every job through its thread pool, and its loop path would go untested."""
    return config.replace(server_middleware=Chain())


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_keyword_arguments_reach_every_kind_of_job(start, client, r, runner):
    start(runner=runner)
    kw_sync.set(client=client).perform_async(1, template="reset")
    kw_async.set(client=client).perform_async(2, template="reset", extra={"a": [1]})
    kw_timed.set(client=client).perform_async(3, extra=None, template="reset")
    kw_timed_async.set(client=client).perform_async(4, template="reset")
    KwClass.set(client=client).perform_async(5, template="reset", locale="fr")
    kw_sync.set(client=client).perform_async(6)  # none: the defaults
    wait_until(lambda: len(ran(r, "kw")) == 6, message="the six jobs to run")
    assert sorted(ran(r, "kw"), key=lambda row: row[1]) == [
        ["sync", 1, "reset", None], ["async", 2, "reset", {"a": [1]}], ["timed", 3, "reset", None],
        ["timed-async", 4, "reset", None], ["class", 5, "reset", {"locale": "fr"}], ["sync", 6, "welcome", None]]


@pytest.mark.parametrize("runner", ["threads", "asyncio"])
def test_hooks_get_the_keyword_arguments_too(start, client, r, runner):
    start(runner=runner)
    KwClass.set(client=client).perform_async(1, template="t")
    KwClass.set(client=client).perform_async(2, fail=True)
    kw_fn_hooks.set(client=client).perform_async(3, template="f")
    wait_until(lambda: ran(r, "kw-after-ok") and ran(r, "kw-after-fail") and ran(r, "kw-fn-after-ok"),
               message="the three hooks")
    assert ran(r, "kw-after-ok") == [[[1], {"template": "t"}]]
    assert ran(r, "kw-after-fail") == [["ValueError", [2], {"fail": True}]]
    assert ran(r, "kw-fn-after-ok") == [[[3], {"template": "f"}]]

"""A workflow's results as one, run by real worker processes: `Workflow.results()` (its final
steps' return values, in order) and Celery's `GroupResult` (`group(...).apply_async().get()`)."""

from __future__ import annotations

import threading

import pytest
import redis
from conftest import wait_until
from jobs_for_tests import wf_add, wf_fail, wf_gate, wf_notify, wf_step, wf_sub

import sidequest
from features.test_workflows import DEADLINE, wclient, wf_url, workers, wr  # noqa: F401  (fixtures)
from sidequest import Client, Config, GroupResult, JobFailed, Workflow, chain, chord, group, workflow


def test_a_groups_results_come_as_one_list_in_order(wclient):  # noqa: F811
    """Issue 30 item 5: a group's results could be read only step by step; `apply_async()`
    returns Celery's GroupResult, whose `get` waits for them all, and `GroupResult(id)` finds it again."""
    handle = group([wf_add.si(i, i, "results") for i in range(20)]).apply_async(client=wclient)
    assert isinstance(handle.id, str) and isinstance(handle, GroupResult)
    assert handle.get(timeout=DEADLINE) == [2 * i for i in range(20)]
    assert handle.ready()
    assert GroupResult(handle.id, wclient).get(timeout=0) == [2 * i for i in range(20)]
    assert Workflow.find(handle.id, wclient).results(timeout=0) == [2 * i for i in range(20)]


def test_a_chord_or_a_chains_results_are_its_last_steps(wclient):  # noqa: F811
    """A chord's results are its callback's, in a one-item list: the header's went to the callback."""
    chord_id = chord([wf_add.si(i, 1, "results") for i in (1, 2)], wf_notify.s("ops")).perform_async(client=wclient)
    chain_id = chain(wf_sub.s(10, 1), wf_sub.s(100)).perform_async(client=wclient)
    graph_id = (workflow("two ends").add("a", wf_step.si("results", "a"))
                .add("b", wf_step.s("results", "b"), after=["a"]).add("c", wf_step.si("results", "c"))
                .perform_async(client=wclient))
    assert Workflow.find(chord_id, wclient).results(timeout=DEADLINE) == [[[2, 3], "ops", False]]
    assert Workflow.find(chain_id, wclient).results(timeout=DEADLINE) == [-91]
    assert Workflow.find(graph_id, wclient).results(timeout=DEADLINE) == ["b", "c"]  # the steps nothing follows


def test_a_chains_and_a_chords_handle_gets_the_last_value_as_celerys_asyncresult(wclient):  # noqa: F811
    """`chain(...).apply_async().get()` is Celery's last value, not a list: -91; a chord's is its
    callback's; a chain that ends in a group gives that group's list; `ChainResult(id)` finds it again."""
    handle = chain(wf_sub.s(10, 1), wf_sub.s(100)).apply_async(client=wclient)
    assert isinstance(handle, sidequest.ChainResult)
    assert handle.get(timeout=DEADLINE) == -91
    assert handle.ready() and sidequest.ChainResult(handle.id, wclient).get(timeout=0) == -91
    chorded = chord([wf_add.si(i, 1, "results") for i in (1, 2)], wf_notify.s("ops")).apply_async(client=wclient)
    assert chorded.get(timeout=DEADLINE) == [[2, 3], "ops", False]
    fanned = chain(wf_sub.s(10, 1), group([wf_sub.s(1), wf_sub.s(2)])).apply_async(client=wclient)
    assert fanned.get(timeout=DEADLINE) == [8, 7]


def test_waiting_for_a_groups_results_blocks_until_the_last_ends(wf_url, wclient, wr):  # noqa: F811
    """It waits on the steps' notify lists (as `result` does), not in a polling loop: the waiter's
    connection sits in a blocking BLMOVE until the last step ends, and a deadline that passes
    first is a TimeoutError naming the step."""
    tag = "results-gate"
    handle = group([wf_add.si(1, 1, "results"), wf_gate.si(tag, 7)]).apply_async(client=wclient)
    with pytest.raises(TimeoutError, match=r"step '2' .* not ended after 0.2 s"):
        handle.get(timeout=0.2)
    named = Client(Config(redis_url=wf_url), redis_client=redis.Redis.from_url(wf_url, client_name="group-waiter"))
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(GroupResult(handle.id, named).get(timeout=DEADLINE)))
    waiter.start()
    try:
        wait_until(lambda: any(c.get("name") == "group-waiter" and c.get("cmd") == "blmove" and "b" in c["flags"]
                               for c in wr.client_list()), DEADLINE, 0.02, "the waiter to block")
    finally:
        wr.set(f"test:gate:{tag}", "1", ex=600)
        waiter.join(DEADLINE)
    assert got == [[2, 7]]


def test_a_failed_step_raises_as_celery_does_with_propagate(wclient):  # noqa: F811
    handle = group([wf_add.si(1, 1, "results"), wf_fail.si("results", "boom")]).apply_async(client=wclient)
    with pytest.raises(JobFailed, match="step boom <failed> on purpose"):
        handle.get(timeout=DEADLINE)
    wait_until(handle.ready, DEADLINE, 0.05, "the group to end")
    with pytest.raises(LookupError, match="does not exist"):
        GroupResult("0" * 24, wclient).get(timeout=1)
    assert sidequest.GroupResult is GroupResult


def test_a_step_that_never_ran_says_which_step_failed(wclient):  # noqa: F811
    """A chord whose header step failed never runs its callback: `results()` says so, naming the
    step that failed, not "job <jid> was cancelled" (nobody cancelled anything)."""
    chord_id = chord([wf_add.si(1, 1, "results"), wf_fail.si("results", "header")],
                     wf_notify.s("ops")).perform_async(client=wclient)
    flow = Workflow.find(chord_id, wclient)
    with pytest.raises(sidequest.JobFailed) as caught:  # Celery's chord raises its header's failure too
        flow.results(timeout=DEADLINE)
    assert str(caught.value) == (f"workflow {chord_id}: step '3' (WfNotify) never ran: "
                                 "step '2' failed (sidequest.errors.JobFailed: step header <failed> on purpose)")
    with pytest.raises(sidequest.JobFailed, match=r"step '3' .* never ran: step '2' failed"):
        flow.result("3", timeout=DEADLINE)

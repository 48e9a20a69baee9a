"""Workflows: chains, groups, chords and graphs run by real worker processes, each step enqueued
exactly once, the failure policies, cancel, and what the admin API and the CLI show."""

from __future__ import annotations

import html
import json
import re
import subprocess
from collections import Counter

import conftest
import pytest
import redis
from click.testing import CliRunner
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until
from helpers import WorkerProcess, queue_items, ran
from jobs_for_tests import (
    WfPayloadKwargs,
    wf_add,
    wf_fail,
    wf_flaky,
    wf_gate,
    wf_notify,
    wf_step,
    wf_sub,
    wf_sum,
    wf_until_cancelled,
)

import sidequest
from sidequest import Client, Config, Workflow, chain, chord, group, workflow
from sidequest.api import DeadSet
from sidequest.api.workflows import workflow_detail
from sidequest.cli import main
from sidequest.errors import JobArgumentError
from sidequest.store import keys

DEADLINE = 90.0  # two worker processes on a shared two-core machine: generous, ends as soon as it holds


# -- two real worker processes of 10 threads each, for the whole module --------------------------
@pytest.fixture(scope="module")
def wf_url(redis_server):
    url = redis_server.url(next(conftest._dbs))
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="module")
def workers(wf_url):
    r = redis.Redis.from_url(wf_url)
    procs = [WorkerProcess(wf_url, "-c", "10") for _ in range(2)]
    try:
        for proc in procs:
            proc.wait_registered(r)
        yield procs
    finally:
        for proc in procs:
            proc.stop()
        r.close()


@pytest.fixture
def wr(wf_url, workers):
    client = redis.Redis.from_url(wf_url)
    yield client
    client.close()


@pytest.fixture
def wclient(wf_url, workers):
    return Client(Config(redis_url=wf_url))


def runs(r, tag: str) -> list[list]:
    """What the workflow jobs of this test recorded, in order: [step, values...]."""
    return [item[1:] for item in ran(r, "wf") if item[0] == tag]


def ended(client: Client, workflow_id: str) -> dict:
    return wait_until(lambda: (s := Workflow.find(workflow_id, client).status())["done"] and s,
                      DEADLINE, 0.05, f"workflow {workflow_id} to end")


def step_states(client: Client, workflow_id: str) -> dict[str, str]:
    return {s["name"]: s["status"] for s in Workflow.find(workflow_id, client).steps()}


# -- canvas -----------------------------------------------------------------------------------------
def test_a_chain_passes_each_result_to_the_next_step_in_order(wclient, wr):
    workflow_id = chain(wf_add.s(1, 2, "chain"), wf_add.s(10, "chain"), wf_add.s(100, "chain")).perform_async(
        name="add up", client=wclient)
    status = ended(wclient, workflow_id)
    assert status["state"] == "succeeded" and status["name"] == "add up"
    assert status["counts"]["done"] == 3 and status["total"] == 3
    assert runs(wr, "chain") == [["add", 1, 2], ["add", 3, 10], ["add", 13, 100]]
    flow = Workflow.find(workflow_id, wclient)
    assert [s["result"] for s in flow.steps()] == [3, 13, 113]
    assert flow.result("3", timeout=5) == 113 == sidequest.result(flow.steps()[2]["jid"], client=wclient)


def test_a_group_of_100_runs_each_step_once(wclient, wr):
    workflow_id = group([wf_add.si(i, 0, "group") for i in range(100)]).perform_async(client=wclient)
    status = ended(wclient, workflow_id)
    assert status["state"] == "succeeded" and status["counts"]["done"] == 100
    assert sorted(values[1] for values in runs(wr, "group")) == list(range(100))


def test_a_chord_callback_gets_the_group_results_in_order_once(wclient, wr):
    workflow_id = chord([wf_add.si(i, i, "chord") for i in range(100)], wf_sum.s("chord")).perform_async(
        client=wclient)
    ended(wclient, workflow_id)
    sums = [values for values in runs(wr, "chord") if values[0] == "sum"]
    assert sums == [["sum", [2 * i for i in range(100)]]]
    assert Workflow.find(workflow_id, wclient).result("101") == 9900


def test_a_chain_passes_the_previous_result_first_as_celery_does(wclient):
    """Issue 30 item 2: a mutable step got its dependency's result as its last argument, so
    Celery's `chain(sub.s(10, 1), sub.s(100))` ran sub(100, 9) = 91; Celery runs sub(9, 100) = -91."""
    workflow_id = chain(wf_sub.s(10, 1), wf_sub.s(100)).perform_async(client=wclient)
    flow = Workflow.find(workflow_id, wclient)
    assert flow.result("2", timeout=DEADLINE) == -91
    assert [s["params"] for s in flow.steps()] == [[10, 1], [100]]  # the arguments given, as written


def test_a_chord_callback_and_a_step_after_a_group_get_the_list_first(wclient):
    """Issue 30 item 2: Celery's `notify.s("ops")` as a chord's callback runs notify(results, "ops");
    it ran notify("ops", results). The same for a step after a group in a chain; `.si` is unchanged."""
    header = [wf_add.si(i, i, "notify") for i in (1, 2, 3)]
    callback = Workflow.find(chord(header, wf_notify.s("ops")).perform_async(client=wclient), wclient)
    after_group = Workflow.find(chain(wf_sub.s(10, 1), group([wf_sub.s(1), wf_sub.s(2)]),
                                      wf_notify.s("ops")).perform_async(client=wclient), wclient)
    immutable = Workflow.find(chord(header, wf_notify.si([0], "exact")).perform_async(client=wclient), wclient)
    assert callback.result("4", timeout=DEADLINE) == [[2, 4, 6], "ops", False]
    assert after_group.result("4", timeout=DEADLINE) == [[8, 7], "ops", False]
    assert immutable.result("4", timeout=DEADLINE) == [[0], "exact", False]


def test_a_steps_keyword_arguments_travel_in_its_payload(wclient):
    """Issue 30 item 2: `.s()` and `.si()` refused keyword arguments; a step's kwargs are now its
    payload's top-level "kwargs" (the wire form of keyword arguments), for a first step pushed at
    start and for a step the workflow releases later."""
    flow = Workflow.find(chain(WfPayloadKwargs.s(1, mode="first"), WfPayloadKwargs.s(mode="next"),
                               WfPayloadKwargs.si(mode="exact")).perform_async(client=wclient), wclient)
    assert flow.result("3", timeout=DEADLINE) == {"args": [], "kwargs": {"mode": "exact"}}
    assert [s["result"] for s in flow.steps()[:2]] == [
        {"args": [1], "kwargs": {"mode": "first"}}, {"args": [{"args": [1], "kwargs": {"mode": "first"}}],
                                                      "kwargs": {"mode": "next"}}]


def test_ten_dependencies_finishing_at_once_release_their_dependent_exactly_once(wclient, wr):
    for round_ in range(3):
        tag = f"gate{round_}"
        workflow_id = chord([wf_gate.si(tag, i) for i in range(10)], wf_sum.s(tag)).perform_async(client=wclient)
        flow = Workflow.find(workflow_id, wclient)
        wait_until(lambda f=flow: f.status()["counts"]["running"] == 10, DEADLINE, 0.05, "10 gates running at once")
        wr.set(f"test:gate:{tag}", "1", ex=600)  # every gate is released by the same write
        assert ended(wclient, workflow_id)["state"] == "succeeded"
        assert [v for v in runs(wr, tag) if v[0] == "sum"] == [["sum", list(range(10))]]
        assert Counter(v[1] for v in runs(wr, tag) if v[0] == "gate") == Counter(range(10))


def test_a_graph_runs_each_step_after_its_dependencies(wclient, wr):
    flow = (workflow("diamond")
            .add("a", wf_step.si("dag", "a"))
            .add("b", wf_step.s("dag", "b"), after=["a"])
            .add("c", wf_step.s("dag", "c"), after=["a"])
            .add("d", wf_step.s("dag", "d"), after=["c", "b"])
            .add("e", wf_step.si("dag", "e"), after=["d"]))
    workflow_id = flow.perform_async(client=wclient)
    assert ended(wclient, workflow_id)["state"] == "succeeded"
    seen = runs(wr, "dag")
    order = [values[0] for values in seen]
    assert order[0] == "a" and set(order[1:3]) == {"b", "c"} and order[3:] == ["d", "e"]
    assert ["b", "a"] in seen and ["c", "a"] in seen and ["d", ["c", "b"]] in seen and ["e"] in seen


# -- failures and cancel ----------------------------------------------------------------------------
def failing(tag: str, policy):
    return (workflow(f"fails: {tag}")
            .add("a", wf_step.si(tag, "a"))
            .add("b", wf_fail.s(tag, "b").on_failure(policy), after=["a"])
            .add("c", wf_step.s(tag, "c"), after=["b"]))


def test_a_failing_step_under_stop_fails_the_workflow_and_the_rest_never_runs(wclient, wr):
    workflow_id = failing("stop", "stop").perform_async(client=wclient)
    status = ended(wclient, workflow_id)
    assert status["state"] == "failed" and status["failed_step"] == "b"
    assert step_states(wclient, workflow_id) == {"a": "done", "b": "failed", "c": "skipped"}
    assert [v[0] for v in runs(wr, "stop")] == ["a", "b"]
    [b] = [s for s in Workflow.find(workflow_id, wclient).steps() if s["name"] == "b"]
    assert b["error"] == "sidequest.errors.JobFailed: step b <failed> on purpose" and b["result"] is None
    with pytest.raises(sidequest.JobFailed, match=r"step 'c' .* never ran: step 'b' failed"):  # no waiter hangs
        Workflow.find(workflow_id, wclient).result("c", timeout=5)


def test_a_failing_step_under_continue_lets_its_dependents_run_with_none(wclient, wr):
    workflow_id = failing("continue", "continue").perform_async(client=wclient)
    status = ended(wclient, workflow_id)
    assert status["state"] == "failed" and status["failed_step"] is None  # it ended with a failure in it
    assert step_states(wclient, workflow_id) == {"a": "done", "b": "failed", "c": "done"}
    assert runs(wr, "continue") == [["a"], ["b", "a"], ["c", None]]


def test_a_failing_step_with_a_compensating_job_runs_it_once_and_stops(wclient, wr):
    """Issue 28 item 17: the compensating job's status was read as soon as it had recorded its
    run; it still reads "running" while it waits for its acknowledgement in a reserved list, and
    for up to a heartbeat after it ended if a beat wrote it into its process's work hash while it
    ran. Its status is read once it has left both."""
    workflow_id = failing("undo", wf_step.si("undo", "compensate")).perform_async(client=wclient)
    status = ended(wclient, workflow_id)
    assert status["state"] == "failed" and status["compensation"]
    wait_until(lambda: ["compensate"] in runs(wr, "undo"), DEADLINE, message="the compensating job")
    final = wait_until(lambda: (s := sidequest.status(status["compensation"], client=wclient)) not in (
        "queued", "running") and s, DEADLINE, 0.02, "the compensating job to end")
    assert runs(wr, "undo") == [["a"], ["b", "a"], ["compensate"]]
    assert step_states(wclient, workflow_id)["c"] == "skipped"
    assert final in ("unknown", "done")


def pending(r, workflow_id: str, step: str) -> int:
    """How many of `step`'s dependencies are not resolved yet."""
    return int(r.hget(keys.workflow_keys(workflow_id)[3], step))


def retry_dead(client: Client, jid: str) -> None:
    """An operator's retry of the dead job `jid` (the admin API's, as the CLI and the dashboard do)."""
    entry = wait_until(lambda: DeadSet(client=client).find_job(jid), DEADLINE, 0.05, f"{jid} in the dead set")
    assert entry.retry()


def test_an_operators_retry_of_a_failed_continue_step_releases_its_dependents_once(wclient, wr):
    """Issue 28 item 4: a step under "continue" resolved its dependents when it failed; an
    operator's retry of it (failing again, then succeeding) released them a second time, so
    "last" ran while "slow" still ran, and its pending count went to -1."""
    tag = "retried-continue"
    workflow_id = (workflow("retry a continue step")
                   .add("flaky", wf_flaky.si(tag, "flaky").on_failure("continue"))
                   .add("slow", wf_gate.si(tag, 1))
                   .add("last", wf_step.s(tag, "last"), after=["flaky", "slow"])
                   .perform_async(client=wclient))
    flow = Workflow.find(workflow_id, wclient)
    jid = {s["name"]: s["jid"] for s in flow.steps()}["flaky"]
    try:
        wait_until(lambda: step_states(wclient, workflow_id) == {"flaky": "failed", "slow": "running",
                                                                 "last": "waiting"},
                   DEADLINE, 0.05, "flaky to fail while slow runs")
        assert pending(wr, workflow_id, "last") == 1
        retry_dead(wclient, jid)  # it fails again: back in dead
        wait_until(lambda: len([v for v in runs(wr, tag) if v == ["flaky"]]) == 2
                   and step_states(wclient, workflow_id)["flaky"] == "failed", DEADLINE, 0.05, "the second failure")
        assert step_states(wclient, workflow_id)["last"] == "waiting" and pending(wr, workflow_id, "last") == 1
        wr.set(f"test:ok:{tag}", "1", ex=600)
        retry_dead(wclient, jid)  # it succeeds now: its result is kept, its dependents are not released again
        wait_until(lambda: step_states(wclient, workflow_id)["flaky"] == "done", DEADLINE, 0.05, "flaky to succeed")
        assert step_states(wclient, workflow_id)["last"] == "waiting" and pending(wr, workflow_id, "last") == 1
        assert not [v for v in runs(wr, tag) if v[0] == "last"]
    finally:
        wr.set(f"test:gate:{tag}", "1", ex=600)
    status = ended(wclient, workflow_id)
    assert [v for v in runs(wr, tag) if v[0] == "last"] == [["last", ["flaky", 1]]]  # the latest results
    assert pending(wr, workflow_id, "last") == 0
    assert status["state"] == "succeeded" and status["counts"]["done"] == 3


def test_a_retried_step_past_the_recovery_limit_releases_its_dependents_once(start, client, r):
    """Issue 28 item 4: a "continue" step whose process died past `max_recoveries` went to dead
    and resolved its dependents; an operator's retry of it that succeeded released them again,
    so "last" ran while "slow" still ran."""
    tag = "past-recoveries"
    workflow_id = (workflow("recovered to dead")
                   .add("flaky", wf_flaky.si(tag, "flaky").on_failure("continue"))
                   .add("slow", wf_gate.si(tag, 1))
                   .add("last", wf_step.s(tag, "last"), after=["flaky", "slow"])
                   .perform_async(client=client))
    jid = {s["name"]: s["jid"] for s in Workflow.find(workflow_id, client).steps()}["flaky"]
    [held] = [raw for raw in r.lrange("queue:default", 0, -1) if json.loads(raw)["jid"] == jid]
    r.lrem("queue:default", 1, held)  # as a process that took it and died leaves it
    r.lpush("sidequest:reserved:ghost:1:000000000000:0", held)
    r.sadd("sidequest:reservations", "sidequest:reserved:ghost:1:000000000000:0")
    try:
        start(max_recoveries=0, recovery_interval=0.5, concurrency=3)
        wait_until(lambda: step_states(client, workflow_id) == {"flaky": "failed", "slow": "running",
                                                               "last": "waiting"},
                   DEADLINE, 0.05, "flaky recovered to dead while slow runs")
        assert pending(r, workflow_id, "last") == 1
        r.set(f"test:ok:{tag}", "1", ex=600)
        retry_dead(client, jid)  # a job recovered once runs alone (a suspect): after slow, here
    finally:
        r.set(f"test:gate:{tag}", "1", ex=600)
    assert ended(client, workflow_id)["state"] == "succeeded"
    assert step_states(client, workflow_id) == {"flaky": "done", "slow": "done", "last": "done"}
    assert len([v for v in runs(r, tag) if v[0] == "last"]) == 1 and pending(r, workflow_id, "last") == 0


def test_a_workflow_failed_by_continue_steps_succeeds_once_a_retry_makes_them_done(wclient, wr):
    """Issue 28 item 4, as a Sidekiq batch's success callback fires once its failed jobs succeed
    on retry: a workflow that ended failed only through "continue" steps succeeds when an
    operator's retries make every step done; its dependents ran once, with None."""
    tag = "retried-after-end"
    workflow_id = (workflow("retried after its end")
                   .add("flaky", wf_flaky.si(tag, "flaky").on_failure("continue"))
                   .add("next", wf_step.s(tag, "next"), after=["flaky"])
                   .perform_async(client=wclient))
    assert ended(wclient, workflow_id)["state"] == "failed"
    wr.set(f"test:ok:{tag}", "1", ex=600)
    retry_dead(wclient, next(s["jid"] for s in Workflow.find(workflow_id, wclient).steps() if s["name"] == "flaky"))
    status = wait_until(lambda: (s := Workflow.find(workflow_id, wclient).status())["state"] == "succeeded" and s,
                        DEADLINE, 0.05, "the workflow to succeed")
    assert status["counts"]["done"] == 2 and status["done"]
    assert [v for v in runs(wr, tag) if v[0] == "next"] == [["next", None]]


def test_a_payload_naming_a_workflow_step_with_another_jid_changes_nothing(wclient, wr):
    """Issue 28 item 11: any producer could mark another workflow's step done by pushing a job
    whose payload names its `workflow_id` and `workflow_step`; a step's fate now applies only
    to the job whose jid the workflow recorded for it."""
    tag = "forged"
    workflow_id = (workflow("forged step")
                   .add("a", wf_gate.si(tag, 1))
                   .add("b", wf_step.s(tag, "b"), after=["a"])
                   .perform_async(client=wclient))
    try:
        wait_until(lambda: step_states(wclient, workflow_id)["a"] == "running", DEADLINE, 0.05, "a to run")
        forged = "f" * 24
        wr.lpush("queue:default", json.dumps({
            "class": "WfStep", "args": [tag, "forged"], "queue": "default", "jid": forged, "retry": False,
            "result_ttl": 600, "workflow_id": workflow_id, "workflow_step": "a", "created_at": 1.0,
            "enqueued_at": 1.0}))
        # its status record is written in the call that applies its fate to the workflow
        wait_until(lambda: sidequest.status(forged, client=wclient) == "done", DEADLINE, 0.05, "the forged job")
        assert step_states(wclient, workflow_id) == {"a": "running", "b": "waiting"}
        assert [v for v in runs(wr, tag) if v[0] == "b"] == []
    finally:
        wr.set(f"test:gate:{tag}", "1", ex=600)
    assert ended(wclient, workflow_id)["state"] == "succeeded"
    assert [v for v in runs(wr, tag) if v[0] == "b"] == [["b", 1]]


def test_cancel_stops_the_workflow_and_the_running_step_sees_the_flag(wclient, wr):
    flow_id = (workflow("to cancel")
               .add("long", wf_until_cancelled.si("cancel"))
               .add("next", wf_step.si("cancel", "next"), after=["long"])
               .add("side", wf_step.si("cancel", "side"))
               .add("after side", wf_step.s("cancel", "after side"), after=["side", "long"])).perform_async(
                   client=wclient)
    wait_until(lambda: ["started"] in runs(wr, "cancel"), DEADLINE, message="the long step to start")
    flow = Workflow.find(flow_id, wclient)
    assert flow.cancel() is True
    status = ended(wclient, flow_id)
    assert status["state"] == "cancelled"
    assert ["saw cancel"] in runs(wr, "cancel") and ["next"] not in runs(wr, "cancel")
    states = step_states(wclient, flow_id)
    assert states["long"] == "cancelled" and states["next"] == "skipped" and states["after side"] == "skipped"
    assert flow.cancel() is False  # it has ended: nothing to do


def test_every_key_of_a_workflow_expires(wclient, wr):
    workflow_id = chain(wf_add.s(1, 0, "ttl"), wf_add.s(2, "ttl")).perform_async(client=wclient, ttl=3600)
    ended(wclient, workflow_id)
    for key in [*keys.workflow_keys(workflow_id), keys.WORKFLOWS_RECENT]:
        assert 0 < wr.ttl(key) <= 3600, key
    for step in Workflow.find(workflow_id, wclient).steps():
        assert 0 < wr.ttl(keys.status(step["jid"])) <= 3600


# -- without workers: building, checking, reading ---------------------------------------------------
def test_only_the_first_steps_are_pushed_and_arguments_are_checked_at_start(client, r):
    workflow_id = chain(wf_add.s(1, 0, "x"), wf_add.s(2, "x")).perform_async(client=client)
    [payload] = queue_items(r)
    assert payload["class"] == "WfAdd" and payload["args"] == [1, 0, "x"]
    assert payload["workflow_id"] == workflow_id and payload["workflow_step"] == "1"
    second = Workflow.find(workflow_id, client).steps()[1]["jid"]
    assert sidequest.status(second, client=client) == "scheduled"  # waiting for its dependency
    assert Workflow.find(workflow_id, client).status()["counts"] == {
        "waiting": 1, "enqueued": 1, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "skipped": 0}
    with pytest.raises(JobArgumentError):
        chain(wf_add.s(1, 0, "x"), wf_add.s(2, 3, "x")).perform_async(client=client)  # no room for the result
    with pytest.raises(ValueError, match="not in the workflow yet"):
        workflow().add("b", wf_add.si(1, 0, "x"), after=["a"])
    with pytest.raises(ValueError, match="on_failure takes"):
        wf_add.s(1, "x").on_failure("ignore")  # type: ignore[arg-type]
    assert len(queue_items(r)) == 1  # a refused workflow writes nothing
    assert Workflow.find("0" * 24, client) is None


def test_a_steps_arguments_are_checked_in_celerys_order_and_say_where_the_result_goes(client, r):
    with pytest.raises(JobArgumentError, match=r"^step 2: job WfSub takes \(x, y\), got 3 arguments \[None, 2, 3\]: "
                                               r"too many .* the place of its dependencies' results"):
        chain(wf_sub.s(10, 1), wf_sub.s(2, 3)).perform_async(client=client)
    with pytest.raises(JobArgumentError, match=r"^step 2: job WfNotify takes .* unexpected keyword argument 'urgnt'"):
        chain(wf_sub.s(10, 1), wf_notify.s("ops", urgnt=True)).perform_async(client=client)
    with pytest.raises(JobArgumentError, match=r"^job WfNotify: keyword argument 'urgent' \(set\) is not native JSON"):
        chain(wf_sub.s(10, 1), wf_notify.s("ops", urgent={1})).perform_async(client=client)
    assert queue_items(r) == []
    chain(wf_sub.s(10, 1), wf_notify.s(channel="ops")).perform_async(client=client)  # kwargs may fill a positional
    assert [p["args"] for p in queue_items(r)] == [[10, 1]]


def test_cancel_removes_waiting_steps_from_their_queue(client, r):
    workflow_id = group([wf_add.si(1, 0, "q"), wf_add.si(2, 0, "q")]).perform_async(client=client)
    assert Workflow.find(workflow_id, client).cancel() is True
    assert queue_items(r) == []
    status = Workflow.find(workflow_id, client).status()
    assert status["state"] == "cancelled" and status["done"] and status["counts"]["cancelled"] == 2


def test_the_admin_api_and_the_cli_show_a_workflow(client, r, redis_url):
    workflow_id = chord([wf_add.si(1, 0, "cli")], wf_sum.s("cli")).perform_async(name="<b>report</b>", client=client)
    detail = workflow_detail(workflow_id, client)
    assert detail is not None and detail["name"] == "<b>report</b>"
    assert [(s["name"], s["status"], s["after"]) for s in detail["steps"]] == [
        ("1", "enqueued", []), ("2", "waiting", ["1"])]
    runner = CliRunner()
    shown = runner.invoke(main, ["workflows", "show", workflow_id, "--json", "--redis-url", redis_url])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["steps"][1]["job"] == "WfSum"
    table = runner.invoke(main, ["workflows", "show", workflow_id, "--redis-url", redis_url])
    assert table.exit_code == 0 and "WfSum" in table.output and "waiting" in table.output
    missing = runner.invoke(main, ["workflows", "show", "nope", "--redis-url", redis_url])
    assert missing.exit_code == 2 and "no workflow" in missing.output


def test_the_dashboard_shows_where_a_steps_results_go_and_its_kwargs(client, r):
    """Issue 30 item 2: the Arguments of a step were its own, so `sub.s(100)` read as sub(100);
    a step given its dependencies' results shows them first, and its kwargs after."""
    from starlette.testclient import TestClient

    from sidequest.web import create_app

    workflow_id = chord([wf_sub.si(1, 2)], wf_notify.s("ops", urgent=True)).perform_async(client=client)
    [first, callback] = Workflow.find(workflow_id, client).steps()
    assert (first["passed"], first["kwargs"], callback["passed"], callback["kwargs"]) == (
        "none", {}, "list", {"urgent": True})
    page = TestClient(create_app(client)).get(f"/workflows/{workflow_id}", headers={"Accept": "text/html"}).text
    row = page[page.index('<tr data-step="2">'):]
    row = html.unescape(re.sub(r"<[^>]+>", "", row[:row.index("</tr>")]))
    assert '[results], ["ops"] {"urgent": true}' in row, row


def test_the_cli_lists_the_recent_workflows(client, r, redis_url):
    """Issue 28 item 15: `sidequest workflows` had `show ID` only, so finding a workflow's id took
    code. `workflows list` (and `workflows` alone) lists the recent ones, newest first."""
    first = chord([wf_add.si(1, 0, "list")], wf_sum.s("list")).perform_async(name="nightly report", client=client)
    second = group([wf_add.si(2, 0, "list"), wf_add.si(3, 0, "list")]).perform_async(client=client)
    Workflow.find(second, client).cancel()
    runner = CliRunner()
    listed = runner.invoke(main, ["workflows", "list", "--json", "--redis-url", redis_url])
    assert listed.exit_code == 0, listed.output
    found = json.loads(listed.output)
    assert found["total"] == 2 and [w["id"] for w in found["workflows"]] == [second, first]
    assert found["workflows"][1]["counts"]["waiting"] == 1 and found["workflows"][0]["state"] == "cancelled"
    for args in (["workflows", "list"], ["workflows"]):
        table = runner.invoke(main, [*args, "--redis-url", redis_url])
        assert table.exit_code == 0, table.output
        rows = [line for line in table.output.splitlines() if first in line or second in line]
        assert len(rows) == 2 and second in rows[0] and "cancelled" in rows[0] and "2 cancelled" in rows[0]
        assert "nightly report" in rows[1] and "running" in rows[1] and "1 waiting, 1 enqueued" in rows[1]
    assert len(json.loads(runner.invoke(main, ["workflows", "list", "--limit", "1", "--json",
                                               "--redis-url", redis_url]).output)["workflows"]) == 1


# -- the docs ---------------------------------------------------------------------------------------
def test_the_workflows_docs_examples_run(tmp_path, redis_url):
    text = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    named = {block.splitlines()[0].split()[1]: block for block in blocks if block.startswith("# ")}
    assert set(named) == {"media.py", "start.py"}
    for name, block in named.items():
        (tmp_path / name).write_text(block, encoding="utf-8")
    env = python_env(REDIS_URL=redis_url)
    worker = subprocess.Popen([PYTHON, "-m", "sidequest.cli", "worker", "-r", "media", "-c", "5"], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run([PYTHON, "start.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=4 * STARTUP)
    finally:
        worker.terminate()
        worker.wait(STARTUP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["succeeded -91", "[2, 4, 6] ['sum: 12']", "[2, 4, 6] True", "sum: 12",
                                        "-91 sum: 6", "failed skipped",
                                        "publish succeeded"]


"""`sidequest steps JID [--reset [NAME]]` (cli/admin/steps.py): a job's recorded steps as a table
or JSON, an operator's reset of one step or all, and one-line errors for a job with none."""

import json

from conftest import wait_until
from features.steps.test_run import BODIES, steps_then_fail
from helpers import cli_ok as ok

from sidequest.client import sync_client


def test_steps_shows_and_resets_a_waiting_jobs_steps(cli, client, start, r, monkeypatch):
    monkeypatch.setattr(sync_client, "_default", client)
    start()
    jid = steps_then_fail.set(client=client).perform_async(1)
    wait_until(lambda: r.zcard("retry") == 1, 10, message="the retry")
    table = ok(cli("steps", jid))
    assert "StepsThenFail" in table and "done" in table and '{"step":"a"}' in table
    shown = json.loads(ok(cli("steps", jid, "--json")))
    assert [(s["name"], s["state"], s["attempts"], s["result"]) for s in shown["steps"]] == [
        ("a", "done", 1, {"step": "a"})]
    missing = cli("steps", jid, "--reset", "nope")
    assert missing.exit_code == 2 and "has no recorded step 'nope'" in missing.output
    assert "forgot 1 step of job" in ok(cli("steps", jid, "--reset", "a"))
    assert json.loads(ok(cli("steps", jid, "--json")))["steps"] == []
    assert cli("steps", jid, "--reset").exit_code == 2  # no step left to forget
    r.delete(BODIES)


def test_steps_of_a_job_without_records_is_one_line(cli):
    result = cli("steps", "0" * 24)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: job {'0' * 24} has no recorded steps (it used none, or it has ended, which removes them)"]


def test_steps_shows_a_job_waiting_for_an_event(cli, client, start, r, monkeypatch):
    from features.steps.test_waits import approval

    monkeypatch.setattr(sync_client, "_default", client)
    start()
    jid = approval.set(client=client).perform_async(60)
    wait_until(lambda: r.zcard("schedule") == 1, 10, message="the job to wait")
    table = ok(cli("steps", jid))
    assert "waiting" in table and "for event 'approved' until" in table
    shown = json.loads(ok(cli("steps", jid, "--json")))
    assert shown["waiting"] == "approved"
    assert [(s["name"], s["kind"], s["state"], s["event"]) for s in shown["steps"]] == [
        ("asked", "step", "done", None), ("approved", "wait", "waiting", "approved")]

"""Hooks that run on every failure (error handlers, after_failed) and after a success, in a worker."""

from conftest import wait_until
from helpers import ran, reserved
from jobs_for_tests import WithHooks, fn_with_hooks


def test_job_hooks_run_after_each_outcome_is_written(start, client, r, caplog):
    launcher = start()
    client.push(WithHooks, [False])
    client.push(WithHooks, [True])
    wait_until(lambda: r.zcard("dead") == 1, message="the failing one dead after its retry")
    wait_until(lambda: len(ran(r, "after-fail")) == 2)
    assert ran(r, "after-ok") == [[False]]
    # every failed attempt, with the exception and the arguments (retry_count as filed)
    assert ran(r, "after-fail") == [["ValueError", None, True], ["ValueError", 0, True]]
    wait_until(lambda: not reserved(r, launcher.identity))


def test_function_hooks_and_a_broken_hook_is_only_logged(start, client, r, caplog):
    start()
    client.push(fn_with_hooks, [False])
    client.push(fn_with_hooks, [True])
    wait_until(lambda: ran(r, "fn-after-ok") and ran(r, "fn-after-fail"))
    assert ran(r, "fn-after-ok") == [[False]] and ran(r, "fn-after-fail") == [["'fn asked to fail'", True]]
    wait_until(lambda: "after_failed of FnWithHooks raised" in caplog.text)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0  # retry=0, dead=False: dropped, hook or not


def test_error_handlers_run_on_every_failure_with_context(start, client, r, caplog):
    seen = []
    start(error_handlers=[lambda exc, ctx: seen.append((type(exc).__name__, ctx["class"], ctx["queue"],
                                                          ctx["retry_count"], ctx["job"]["args"]))])
    jid = client.push(WithHooks, [True])
    wait_until(lambda: len(seen) == 2, message="both failed attempts reported")
    assert seen == [("ValueError", "WithHooks", "default", 0, [True]),
                    ("ValueError", "WithHooks", "default", 1, [True])]
    # the traceback of each failure is in the log, at WARNING
    failures = [rec for rec in caplog.records if rec.getMessage().startswith("fail:")]
    assert len(failures) == 2 and all(rec.levelname == "WARNING" and rec.exc_info for rec in failures)
    assert jid

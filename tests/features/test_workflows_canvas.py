"""Celery's canvas shapes (issue 37 item 7), run end to end by real worker processes: `|` between
steps, chains and groups (`group | step` is a chord), a chain or a group called to start it
(`chain(...)()`), Celery's `group(a, b)`, and one step pushed alone (`sig.delay()`,
`sig.apply_async(..., priority=9)`). A porting user met a TypeError, an AttributeError or "not
callable" for each, while docs/coming-from-celery.md says a canvas is written the same."""

from __future__ import annotations

import json

import pytest
from jobs_for_tests import wf_add, wf_notify, wf_sub

import sidequest
from features.test_workflows import DEADLINE, wclient, wf_url, workers, wr  # noqa: F401  (fixtures)
from sidequest import ChainResult, Config, GroupResult, JobArgumentError, chain, chord, group


def test_a_pipe_of_steps_is_celerys_chain(wclient):  # noqa: F811
    """Celery's `add.s(1, 1) | mul.s(3)`; each result goes first to the next step, as in `chain`."""
    piped = wf_sub.s(10, 1) | wf_sub.s(100)
    assert piped.apply_async(client=wclient).get(timeout=DEADLINE) == -91  # sub(9, 100)
    longer = wf_sub.s(10, 1) | wf_sub.s(1) | wf_sub.s(2)  # chain | step
    assert longer.apply_async(client=wclient).get(timeout=DEADLINE) == 6
    before = wf_sub.s(100, 1) | chain(wf_sub.s(9), wf_sub.s(80))  # step | chain
    assert before.apply_async(client=wclient).get(timeout=DEADLINE) == 10
    both = chain(wf_sub.s(10, 1), wf_sub.s(1)) | chain(wf_sub.s(2), wf_sub.s(3))  # chain | chain
    assert both.apply_async(client=wclient).get(timeout=DEADLINE) == 3
    assert [len(c.items) for c in (piped, longer, before, both)] == [2, 3, 3, 4]  # one flat chain each


def test_a_group_piped_into_a_step_is_a_chord(wclient):  # noqa: F811
    """Celery's `group(...) | callback` is a chord: the callback gets the list of the group's results;
    `group | group` gives each step of the second the list; `chord | step` follows the callback."""
    header = group(wf_add.si(1, 1, "canvas"), wf_add.si(2, 2, "canvas"))  # Celery's group(a, b)
    assert (header | wf_notify.s("ops")).apply_async(client=wclient).get(timeout=DEADLINE) == [[2, 4], "ops", False]
    fanned = header | group(wf_notify.s("a"), wf_notify.s("b"))
    assert fanned.apply_async(client=wclient).get(timeout=DEADLINE) == [[[2, 4], "a", False], [[2, 4], "b", False]]
    then = chord([wf_add.si(1, 1, "canvas")], wf_notify.s("ops")) | wf_notify.s("after")
    assert then.apply_async(client=wclient).get(timeout=DEADLINE) == [[[2], "ops", False], "after", False]
    assert (wf_sub.s(5, 1) | header).apply_async(client=wclient).get(timeout=DEADLINE) == [2, 4]  # step | group


def test_calling_a_chain_or_a_group_starts_it_as_celery_does(wf_url, wclient):  # noqa: F811
    """Celery's `chain(...)()` and `group(...)()` apply them (asynchronously): the same handles as
    `apply_async()`, through the default client or a given one."""
    sidequest.configure(Config(redis_url=wf_url))
    called = chain(wf_sub.s(10, 1), wf_sub.s(100))()
    assert isinstance(called, ChainResult) and called.get(timeout=DEADLINE) == -91
    fanned = group(wf_add.si(i, i, "canvas") for i in range(3))(client=wclient)
    assert isinstance(fanned, GroupResult) and fanned.get(timeout=DEADLINE) == [0, 2, 4]
    assert (wf_sub.s(10, 1) | wf_sub.s(1))().get(timeout=DEADLINE) == 8  # a pipe, called


def test_a_step_pushed_alone_is_one_job_with_celerys_partial_arguments(wf_url, wr):  # noqa: F811
    """`sig.delay()` / `sig.apply_async()` were AttributeErrors. The step's own arguments and
    options hold; Celery's partial arguments come first, partial keywords over the step's."""
    sidequest.configure(Config(redis_url=wf_url, result_ttl=60))
    assert sidequest.result(wf_sub.s(10, 1).delay(), timeout=DEADLINE) == 9
    assert sidequest.result(wf_sub.s(1).delay(10), timeout=DEADLINE) == 9  # sub(10, 1)
    jid = wf_notify.s("ops", urgent=False).apply_async(([1],), {"urgent": True}, priority=9, queue="default")
    assert sidequest.result(jid, timeout=DEADLINE) == [[1], "ops", True]
    later = wf_sub.set(queue="default").s(3).apply_async((5,), countdown=1)
    assert json.loads(wr.zrange("schedule", 0, -1)[0])["jid"] == later
    assert sidequest.result(later, timeout=DEADLINE) == 2


@pytest.mark.parametrize(("call", "expected"), [
    (lambda: wf_sub.si(10, 1).delay(3), "step WfSub was made with .si(...), so it takes no more arguments"),
    (lambda: wf_sub.s(1).on_failure("continue").delay(), "on_failure(...) applies to a step of a workflow"),
    (lambda: wf_sub.s(1).apply_async((2,), link=wf_sub.s(3)), "apply_async does not take Celery's link=: chain"),
    (lambda: wf_sub.s(1).apply_async("ab"), "apply_async takes args as a list or tuple, got str"),
])
def test_a_step_pushed_alone_refuses_what_would_be_lost(wf_url, call, expected):  # noqa: F811
    """Refused before anything is written (tests/client/test_porting.py checks an empty Redis)."""
    sidequest.configure(Config(redis_url=wf_url))
    with pytest.raises(JobArgumentError) as caught:
        call()
    assert expected in str(caught.value)


def test_a_pipe_with_something_else_says_what_it_joins():
    with pytest.raises(TypeError, match=r"`\|` joins workflow steps .* got 3"):
        wf_sub.s(1) | 3
    with pytest.raises(TypeError, match=r"`\|` joins workflow steps .* got 'x'"):
        group(wf_sub.s(1)) | "x"

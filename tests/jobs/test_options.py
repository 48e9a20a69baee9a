"""Job options (jobs/options.py): the worker-side ones, `retry_on` and `discard_on`, checked where
a job is defined and refused where a job is pushed (exception classes are not JSON)."""

from __future__ import annotations

import pytest

import sidequest
from sidequest.jobs.registry import Registry


def test_retry_on_and_discard_on_are_checked_where_the_job_is_defined():
    registry = Registry()

    @sidequest.job(name="Defined", registry=registry, retry_on=ConnectionError, discard_on=(KeyError, LookupError))
    def defined():
        ...

    assert defined.job_class.options["retry_on"] == (ConnectionError,)
    assert defined.job_class.options["discard_on"] == (KeyError, LookupError)
    assert "retry_on" not in defined.payload_options() and "discard_on" not in defined.payload_options()
    for bad in ("ValueError", ValueError("x"), (ValueError, 3), (), int):
        with pytest.raises(sidequest.JobDefinitionError, match=r"retry_on.*exception class"):
            sidequest.job(name="Bad", registry=registry, retry_on=bad)(lambda: None)
        with pytest.raises(sidequest.JobDefinitionError, match=r"discard_on.*exception class"):
            type("BadClass", (sidequest.Job,), {}, name="BadClass", registry=registry, discard_on=bad)


def test_a_push_refuses_them_saying_where_they_go(client):
    registry = Registry()

    @sidequest.job(name="Pushed", registry=registry, retry_on=(ConnectionError,))
    def pushed():
        ...

    for call in (lambda: pushed.set(retry_on=(KeyError,)),
                 lambda: client.push(pushed, [], discard_on=(KeyError,)),
                 lambda: sidequest.push("RubyJob", [], retry_on=(KeyError,))):
        with pytest.raises(sidequest.JobArgumentError) as caught:
            call()
        message = str(caught.value)
        assert "where the job is defined" in message and "not carried" in message and "\n" not in message

"""The ActiveJob wrapper's format (`jobs/active_job`): the name a wrapper runs under, its arguments
read back as the Ruby caller passed them, and the arguments a push writes for ActiveJob 6.1. The
payloads are what real ActiveJob 6.1 on Sidekiq 6.4 wrote (tests/ruby/active_job.rb); the
scenarios against the real Ruby processes are in tests/scenarios/test_active_job.py."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from sidequest.errors import JobArgumentError
from sidequest.jobs.active_job import RAILS_WRAPPER, deserialize, job_data_for, job_name, serialize
from sidequest.jobs.payload import call_arguments

AJ = "ActiveJob::Serializers::"


def wrapper(arguments, cls=RAILS_WRAPPER, **more):
    data = {"job_class": "SendReceiptJob", "job_id": "3d0d8093-b2aa-43a5-8a7c-f96e291309d3",
            "provider_job_id": None, "queue_name": "default", "priority": None, "arguments": arguments,
            "executions": 0, "exception_executions": {}, "locale": "en", "timezone": "UTC",
            "enqueued_at": "2026-11-28T01:38:22Z"}
    return {"retry": True, "queue": "default", "class": cls, "wrapped": "SendReceiptJob", "args": [data],
            "jid": "513a52cc1e89ef3bf547d520", **more}


def test_a_wrapper_runs_under_its_wrapped_name_in_both_sidekiq_spellings():
    assert job_name(wrapper([])) == "SendReceiptJob"
    assert job_name(wrapper([], cls="Sidekiq::ActiveJob::Wrapper")) == "SendReceiptJob"
    legacy = wrapper([])
    del legacy["wrapped"]  # Rails 4.2 wrote no `wrapped`: the job data's class
    assert job_name(legacy) == "SendReceiptJob"
    assert job_name({"class": "HardWorker", "args": [1]}) == "HardWorker"


def test_a_wrapper_without_job_data_keeps_its_own_name_and_arguments():
    odd = {"class": RAILS_WRAPPER, "wrapped": "SendReceiptJob", "args": ["not a hash"]}
    assert job_name(odd) == RAILS_WRAPPER  # unknown here: retried, for a Ruby worker to take
    assert call_arguments(odd) == (["not a hash"], {})


def test_keyword_arguments_come_back_as_keywords():
    payload = wrapper([42, "eur", {"note": "x", "_aj_ruby2_keywords": ["note"]}])
    assert call_arguments(payload) == ([42, "eur"], {"note": "x"})
    assert call_arguments({"class": "Plain", "args": [1]}) == ([1], {})


def test_hashes_lose_their_markers_and_global_ids_are_their_strings():
    arguments = [{"a": 1, "b": [2, None], "_aj_symbol_keys": ["b"]}, {"k": 1, "_aj_hash_with_indifferent_access": True},
                 {"_aj_globalid": "gid://shop/User/7"}, [{"inner": {"_aj_globalid": "gid://shop/User/8"},
                                                          "_aj_symbol_keys": ["inner"]}]]
    assert call_arguments(wrapper(arguments)) == (
        [{"a": 1, "b": [2, None]}, {"k": 1}, "gid://shop/User/7", [{"inner": "gid://shop/User/8"}]], {})


@pytest.mark.parametrize(("marked", "expected"), [
    ({"_aj_serialized": AJ + "SymbolSerializer", "value": "card"}, "card"),
    ({"_aj_serialized": AJ + "TimeSerializer", "value": "2024-01-02T03:04:05.000000000Z"},
     datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ({"_aj_serialized": AJ + "TimeWithZoneSerializer", "value": "2024-01-02T01:00:00.123456789+01:00"},
     datetime(2024, 1, 2, 0, 0, 0, 123456, tzinfo=UTC)),
    ({"_aj_serialized": AJ + "DateTimeSerializer", "value": "2024-01-02T03:04:05.000000000+00:00"},
     datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ({"_aj_serialized": AJ + "DateSerializer", "value": "2024-01-02"}, date(2024, 1, 2)),
    ({"_aj_serialized": AJ + "DurationSerializer", "value": 300,
      "parts": [[{"_aj_serialized": AJ + "SymbolSerializer", "value": "minutes"}, 5]]}, timedelta(minutes=5)),
    ({"_aj_serialized": AJ + "BigDecimalSerializer", "value": "1.5"}, Decimal("1.5")),
])
def test_serialized_objects_become_the_python_value_where_obvious(marked, expected):
    assert deserialize(marked) == expected


@pytest.mark.parametrize("marked", [
    {"_aj_serialized": AJ + "DurationSerializer", "value": 2629746,  # a month: no fixed length
     "parts": [[{"_aj_serialized": AJ + "SymbolSerializer", "value": "months"}, 1]]},
    {"_aj_serialized": AJ + "ModuleSerializer", "value": "SendReceiptJob"},
    {"_aj_serialized": "MoneySerializer", "value": "12.50 EUR"},
    {"_aj_serialized": AJ + "TimeSerializer", "value": "not a time"},
])
def test_other_serialized_objects_come_as_their_marker_hash(marked):
    assert deserialize(marked) == marked


def test_a_push_writes_activejob_6_1s_job_data():
    data = job_data_for("SendReceiptJob", [42, {"a": [1, None]}], {"note": "x"}, queue="mail", priority=3,
                        now=1700000000.5)
    assert list(data) == ["job_class", "job_id", "provider_job_id", "queue_name", "priority", "arguments",
                          "executions", "exception_executions", "locale", "timezone", "enqueued_at"]  # Ruby's order
    assert len(data["job_id"]) == 36 and data["job_id"].count("-") == 4
    assert {k: v for k, v in data.items() if k != "job_id"} == {
        "job_class": "SendReceiptJob", "provider_job_id": None, "queue_name": "mail", "priority": 3,
        "arguments": [42, {"a": [1, None], "_aj_symbol_keys": []}, {"note": "x", "_aj_ruby2_keywords": ["note"]}],
        "executions": 0, "exception_executions": {}, "locale": "en", "timezone": "UTC",
        "enqueued_at": "2023-11-14T22:13:20Z"}


def test_what_a_push_writes_reads_back_as_it_was_given():
    args = [1, "two", {"three": [3.5, None, True]}, datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=1))),
            date(2024, 1, 2), timedelta(seconds=90)]
    data = job_data_for("SendReceiptJob", args, {"note": "x"}, queue="default", now=0.0)
    assert call_arguments(wrapper(data["arguments"])) == (args, {"note": "x"})


@pytest.mark.parametrize(("value", "says"), [
    ((1, 2), "tuple"),
    ({1: "a"}, r"the key 1 \(int\)"),
    ({"_aj_globalid": "x"}, "reserves"),
    (datetime(2024, 1, 2), "naive datetime"),
    (float("nan"), "JSON cannot hold"),
    (object(), "object, which an ActiveJob cannot receive"),
])
def test_a_push_refuses_what_activejob_could_not_read_back(value, says):
    with pytest.raises(JobArgumentError, match=says):
        serialize(value, "args[0]")
    with pytest.raises(JobArgumentError, match=says):
        job_data_for("SendReceiptJob", [], {"note": value}, queue="default", now=0.0)


@pytest.mark.parametrize("kwargs", [[("note", "x")], "note=x"])
def test_keyword_arguments_that_are_not_a_dict_are_refused_in_one_line(kwargs):
    """push_active_job("SendReceiptJob", [42], ["x"]): the keywords' place holds a list (a third
    positional argument meant as args): one line saying what kwargs must be, not an AttributeError."""
    with pytest.raises(JobArgumentError, match=r"^kwargs must be a dict of keyword arguments, got (list|str)$"):
        job_data_for("SendReceiptJob", [42], kwargs, queue="default", now=0.0)

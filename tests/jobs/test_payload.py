import json
import math
import os

import pytest

from sidequest.errors import JobArgumentError, PayloadError
from sidequest.jobs import payload as payload_module
from sidequest.jobs.payload import NO_KWARGS, call_arguments, check_args, check_kwargs, decode, encode, epoch, new_jid


def test_jid_is_24_lowercase_hex_and_unique():
    jids = {new_jid() for _ in range(1000)}
    assert len(jids) == 1000
    assert all(len(j) == 24 and j == j.lower() and int(j, 16) >= 0 for j in jids)


def test_native_json_args_pass_unchanged():
    args = [None, True, 3, 2.5, "é", [1, [2]], {"k": {"n": [None]}}]
    assert check_args(args) == args


@pytest.mark.parametrize("bad, position, words", [
    ([1, object()], 1, "object"),
    ([{1, 2}], 0, "set"),
    ([b"raw"], 0, "bytes"),
    (["ok", {(1, 2): "tuple key"}], 1, "tuple key"),
    ([{"a": float("nan")}], 0, "nan"),
    ([math.inf], 0, "inf"),
    ([{1: "int key"}], 0, "int key"),
    ([(1, 2)], 0, "tuple"),
    ([[1, {"deep": object()}]], 0, "args[0][1]['deep']"),
])
def test_non_json_args_are_refused_naming_position_and_type(bad, position, words):
    with pytest.raises(JobArgumentError) as info:
        check_args(bad)
    message = str(info.value)
    assert f"argument {position} ({type(bad[position]).__name__})" in message
    assert words in message
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_args_must_be_a_list():
    with pytest.raises(JobArgumentError, match="must be a list"):
        check_args("abc")


def test_encode_is_compact_utf8_like_ruby_json():
    assert encode({"class": "Ü", "args": [1, 2.5]}) == '{"class":"Ü","args":[1,2.5]}'


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfe{}", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b"[1,2]", "JSON list, not an object"),
    (b'{"args":[]}', "no 'class'"),
    (b'{"class":"X"}', "no 'args'"),
    (b'{"class":"X","args":{"a":1}}', "'args' is a JSON dict"),
    (b'{"class":"X","args":[],"kwargs":[1]}', "'kwargs' is a JSON list, not an object"),
])
def test_decode_says_what_is_wrong(raw, reason):
    with pytest.raises(PayloadError, match=reason.replace("(", r"\(")):
        decode(raw)


@pytest.mark.parametrize("raw, reason", [
    (b'{"class":"X","args":[NaN]}', "NaN is not JSON"),
    (b'{"class":"X","args":[-Infinity]}', "-Infinity is not JSON"),
    (b'{"class":"X","args":[1e400]}', "too large for a float"),
    (b'{"class":"X","args":[-1.8e308]}', "too large for a float"),
])
def test_decode_refuses_what_json_cannot_write_back_whichever_reader_reads_it(raw, reason):
    with pytest.raises(PayloadError, match=reason):
        decode(raw)


def test_decode_reads_what_sidekiq_writes_exactly():
    """Integers past 64 bits stay exact (a Ruby Bignum), lone surrogates and floats as json reads them."""
    raw = (b'{"class":"X","args":[18446744073709551616,-9223372036854775809,9223372036854775807,'
           b'"\\ud800","\\u00e9",0.1,1.5e-7,-0.0],"enqueued_at":1765130000.123456}')
    assert decode(raw) == json.loads(raw) == decode(raw.decode())
    assert decode(raw)["args"][:2] == [2 ** 64, -(2 ** 63) - 1]


@pytest.mark.parametrize("big", [2 ** 64, 2 ** 64 - 1, -(2 ** 63) - 1, -(10 ** 19) + 1, 10 ** 19 - 1, 2 ** 63])
def test_decode_keeps_each_integer_exact_alone_in_a_payload(big):
    """Each integer at or past 64 bits' edges, alone in its payload (no other number sends the
    payload to the standard library's path), comes back an int, exactly."""
    raw = b'{"class":"X","args":[%d]}' % big
    assert decode(raw)["args"] == [big] and type(decode(raw)["args"][0]) is int


def test_decode_keeps_unknown_keys():
    raw = json.dumps({"class": "HardWorker", "args": [1], "wrapped": "X", "bid": "b1"})
    assert decode(raw.encode())["bid"] == "b1"


def test_call_arguments_are_args_and_kwargs_and_kwargs_only_when_present():
    assert call_arguments(decode(b'{"class":"X","args":[1],"kwargs":{"a":{"b":[2]}}}')) == ([1], {"a": {"b": [2]}})
    args, kwargs = call_arguments(decode(b'{"class":"X","args":[1]}'))
    assert (args, kwargs) == ([1], {}) and kwargs is NO_KWARGS  # no dict made per job


def test_kwargs_are_checked_as_args_are():
    assert check_kwargs({"a": [1, {"b": None}]}) == {"a": [1, {"b": None}]}
    with pytest.raises(JobArgumentError, match=r"keyword argument 'when' \(list\) is not native JSON: "
                                               r"kwargs\['when'\]\[0\] is a set"):
        check_kwargs({"when": [{1}]})


def test_a_payloads_kwargs_cannot_be_set_by_an_option(client):
    with pytest.raises(JobArgumentError, match="kwargs"):
        client.push("X", [1], custom={"kwargs": {"a": 1}})


def test_epoch_reads_float_seconds_and_integer_milliseconds():
    assert epoch(1700000000.5) == 1700000000.5
    assert epoch(1700000000500) == 1700000000.5
    assert epoch("x") is None and epoch(True) is None


def test_the_trace_id_of_a_job_comes_from_a_well_formed_traceparent_only():
    from sidequest.jobs.payload import trace_id

    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert trace_id({"traceparent": good}) == "4bf92f3577b34da6a3ce929d0e0e4736"
    for bad in (None, 7, "", "00-xyz", good.upper(), "00-" + "0" * 32 + "-00f067aa0ba902b7-01", good.replace("-", "_")):
        assert trace_id({"traceparent": bad}) is None, bad
    assert trace_id({}) is None


def test_a_push_written_by_the_fast_encoder_has_the_standard_encoders_bytes():
    """`encode_fast` (orjson, a push's path) writes what `encode` writes for checked payloads, and
    hands what orjson refuses to `encode`."""
    from sidequest.jobs.payload import encode, encode_fast

    payloads = [
        {"retry": True, "queue": "default", "args": [1, "a", None, False, 2.5, {"k": [1, {"x": "y"}]}],
         "class": "Send", "jid": "b4a577edbccf1d805744efa9", "created_at": 1764133890.1234567,
         "enqueued_at": 1764133890.1234568},
        {"args": ["\x00\x1f\x7f\u2028 é 漢 \\ \" / \t\n\r", "😀"], "class": "Unicode", "created_at": 1764133890123},
        {"args": [2 ** 70, -(2 ** 64)], "class": "BigInts"},  # past 64 bits: orjson refuses, json writes them
        {"args": [], "class": "Empty", "tags": ["a", "b"], "custom": {"nested": {"deep": [[]]}}},
    ]
    for payload in payloads:
        assert encode_fast(payload) == encode(payload).encode("utf-8"), payload
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: the caller's clear error, as before
        encode_fast({"args": ["\ud800"]})


def test_a_bulk_push_writes_each_payload_as_if_encoded_alone(config, r):
    """`payload.Shapes` writes the JSON around args and jid once per push: every job's bytes are
    still exactly what encoding its payload alone gives (the payload read back, keys in order),
    whatever its args hold, and a payload that differs in any other value is encoded whole."""
    from sidequest import Client
    from sidequest.jobs.middleware import Chain
    from sidequest.jobs.payload import Shapes, encode_fast

    client = Client(config.replace(client_middleware=Chain()))  # no process-wide links another test added
    args = [[1], ["a\"b\\c", "漢😀\u2028"], [2 ** 70], [{"k": [1.5e-7, None, True]}], [], [-(2 ** 63)]]
    client.push_bulk("Shaped", args, queue="shapes", retry=3, tags=["t"])
    stored = list(reversed(r.lrange("queue:shapes", 0, -1)))
    assert len(stored) == len(args)
    for raw, given in zip(stored, args, strict=True):
        payload = json.loads(raw)
        assert payload["args"] == given
        assert raw == encode_fast(payload)  # (`encode` spells 1.5e-7 as 1.5e-07: the same number)

    shapes = Shapes()
    base = {"retry": True, "queue": "q", "args": [1], "class": "C", "jid": "j1", "created_at": 1.5}
    first, other_time = dict(base), {**base, "jid": "j2", "created_at": 2.5}
    other_args, reordered = {**base, "args": [[2]], "jid": "j3"}, {"jid": "j4", **base}
    for payload in (first, other_time, other_args, reordered, {"class": "NoArgs"}):
        assert shapes.encode(payload) == encode_fast(payload), payload


def test_a_process_forked_without_at_fork_hooks_never_hands_out_its_parents_read_ahead_jids(monkeypatch):
    # uWSGI's preforking runs no Python at-fork hook: the pid tells the child it is not the parent
    new_jid()
    while not payload_module._ahead:  # the read-ahead just ran out (other tests took a multiple of 64)
        new_jid()
    parents_next = list(payload_module._ahead)
    assert parents_next
    child_pid = os.getpid() + 1
    monkeypatch.setattr(payload_module.os, "getpid", lambda: child_pid)
    given = [new_jid() for _ in range(len(parents_next))]
    assert not set(given) & set(parents_next)

"""The job payload: Sidekiq's JSON hash, built, checked at the edge, encoded and decoded.

A payload on the wire looks like Sidekiq's:

    {"retry":true,"queue":"default","class":"app.jobs.send_mail","args":[42],
     "jid":"b4a577edbccf1d805744efa9","created_at":1700000000.12,"enqueued_at":1700000000.13}

Arguments must be native JSON (None, bool, int, finite float, str, list, dict with str keys),
because a job is read back as JSON by this or another language; nothing else is accepted, so
what a job receives is exactly what the caller passed.

A Python job's keyword arguments travel in a top-level `"kwargs"` object, present only when
there are some: `{"class":"app.send","args":[42],"kwargs":{"template":"reset"},...}`. Ruby
Sidekiq keeps a key it does not know and passes only `args` to `perform`, so a Ruby worker never
sees them as arguments (an `active_job=True` job's keywords go inside its ActiveJob arguments,
as Ruby keywords: see `active_job`). `call_arguments(payload)` is the one place a payload
becomes a call.
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
import secrets
from collections import deque
from collections.abc import Mapping
from typing import Any

import orjson

from sidequest.errors import JobArgumentError, PayloadError
from sidequest.jobs.active_job import WRAPPERS, job_data, unwrap

# Keys the client sets itself; a job option of the same name would be overwritten or
# would break the payload, so options may not use them.
RESERVED_KEYS = frozenset({"class", "args", "kwargs", "jid", "created_at", "enqueued_at", "at", "unique_digest",
                           "expires_at"})

_SCALARS = (str, int, bool, type(None))
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def new_jid() -> str:
    """24 lowercase hex characters from the system's randomness, as Sidekiq's `SecureRandom.hex(12)`."""
    return new_jids(1)[0]


# jids read ahead from the system's randomness, JID_READ_AHEAD at a time, for the pushes of one
# job each (a read is a system call, about a fifth of a single push's time); never shared with
# a forked child, which would push the parent's next jids: told by the pid, since uWSGI's
# preforking and a C extension's fork() run no Python at-fork hooks
JID_READ_AHEAD = 64
_ahead: deque[str] = deque()
_ahead_pid = [os.getpid()]


def new_jids(count: int) -> list[str]:
    """`count` jids: a bulk push's from one read of the system's randomness."""
    if count == 1:
        if _ahead_pid[0] != os.getpid():
            _ahead.clear()
            _ahead_pid[0] = os.getpid()
        try:
            return [_ahead.popleft()]  # atomic: each goes to one caller
        except IndexError:
            _ahead.extend(new_jids(JID_READ_AHEAD))  # two threads may both refill: no jid is given twice
            return new_jids(1)
    text = os.urandom(12 * count).hex()
    return [text[i:i + 24] for i in range(0, 24 * count, 24)]


def encode_fast(payload: dict[str, Any]) -> bytes:
    """`encode(payload)` as UTF-8, by orjson, for a payload whose values were all checked as
    native JSON (a push's, before client middleware could add anything). Its bytes are the
    standard encoder's but for the spelling of some floats in exponent form (`1e-7` for `1e-07`,
    the same number); what orjson refuses (an integer past 64 bits, a lone surrogate) goes
    through `encode`, which keeps or explains it."""
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:
        return _ENCODER.encode(payload).encode("utf-8")


Shape = tuple[tuple[str, ...], tuple[Any, ...], bytes, bytes, bytes]  # fixed keys and values; the JSON around args, jid


class Shapes:
    """`encode_fast` for the payloads of one push, which differ only in their `args` and `jid`:
    the JSON around those two is written once per shape (the keys in order), and each payload
    costs the encoding of its args and jid, joined in. A payload whose other values are not the
    very objects of the first of its shape (a time stamped apart, a value changed) is encoded
    whole, so the bytes are always `encode_fast(payload)`'s. Only for pushes without client
    middleware (see `encode_fast`)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, ...], Shape | None] = {}

    def encode(self, payload: dict[str, Any]) -> bytes:
        order = tuple(payload)
        try:
            shape = self._shapes[order]
        except KeyError:
            shape = self._shapes[order] = _shape_of(payload, order)
        if shape is not None:
            keys, values, head, middle, tail = shape
            if all(map(operator.is_, map(payload.__getitem__, keys), values)):
                try:
                    return b"".join((head, orjson.dumps(payload["args"]), middle, orjson.dumps(payload["jid"]), tail))
                except orjson.JSONEncodeError:
                    pass  # what orjson refuses: `encode_fast` keeps or explains it
        return encode_fast(payload)


def _shape_of(payload: dict[str, Any], order: tuple[str, ...]) -> Shape | None:
    """The fixed keys and values of `payload` and its JSON cut around `args` and `jid` (args
    first, as every push writes them), or None when it has not that form."""
    if "args" not in payload or "jid" not in payload or order.index("args") > order.index("jid"):
        return None
    mark = secrets.token_hex(8)  # stands for args and jid: found once each in the JSON, or no shape
    try:
        blob = orjson.dumps({**payload, "args": mark + "a", "jid": mark + "j"})
    except orjson.JSONEncodeError:
        return None
    head, found, rest = blob.partition(f'"{mark}a"'.encode())
    middle, found_too, tail = rest.partition(f'"{mark}j"'.encode())
    if not found or not found_too or mark.encode() in head + middle + tail:
        return None
    keys = tuple(key for key in order if key not in ("args", "jid"))
    return keys, tuple(payload[key] for key in keys), head, middle, tail


def encode(payload: dict[str, Any]) -> str:
    """Compact JSON as Sidekiq's `dump_json` writes it (UTF-8, no spaces)."""
    return _ENCODER.encode(payload)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is too large for a float")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def check_args(args: Any) -> list[Any]:
    """Return `args` as a list if every argument is native JSON; raise JobArgumentError otherwise.

    >>> check_args([1, "a", {"k": [None, 2.5]}])
    [1, 'a', {'k': [None, 2.5]}]
    """
    if isinstance(args, tuple):
        args = list(args)
    if not isinstance(args, list):
        raise JobArgumentError(f"job args must be a list, got {type(args).__name__}")
    for position, value in enumerate(args):
        if type(value) not in _SCALARS:  # most arguments: no further look
            _refuse_unless_json(value, f"args[{position}]", f"argument {position}")
    return args


def check_kwargs(kwargs: Any) -> dict[str, Any]:
    """Return `kwargs` as a new dict if it maps str names to native JSON; raise JobArgumentError
    otherwise (the message names the keyword).

    >>> check_kwargs({"template": "reset", "ids": [1, 2]})
    {'template': 'reset', 'ids': [1, 2]}
    """
    if not isinstance(kwargs, Mapping):
        raise JobArgumentError(f"kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}")
    checked = dict(kwargs)
    for key, value in checked.items():
        if type(key) is not str:
            raise JobArgumentError(f"keyword argument names must be strings, got {key!r} ({type(key).__name__})")
        if type(value) not in _SCALARS:
            _refuse_unless_json(value, f"kwargs[{key!r}]", f"keyword argument {key!r}")
    return checked


NO_KWARGS: dict[str, Any] = {}  # what a payload without "kwargs" gives: shared, so never changed


def call_arguments(payload: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """(args, kwargs) a decoded payload's job is called with: `perform(*args, **kwargs)`, and
    its hooks the same. The kwargs of a payload without any are `NO_KWARGS` (not to be changed).
    An ActiveJob wrapper's are its ActiveJob arguments, deserialized (see `active_job`).

    >>> call_arguments({"class": "app.send", "args": [42], "kwargs": {"template": "reset"}})
    ([42], {'template': 'reset'})
    """
    if payload["class"] in WRAPPERS:  # every job's path: one set lookup
        data = job_data(payload)
        if data is not None:
            return unwrap(data)
    if "kwargs" not in payload:  # every job's path but a keyword push's: one key test
        return payload["args"], NO_KWARGS
    return payload["args"], payload["kwargs"]


def _refuse_unless_json(value: Any, path: str, what: str) -> None:
    """Raise JobArgumentError, naming `what` and the part that is not native JSON, unless
    `value` (an argument of a push) is native JSON."""
    try:
        problem = _json_problem(value, path)
    except RecursionError:
        problem = f"{path} is nested too deeply"
    if problem:
        raise JobArgumentError(
            f"{what} ({type(value).__name__}) is not native JSON: {problem}. "
            "Pass only None, bool, int, finite float, str, list and dict with str keys.")


def check_json_value(value: Any, where: str) -> None:
    """Raise JobArgumentError if `value` (an option, say) is not native JSON."""
    try:
        problem = _json_problem(value, where)
    except RecursionError:
        problem = f"{where} is nested too deeply"
    if problem:
        raise JobArgumentError(f"{where} is not native JSON: {problem}")


def _json_problem(value: Any, path: str) -> str | None:
    """Describe the first part of `value` that does not survive a JSON round trip, or None."""
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot hold"
    if kind is list:
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{i}]")
            if problem:
                return problem
        return None
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{path} has a {type(key).__name__} key {key!r}; JSON object keys are strings"
            problem = _json_problem(item, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if kind is tuple:
        return f"{path} is a tuple, which would come back as a list; pass a list"
    return f"{path} is a {kind.__name__}"


# orjson reads a payload five times faster than the standard library with its float check (a
# Python call per float: created_at, enqueued_at) and refuses what that refuses (NaN, Infinity,
# a float too large, invalid UTF-8, a lone surrogate), but reads an integer past 64 bits (past
# 2**64 - 1, or below -2**63: 19 digits already) as a float: bytes holding a run of 19 digits,
# and whatever orjson refuses, take the standard library's path, which keeps such integers and
# says what is wrong.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
# And orjson's nesting limit depends on its version (3.9.0, our floor, read a payload nested
# deeper than the standard library's recursion limit allows): bytes that could nest that deep,
# i.e. hold as many brackets, take the standard library's path too, so the refusal is the same
# whatever orjson is installed.
_BRACKETS = 512
_SLOW: Any = object()


def _fast(raw: bytes) -> Any:
    """`raw` read by orjson, or _SLOW when the standard library must read it (see above)."""
    if _LONG_DIGITS.search(raw) is not None or raw.count(b"[") + raw.count(b"{") >= _BRACKETS:
        return _SLOW
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW


def _checked(raw: bytes | str) -> Any:
    """`raw` read by the standard library, every refusal a PayloadError saying why."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"payload is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    else:
        text = raw
    try:
        return _DECODER.decode(text)
    except ValueError as exc:
        raise PayloadError(f"payload is not valid JSON ({exc})") from None
    except RecursionError:
        raise PayloadError("payload is nested too deeply to decode") from None


def decode(raw: bytes | str) -> dict[str, Any]:
    """Parse a payload read from Redis; raise PayloadError saying exactly what is wrong.

    Extra keys are kept as they are, so a payload written by Ruby Sidekiq round-trips. Whatever
    the bytes are (deep nesting, NaN, numbers too large for a float, invalid UTF-8), the only
    exception is PayloadError.
    """
    data = _fast(raw) if isinstance(raw, bytes) else _SLOW
    if data is _SLOW:
        data = _checked(raw)
    if not isinstance(data, dict):
        raise PayloadError(f"payload is a JSON {type(data).__name__}, not an object")
    if not isinstance(data.get("class"), str) or not data["class"]:
        raise PayloadError("payload has no 'class' string")
    if "args" not in data:
        raise PayloadError("payload has no 'args'")
    if not isinstance(data["args"], list):
        raise PayloadError(f"payload 'args' is a JSON {type(data['args']).__name__}, not an array")
    if "kwargs" in data and not isinstance(data["kwargs"], dict):
        raise PayloadError(f"payload 'kwargs' is a JSON {type(data['kwargs']).__name__}, not an object")
    return data


def display_name(payload: dict[str, Any]) -> str:
    """The name to show for a payload's job (traces, error reports, the dashboard): the class it
    wraps, `wrapped` (an ActiveJob's class, a Django task's path), else its `class`, as
    Sidekiq's `display_class` shows it."""
    wrapped = payload.get("wrapped")
    return wrapped if isinstance(wrapped, str) and wrapped else str(payload.get("class"))


def queue_of(payload: dict[str, Any]) -> str:
    """The queue a payload names, or `default` when it names none (a hand-written payload)."""
    queue = payload.get("queue")
    return queue if isinstance(queue, str) and queue else "default"


# A payload time above this is epoch milliseconds (1e11 ms is 1973; 1e11 s is the year 5138).
MILLIS_ABOVE = 1e11


def epoch(value: Any) -> float | None:
    """A payload time as epoch seconds: Sidekiq 6/7 write float seconds, Sidekiq 8 integer milliseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000.0 if value > MILLIS_ABOVE else float(value)


def in_millis(payload: dict[str, Any]) -> bool:
    """True when the payload's own times are Sidekiq 8's integer milliseconds (its `created_at`
    or `enqueued_at`), so the times added to it keep that unit: a payload stays self-consistent."""
    created, enqueued = payload.get("created_at"), payload.get("enqueued_at")  # every push's path: no generator
    return (type(created) is int and created > MILLIS_ABOVE) or (type(enqueued) is int and enqueued > MILLIS_ABOVE)


def stamp(now: float, millis: bool) -> float | int:
    """`now` (epoch seconds) as a payload time: float seconds (Sidekiq 6/7), or with `millis`
    integer epoch milliseconds (Sidekiq 8). Sorted-set scores stay float seconds in every version."""
    return int(now * 1000) if millis else now


def overdue(payload: dict[str, Any], now: float) -> float | None:
    """Seconds a job is past its deadline (`expires_at`, written at push from the `expires_in`
    option, as Sidekiq Pro writes it), or None when it has none or is not past it."""
    deadline = epoch(payload.get("expires_at"))
    return now - deadline if deadline is not None and now > deadline else None


def trace_id(payload: dict[str, Any]) -> str | None:
    """The W3C trace id of the trace a job was pushed in: from its top-level `traceparent`
    (`00-<32 hex trace id>-<16 hex span id>-<flags>`), where OpenTelemetry's Sidekiq
    instrumentation (Ruby's, and `sidequest.contrib.opentelemetry`) carries it; None without one."""
    parent = payload.get("traceparent")
    if not isinstance(parent, str) or len(parent) < 55 or parent[2] != "-" or parent[35] != "-":
        return None
    found = parent[3:35]
    return found if found.strip("0123456789abcdef") == "" and found != "0" * 32 else None

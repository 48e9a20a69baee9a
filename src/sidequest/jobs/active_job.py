"""Rails' ActiveJob on Sidekiq: its wrapper payload, read (a Rails push run here) and written (a
push a Rails worker runs as an ActiveJob).

A Rails app whose ActiveJob adapter is Sidekiq pushes every `perform_later` as one wrapper job:

    {"class": "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper", "wrapped": "SendReceiptJob",
     "queue": "default", "args": [{"job_class": "SendReceiptJob", "job_id": "<uuid>",
     "provider_job_id": null, "queue_name": "default", "priority": null,
     "arguments": [42, "eur", {"note": "x", "_aj_ruby2_keywords": ["note"]}], "executions": 0,
     "exception_executions": {}, "locale": "en", "timezone": "UTC",
     "enqueued_at": "2024-01-02T03:04:05Z"}], "jid": "...", ...}

The wrapper's class is Rails' own adapter's name (Rails 4.2 to 7.x, and Sidekiq 7.3's built-in
adapter), or `Sidekiq::ActiveJob::Wrapper` (the name Sidekiq 8's adapter writes; its older name
still runs there). Its Sidekiq `jid` becomes the job's `provider_job_id` when it runs;
`executions` counts runs in memory (a Sidekiq retry re-reads the payload as pushed).

Here a wrapper runs the Python job registered under its `wrapped` name (`job_name`), with its
`arguments` turned back into what the Ruby caller passed (`call_arguments`, see `deserialize`
for the mapping). `job_data` builds the wrapper's one argument for a push the other way
(`sidequest.push_active_job`), serialized as ActiveJob 6.1 serializes (`serialize`).
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from sidequest.errors import JobArgumentError

# Rails' adapter's wrapper class (what ActiveJob 6.1 and Sidekiq 7.x push, and what every Sidekiq
# up to 8 runs), then Sidekiq 8's
RAILS_WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
WRAPPERS = frozenset({RAILS_WRAPPER, "Sidekiq::ActiveJob::Wrapper"})

GLOBALID = "_aj_globalid"
SERIALIZED = "_aj_serialized"
RUBY2_KEYWORDS = "_aj_ruby2_keywords"
# the markers of a plain hash (its symbol keys) and of a HashWithIndifferentAccess: dropped here
HASH_MARKERS = frozenset({"_aj_symbol_keys", "_aj_hash_with_indifferent_access", RUBY2_KEYWORDS})
# keys ActiveJob refuses in a hash it serializes (its `RESERVED_KEYS`): they would read back as markers
RESERVED = frozenset({GLOBALID, SERIALIZED, *HASH_MARKERS})

_SERIALIZERS = "ActiveJob::Serializers::"
_FIXED_UNITS = frozenset({"weeks", "days", "hours", "minutes", "seconds"})  # a timedelta holds these exactly


def job_data(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The ActiveJob data of a wrapper payload (its one argument), or None when `payload` is not
    a wrapper this module can read (a plain job; a wrapper without a hash of `arguments`, left
    to its name, which a Ruby worker may run)."""
    if payload["class"] not in WRAPPERS:  # every job's path: one set lookup
        return None
    args = payload["args"]
    data = args[0] if len(args) == 1 else None
    return data if isinstance(data, dict) and isinstance(data.get("arguments"), list) else None


def job_name(payload: dict[str, Any]) -> str:
    """The name a payload's job is registered under: a wrapper's `wrapped` ActiveJob class (its
    `job_class` when it has no `wrapped`, as Rails 4.2 wrote), else the payload's `class`."""
    name: str = payload["class"]
    if name not in WRAPPERS:
        return name
    data = job_data(payload)
    if data is None:
        return name
    wrapped = payload.get("wrapped") or data.get("job_class")
    return wrapped if isinstance(wrapped, str) and wrapped else name


def unwrap(data: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A wrapper's arguments as the Ruby caller passed them: (positional, keyword). Keyword
    arguments are the last argument when it is a `_aj_ruby2_keywords` hash."""
    arguments: list[Any] = data["arguments"]
    if arguments and isinstance(arguments[-1], dict) and RUBY2_KEYWORDS in arguments[-1]:
        return [deserialize(value) for value in arguments[:-1]], deserialize(arguments[-1])
    return [deserialize(value) for value in arguments], {}


def deserialize(value: Any) -> Any:
    """One ActiveJob argument as Python receives it:

        plain JSON values                       as they are
        hash with _aj_symbol_keys,              a dict with str keys, the markers dropped
          _aj_hash_with_indifferent_access,
          _aj_ruby2_keywords
        {"_aj_globalid": "gid://app/User/1"}    "gid://app/User/1" (look the record up yourself)
        Symbol                                  str
        Time, ActiveSupport::TimeWithZone,      an aware datetime (its own UTC offset)
          DateTime
        Date                                    date
        Duration of weeks..seconds              timedelta (months and years: the marker hash)
        BigDecimal (ActiveJob 7.1+)             Decimal (6.1 sends a string such as "0.15e1")
        any other _aj_serialized object         the marker hash as it came (Module, Range, ...)
    """
    if isinstance(value, list):
        return [deserialize(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and isinstance(value.get(GLOBALID), str):
        return value[GLOBALID]
    if SERIALIZED in value:
        return _object(value)
    return {key: deserialize(item) for key, item in value.items() if key not in HASH_MARKERS}


def _object(marked: dict[str, Any]) -> Any:
    """An `_aj_serialized` object converted where the Python type is obvious, else as it came."""
    kind, value = marked[SERIALIZED], marked.get("value")
    kind = kind[len(_SERIALIZERS):] if isinstance(kind, str) and kind.startswith(_SERIALIZERS) else None
    try:
        if kind == "SymbolSerializer" and isinstance(value, str):
            return value
        if kind in ("TimeSerializer", "TimeWithZoneSerializer", "DateTimeSerializer") and isinstance(value, str):
            return datetime.fromisoformat(value)
        if kind == "DateSerializer" and isinstance(value, str):
            return date.fromisoformat(value)
        if kind == "BigDecimalSerializer" and isinstance(value, str):
            return Decimal(value)
        if kind == "DurationSerializer" and isinstance(value, (int, float)) and _fixed_length(marked.get("parts")):
            return timedelta(seconds=value)  # past timedelta's range: OverflowError, kept as it came
    except (ValueError, InvalidOperation, OverflowError):
        pass  # not what the serializer writes: handed over as it came
    return marked


def _fixed_length(parts: Any) -> bool:
    """Whether a Duration's parts ([[unit, amount], ...]) are all of fixed length (not months, years)."""
    units = deserialize(parts)
    return isinstance(units, list) and all(
        isinstance(part, list) and len(part) == 2 and part[0] in _FIXED_UNITS for part in units)


# -- the other way: a push a Rails worker runs ---------------------------------------------------
def job_data_for(job_class: str, args: list[Any] | tuple[Any, ...], kwargs: dict[str, Any] | None, *, queue: str,
                 priority: int | None = None, job_id: str | None = None, locale: str = "en",
                 timezone: str = "UTC", now: float) -> dict[str, Any]:
    """The wrapper's one argument for ActiveJob class `job_class`, as ActiveJob 6.1's `serialize`
    writes it (`now`: epoch seconds of the push). Raises JobArgumentError for an argument
    ActiveJob could not read back."""
    if not isinstance(job_class, str) or not job_class:
        raise JobArgumentError(f"push_active_job needs the ActiveJob class name, got {job_class!r}")
    if isinstance(args, tuple):
        args = list(args)
    if not isinstance(args, list):
        raise JobArgumentError(f"ActiveJob arguments must be a list, got {type(args).__name__}")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise JobArgumentError(f"an ActiveJob priority is an int or None, got {priority!r}")
    arguments = [serialize(value, f"args[{position}]") for position, value in enumerate(args)]
    if kwargs:
        arguments.append(_keywords(kwargs))
    return {"job_class": job_class, "job_id": job_id or str(uuid.uuid4()), "provider_job_id": None,
            "queue_name": queue, "priority": priority, "arguments": arguments, "executions": 0,
            "exception_executions": {}, "locale": locale, "timezone": timezone,
            "enqueued_at": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as ActiveJob writes a Ruby method's keywords: a hash flagged with every
    key as a symbol, so `perform(..., note:)` receives them as keywords."""
    if not isinstance(kwargs, dict):  # the words of payload.check_kwargs, whose JSON check differs
        raise JobArgumentError(f"kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}")
    hash_ = _hash(kwargs, "kwargs")
    hash_[RUBY2_KEYWORDS] = list(kwargs)
    return hash_


def serialize(value: Any, where: str) -> Any:
    """One Python argument as ActiveJob 6.1 serializes what Ruby would pass: native JSON as it
    is (a dict as a hash with string keys), an aware datetime as a Time, a date as a Date, a
    timedelta as a Duration in seconds; anything else raises JobArgumentError naming `where`."""
    kind = type(value)
    if value is None or kind in (str, int, bool):
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        raise JobArgumentError(f"{where} is {value!r}, which JSON cannot hold")
    if kind is list:
        return [serialize(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if kind is dict:
        hash_ = _hash(value, where)
        hash_["_aj_symbol_keys"] = []  # a Ruby hash with string keys, as Rails passes params
        return hash_
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise JobArgumentError(f"{where} is a naive datetime {value.isoformat()}; give it a timezone "
                                   "(e.g. datetime.now(timezone.utc)) so Ruby reads the same time")
        return {SERIALIZED: _SERIALIZERS + "TimeSerializer", "value": value.isoformat()}
    if isinstance(value, date):
        return {SERIALIZED: _SERIALIZERS + "DateSerializer", "value": value.isoformat()}
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        amount = int(seconds) if seconds.is_integer() else seconds
        return {SERIALIZED: _SERIALIZERS + "DurationSerializer", "value": amount,
                "parts": [[{SERIALIZED: _SERIALIZERS + "SymbolSerializer", "value": "seconds"}, amount]]}
    hint = "; pass a list" if kind is tuple else ""
    raise JobArgumentError(f"{where} is a {kind.__name__}, which an ActiveJob cannot receive{hint}. Pass "
                           "None, bool, int, finite float, str, list, dict with str keys, an aware datetime, "
                           "a date or a timedelta")


def _hash(value: dict[Any, Any], where: str) -> dict[str, Any]:
    hash_: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            raise JobArgumentError(f"{where} has the key {key!r} ({type(key).__name__}); ActiveJob hash keys are "
                                   "strings")
        if key in RESERVED:
            raise JobArgumentError(f"{where} has the key {key!r}, which ActiveJob reserves for its own markers")
        hash_[key] = serialize(item, f"{where}[{key!r}]")
    return hash_

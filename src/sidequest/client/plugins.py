"""The client's seam: the features with a part in a push, or in what a client reads by jid,
register here, as the worker's register in `worker.lifecycle`; a client asks this module and
never names a feature (`tests/test_layers.py` checks it).

A feature's part (`ClientPlugin`), each piece optional:

- `shape`, asked once per push (`Client.build`) when the push carries one of its `options` (a
  payload field of the push, or an option given to it): it refuses a push it cannot take, may
  move the push's times, and returns a `Stamp` that marks each payload (debounce and throttle:
  `flow_key`);
- `claim`, asked per job (`Client.prepare`) when its payload holds the plugin's `field`: the key
  the push's script takes for it (`push_script.PUSH_UNIQUE`: a unique claim, a debounce or
  throttle record); the first registered plugin whose field a payload holds decides;
- `record`, asked per job the same way: the status record the push writes with the job;
- `status`, `result`, `send_event`: the queries a client runs by jid (`Query`: generators of Redis
  commands, run by `lookup.run` on a blocking client and by `async_client.run` on redis.asyncio).

`sidequest.features.registry` registers them when `sidequest` is imported (any `import
sidequest.<module>` runs the package root first), so a client built from `sidequest.client`
alone pushes a unique job with its claim. A job that holds none of the parts' fields (`MARKS`)
costs the push an `in` test a field (cheaper than a set test over a payload's keys), no call.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sidequest.store.keys import Keyspace

T = TypeVar("T")
Command = tuple[str, tuple[Any, ...], dict[str, Any]]  # a redis-py method name, its arguments
Query = Generator[list[Command], list[Any], T]  # yields commands to run together, gets their replies

# what the push's script takes for a job: a claim's key and milliseconds; for debounce and
# throttle (`flow`) its record's, then the script's flow code, its counts key and the job's class
Claim = tuple[str, int] | tuple[str, int, str, str, str]
Record = tuple[str, int, str, str]  # a status record: key, milliseconds to keep it, state, due time
Stamp = Callable[[dict[str, Any], list[Any], dict[str, Any] | None], None]  # (payload, args, kwargs)
Times = list[float | None]  # a push's schedule times, one per job (None: now)


class Shape(Protocol):
    def __call__(self, job: Any, base: dict[str, Any], options: Mapping[str, Any], times: Times,
                 now: float) -> tuple[Times, Stamp | None]:
        """Check a push (`base`: its payload fields; `options`: as given); its times, and what
        marks each of its payloads (or None)."""
        ...


class PerJob(Protocol):
    def __call__(self, payload: dict[str, Any], when: float | None, now: float, space: Keyspace) -> Any:
        """A job's claim or record (None: none), for a payload about to be pushed at `when`."""
        ...


@dataclass(frozen=True)
class ClientPlugin:
    """One feature's part in a push and in a client's reads (see the module)."""

    name: str
    options: tuple[str, ...] = ()  # the push options that call `shape`
    shape: Shape | None = None
    field: str = ""  # the payload field that calls `claim` and `record`
    claim: PerJob | None = None  # -> Claim | None
    record: PerJob | None = None  # -> Record | None
    status: Callable[[str, str | None, Callable[[], float], Keyspace], Query[str]] | None = None
    result: Callable[[str, float | None, Keyspace], Query[Any]] | None = None
    send_event: Callable[[str, str, Any, float, Keyspace, bool], Query[bool]] | None = None


_plugins: dict[str, ClientPlugin] = {}  # in registration order
# What the client's hot path reads, rebuilt in place by `register`: (push options, shape), and
# (payload field, claim or record), in registration order.
SHAPES: list[tuple[tuple[str, ...], Shape]] = []
CLAIMS: list[tuple[str, PerJob]] = []
RECORDS: list[tuple[str, PerJob]] = []
MARKS: list[str] = []  # every field of CLAIMS and RECORDS: a payload with none is asked nothing


def register(*plugins: ClientPlugin) -> None:
    """Add features' parts (a name registered again keeps its place, with the new plugin)."""
    for plugin in plugins:
        _plugins[plugin.name] = plugin
    _compile()


def unregister(name: str) -> None:
    """Take a feature's part out (an integration turned off): the next push goes without it."""
    _plugins.pop(name, None)
    _compile()


def _compile() -> None:
    SHAPES[:] = [(p.options, p.shape) for p in _plugins.values() if p.shape is not None]
    CLAIMS[:] = [(p.field, p.claim) for p in _plugins.values() if p.claim is not None]
    RECORDS[:] = [(p.field, p.record) for p in _plugins.values() if p.record is not None]
    MARKS[:] = list(dict.fromkeys(field for field, _ in CLAIMS + RECORDS))


def parts(payload: dict[str, Any], when: float | None, now: float, space: Keyspace) -> tuple[Any, Any]:
    """A job's claim (`Claim`) and its status record (`Record`), each None when it has none: the
    first registered part whose field the payload holds decides each."""
    claim = record = None
    for field, take in CLAIMS:
        if field in payload:
            claim = take(payload, when, now, space)
            break
    for field, keep in RECORDS:
        if field in payload:
            record = keep(payload, when, now, space)
            break
    return claim, record


def registered() -> list[ClientPlugin]:
    return list(_plugins.values())


def declared_options(job: Any) -> dict[str, Any]:
    """The options of how `job` is pushed given where it is defined (`push_options`), or none."""
    declared = getattr(job, "push_options", None)
    return declared() if callable(declared) and not isinstance(job, str) else {}


def _answer(hook: str) -> Any:
    for plugin in _plugins.values():
        found = getattr(plugin, hook)
        if found is not None:
            return found
    raise RuntimeError(f"no feature answers {hook}; `import sidequest` registers them")


def status_query(jid: str, queue: str | None, clock: Callable[[], float], space: Keyspace) -> Query[str]:
    """The state of job `jid` (`sidequest.status`), as a query."""
    query: Query[str] = _answer("status")(jid, queue, clock, space)
    return query


def result_query(jid: str, timeout: float | None, space: Keyspace) -> Query[Any]:
    """Job `jid`'s return value once it has ended (`sidequest.result`), as a query."""
    query: Query[Any] = _answer("result")(jid, timeout, space)
    return query


def event_query(jid: str, name: str, payload: Any, now: float, space: Keyspace, millis: bool) -> Query[bool]:
    """Event `name` sent to job `jid`'s durable wait (`sidequest.send_event`), as a query."""
    query: Query[bool] = _answer("send_event")(jid, name, payload, now, space, millis)
    return query

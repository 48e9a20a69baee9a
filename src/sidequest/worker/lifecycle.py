"""The points of a job's life, and the seam features plug into.

    taken      a processor decoded the job and is about to run it
    finished   it returned (applied within a few milliseconds, with other successes, see fetch)
    retried    it failed and waits in `retry`
    dead       it failed for the last time, or could not be decoded, and is in `dead`
    dropped    it ended without a trace in Redis (retry=False, dead=False, a business failure)
    put_back   shutdown put it back at the head of its queue, unchanged
    recovered  its process died; another process put it back (or, past the limit, in `dead`)
    snoozed    a rate limit was full (`limiter`): it waits in `schedule`, no retry spent
    cancelled  it was cancelled (`cancellation`): stopped while running, or removed from where it waited

and three that an operator causes through the admin API (`api`), on a job in a queue or in
`schedule`, `retry` or `dead`:

    requeued   an operator retried it or ran it now: it is back in its queue
    deleted    an operator deleted it
    killed     an operator moved it to `dead`

A feature (tasks, unique claims, status records) contributes Lua functions to the scripts that
apply these points (`lua`), and for each job and point the operations to run there (`ops`),
with their values taken from the decoded payload in Python and passed as script arguments. The
operations run inside the same atomic call that moves the job, and only if the move happened.
The core (fetch, processor, manager, retry, recovery) calls `Lifecycle.ops` and never names a
feature.

A feature may also wrap the run of a job (`running`), e.g. to let the job report progress
(tasks) or read its cancel flag (cancellation), and observe an outcome once it has been written
(`observe`), e.g. to count it in memory (the per-job metrics).

The features are registered here, in one ordered list (`register`, `Plugin`), by
`sidequest.features.registry` when sidequest is imported (and by an integration that observes
outcomes, `contrib.opentelemetry`, while it is turned on: `unregister` takes it out); the
worker (`launcher`, a supervisor's orphan recovery) and the moves made outside a worker
(`operator_lifecycle`: the admin API, a cancel) compose them from that list (`compose`), so no
module of the worker names a feature.
The list's order is the order of the operations in a script: a feature that reads what another
writes comes after it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from sidequest.config import Config
from sidequest.jobs.registry import Registry, default_registry
from sidequest.store.keys import Keyspace
from sidequest.worker.background.heartbeat import Flush
from sidequest.worker.outcome import Outcome

POINTS = ("taken", "finished", "retried", "dead", "dropped", "put_back", "recovered",
          "requeued", "deleted", "killed", "snoozed", "cancelled")

Op = tuple[str, list[Any]]  # (feature's Lua name, its arguments)


class Feature(Protocol):
    """What a feature gives the lifecycle."""

    name: str  # the key of its function in the scripts' FEATURES table
    lua: str  # Lua defining FEATURES[name] = function(point, now, args) ... end
    marks: frozenset[str] | None  # payload keys without which `ops` is None (None: any payload may have ops)
    # optional `always_at: frozenset[str]`: points where `ops` is asked even without a mark (see `Lifecycle`)

    def ops(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> list[Any] | None:
        """The arguments of this feature's operation for `payload` at `point`, or None."""
        ...

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[None] | None:
        """A context entered while the job runs, or None."""
        ...

    def observe(self, point: str, payload: dict[str, Any], outcome: Outcome | None) -> None:
        """Called in this process once the outcome at `point` has been written."""
        ...


class Lifecycle:
    def __init__(self, features: Sequence[Feature] = ()) -> None:
        self.features = list(features)
        self.lua = "\n".join(f.lua for f in self.features)
        # A payload holding none of these keys has no operations at any point (most jobs): one
        # set test instead of a call per feature. None when a feature may have ops for any payload.
        marks: frozenset[str] | None = frozenset()
        for feature in self.features:
            own = getattr(feature, "marks", None)  # a feature without marks is asked about every payload
            marks = None if marks is None or own is None else marks | own
        self.marks = marks
        # point -> the features asked there whatever the payload holds (`always_at`): a feature
        # whose mark a job gains only while it runs is asked at the rarer ends and at an
        # operator's delete, where the stored payload cannot carry that mark
        self._always: dict[str, list[Feature]] = {}
        for feature in self.features:
            for point in getattr(feature, "always_at", ()):
                self._always.setdefault(point, []).append(feature)
        # only the features whose hooks do something are asked on every job's path
        self._observers = [f for f in self.features if getattr(f, "observes", True)]
        self._wrappers = [f for f in self.features if getattr(f, "wraps", True)]

    def ops(self, point: str, payload: dict[str, Any] | None, outcome: Outcome | None = None) -> list[Any]:
        """The script arguments for every feature's operation at `point`: `n, (name, k, args...)*`."""
        if payload is None or not self.features:
            return [0]
        features = self.features
        if self.marks is not None and self.marks.isdisjoint(payload):
            if point not in self._always:  # most jobs at every point: no feature asked
                return [0]
            features = self._always[point]
        flat: list[Any] = []
        count = 0
        for feature in features:
            args = feature.ops(point, payload, outcome)
            if args is not None:
                flat += [feature.name, len(args), *args]
                count += 1
        return [count, *flat]

    def observe(self, point: str, payload: dict[str, Any] | None, outcome: Outcome | None) -> None:
        if payload is not None:
            for feature in self._observers:
                feature.observe(point, payload, outcome)

    def running(self, payload: dict[str, Any]) -> AbstractContextManager[Any]:
        """The features' contexts for the run of this job, entered together."""
        contexts = [c for feature in self._wrappers if (c := feature.running(payload)) is not None]
        if len(contexts) == 1:  # the usual case: no ExitStack on every job's path
            return contexts[0]
        return _entered_together(contexts) if contexts else _NOTHING


_NOTHING = contextlib.nullcontext()


@contextlib.contextmanager
def _entered_together(contexts: list[AbstractContextManager[Any]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for context in contexts:
            stack.enter_context(context)
        yield


def has_ops(ops: list[Any]) -> bool:
    return bool(ops) and ops[0] != 0


# -- the registered features ---------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    """What a registered feature is built from: a worker process's, or a client's (an operator's)."""

    config: Config
    redis: redis.Redis
    keys: Keyspace  # Sidekiq's layout, or Cluster mode's
    clock: Callable[[], float] = time.time
    registry: Registry = default_registry  # the job classes the worker runs
    options: Mapping[str, Any] = field(default_factory=dict)  # by plugin name: `Launcher(config, periodic=...)`


class Service(Protocol):
    """A thread a feature runs in each worker process (the periodic scheduler): started after the
    poller, stopped with it, before the runners' jobs are waited for."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Plugin:
    """One registered feature: how a worker (and, with `operator`, a move made outside a worker)
    builds its part."""

    name: str
    feature: Callable[[Setting], Feature] | None = None  # its operations in the scripts and its hooks
    operator: bool = False  # it records where a job is, so an operator's move runs it too
    flush: Callable[[Any], Flush] | None = None  # given the built feature: what the heartbeat writes with each beat
    service: Callable[[Setting], Service] | None = None  # a thread each worker process runs


_plugins: dict[str, Plugin] = {}  # in registration order: the order of the scripts' operations


def register(*plugins: Plugin) -> None:
    """Add features to the list (a name registered again keeps its place, with the new plugin)."""
    for plugin in plugins:
        _plugins[plugin.name] = plugin


def unregister(name: str) -> None:
    """Take a feature out of the list (an integration turned off); workers built with it keep it."""
    _plugins.pop(name, None)


def registered() -> list[Plugin]:
    return list(_plugins.values())


@dataclass
class Composed:
    """The registered features, built for one worker process (or one operator's client)."""

    lifecycle: Lifecycle
    flushes: list[Flush]  # handed to the heartbeat
    services: dict[str, Service]  # by plugin name, started and stopped by the launcher


def compose(setting: Setting, *, services: bool = False, operator: bool = False) -> Composed:
    """Build every registered feature (with `operator`, those that record where a job is), and
    with `services` their threads; an option names a registered plugin or is refused."""
    unknown = sorted(set(setting.options) - set(_plugins))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r} (no feature of that name is registered)")
    features: list[Feature] = []
    flushes: list[Flush] = []
    threads: dict[str, Service] = {}
    for plugin in _plugins.values():
        if plugin.feature is not None and (plugin.operator or not operator):
            features.append(built := plugin.feature(setting))
            if plugin.flush is not None and not operator:
                flushes.append(plugin.flush(built))
        if services and plugin.service is not None:
            threads[plugin.name] = plugin.service(setting)
    return Composed(Lifecycle(features), flushes, threads)


class ClientLike(Protocol):
    """What `operator_lifecycle` reads of a client (`sidequest.Client`)."""

    @property
    def config(self) -> Config: ...

    @property
    def redis(self) -> redis.Redis: ...

    @property
    def keys(self) -> Keyspace: ...

    @property
    def clock(self) -> Callable[[], float]: ...


def operator_lifecycle(client: ClientLike) -> Lifecycle:
    """The lifecycle of a move made outside a worker (an operator's action in `api.actions`, a
    cancel): the registered features that record where a job is (tasks, unique claims, status
    records, workflow steps), in the worker's order; the per-job metrics count runs, so not here.
    In Cluster mode a feature's key lives in its job's queue's slot, which the move's script is in."""
    setting = Setting(client.config, client.redis, client.keys, client.clock)
    return compose(setting, operator=True).lifecycle

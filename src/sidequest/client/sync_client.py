"""Pushing jobs into Redis exactly as Sidekiq's client does.

    client = Client(Config(redis_url="redis://localhost:6379/0"))
    client.push(Resize, ["a.png", 200])                       # by job class
    client.push(send, [42], {"template": "reset"})            # keyword arguments: the payload's kwargs
    client.push("HardWorker", [1, 2], queue="ruby")           # by name: a job of another codebase
    client.push_bulk(Resize, [["a.png", 1], ["b.png", 2]])

Immediate jobs: one MULTI with `SADD queues <q>` and `LPUSH queue:<q> <json>...`.
Scheduled jobs: `ZADD schedule <at> <json>`, without `enqueued_at`.
Every payload is built and checked before anything is sent, and a whole push (bulk included)
goes in one MULTI/EXEC, so a bad argument or a dropped connection leaves nothing partial.
A push with unique jobs (`unique_for`) is one script call instead, that takes each job's claim
and writes the job only if it got it (see `unique`); a job pushed with `result_ttl` gets its
status record in the same call (see `results`). The client finds these features' parts of a
push (the claim, debounce and throttle, the record) in its seam, `plugins`, where they register.

On a Redis Cluster (`redis+cluster://`, see `keys.ClusterKeyspace`) a push is written per queue,
each in one MULTI (or script call) on the primary of that queue's slot, after the queue's name
is added to `queues`; a bulk push over several queues is then several writes, each whole.
What is sent on which connection (with `wait_replicas`, the WAIT on the connection that wrote)
is planned once, for this client and the asyncio one, in `push_plan`.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any, ClassVar, Unpack

import redis

from sidequest.client import plugins, push_plan
from sidequest.client.plugins import declared_options
from sidequest.client.push_plan import LISTED_EVERY, Batch
from sidequest.client.push_plan import NO_REPLICAS as NO_REPLICAS  # where `testing` and `aio` import them from
from sidequest.client.push_plan import Replicas as Replicas
from sidequest.config import Config
from sidequest.errors import JobArgumentError
from sidequest.jobs import active_job
from sidequest.jobs.options import (
    DEFAULTS,
    LANE_OPTIONS,
    PUSH_ONLY,
    JobOptions,
    check_options,
    expires_at,
    group_value,
    lane_group,
    payload_fields,
    schedule_at,
    spread_seconds,
    spread_times,
)
from sidequest.jobs.payload import Shapes, check_args, check_kwargs, encode, encode_fast, in_millis, new_jids, stamp
from sidequest.jobs.registry import Registry, default_registry
from sidequest.store import direct as direct_path
from sidequest.store import keys, lanes
from sidequest.store.connection import SOCKET_TIMEOUT, connect
from sidequest.store.urls import is_cluster_url

PlainRedis = redis.Redis  # the name `redis` is a property inside Client


class Client:
    """Builds payloads, runs client middleware, and writes them to Redis."""

    # Whether rate limits (`sidequest.limiter`) count on this client's Redis. The clients of
    # `sidequest.testing`'s fake and inline modes have none: a limiter on them lets everyone in.
    counts_limits: ClassVar[bool] = True
    # Where a push by name with keyword arguments finds its Python job (testing's fakes: theirs).
    job_registry: Registry = default_registry

    def __init__(self, config: Config | None = None, *, redis_client: redis.Redis | None = None,
                 clock: Callable[[], float] = time.time, socket_timeout: float = SOCKET_TIMEOUT) -> None:
        """`socket_timeout`: seconds any one Redis call of the connection made from `config.url`
        may wait (not of a given `redis_client`): a dashboard's and a probe's are short."""
        self.config = config or Config()
        self._redis = redis_client
        self.socket_timeout = socket_timeout
        self.connection_given = redis_client is not None  # else made from config.url, on first use
        self._lock = threading.Lock()
        self.clock = clock
        self._listed: dict[str, float] = {}  # Cluster mode: queue -> when this client last added it to `queues`

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            with self._lock:
                if self._redis is None:
                    self._redis = connect(self.config.url, socket_timeout=self.socket_timeout)
        return self._redis

    # -- public --------------------------------------------------------------------------------
    def push(self, job: Any, args: Iterable[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
             at: Any = None, in_: Any = None, **options: Unpack[JobOptions]) -> str | None:
        """Push one job; return its jid, or None if client middleware stopped it.

        `job` is a Job class, a `@job` function, or a wire name (a job of another codebase).
        `kwargs`: keyword arguments of a Python job (the payload's `kwargs`; refused for a
        name that is not a registered Python job). `at` is an epoch time or aware datetime,
        `in_` a delay; both follow Sidekiq's rule.
        """
        now = self.clock()
        when = self.schedule_time(at, in_, now)
        entries, jids = self.build(job, [args], [when], now, dict(options), kwargs=kwargs)
        refused = self.write(entries, now, replicas=self.replicas(job, options))
        return None if jids[0] in refused else jids[0]

    def push_bulk(self, job: Any, args_list: Iterable[Any], *, at: Any = None, spread: Any = None,
                  **options: Unpack[JobOptions]) -> list[str | None]:
        """Push many jobs of one kind in one transaction; return their jids in order.

        `at` may be one time for all, or a list with one time per job. `spread` (a timedelta or
        seconds) spreads the jobs evenly over that long from `at` (or now), as Sidekiq 8's
        `spread_interval`. A job stopped by client middleware, or a unique job another copy holds
        the claim of, has None in its place.
        """
        now = self.clock()
        all_args = list(args_list)
        times = self.bulk_times(at, len(all_args), now, spread)
        with collection_paused():
            entries, jids = self.build(job, all_args, times, now, dict(options))
            refused = self.write(entries, now, replicas=self.replicas(job, options))
        return [None if jid in refused else jid for jid in jids] if refused else jids

    def replicas(self, job: Any, options: Mapping[str, Any]) -> Replicas:
        """How many replicas a push of `job` waits for, and how long: the push's options, then
        the job's, then the configuration's."""
        chosen = {**declared_options(job), **{key: options[key] for key in PUSH_ONLY if key in options}}
        return Replicas(chosen.get("wait_replicas", self.config.wait_replicas),
                        chosen.get("wait_timeout", self.config.wait_timeout))

    def build(self, job: Any, args_list: list[Any], times: list[float | None], now: float,
              options: dict[str, Any], steer: Mapping[str, Any] | None = None, kwargs: Mapping[str, Any] | None = None,
              ) -> tuple[list[tuple[dict[str, Any], float | None]], list[str | None]]:
        """Checked payloads (through client middleware) with their times, and the jids in order.
        `steer`: the fields a feature sets on its own jobs (`options.FEATURE_FIELDS`), which no
        option may set. `kwargs`: the keyword arguments of every job (a single push's)."""
        name, base = self._describe(job, options)
        if self.config.result_ttl is not None and "result_ttl" not in base and not isinstance(job, str):
            base["result_ttl"] = self.config.result_ttl  # the default; a wire name may be a Ruby job's: none
        if steer:
            base.update(steer)
        # a job of this codebase binds each push to its signature; a bare name cannot be checked
        fits = None if isinstance(job, str) else getattr(job, "check_arguments", None)
        keywords = None
        if kwargs:  # most pushes: none, and no other work
            keywords = check_kwargs(kwargs)
            if isinstance(job, str):
                fits = _python_job(self.job_registry, job, keywords).check_arguments
        checked = []
        for index, args in enumerate(args_list):
            try:
                checked.append(check_args(list(args) if isinstance(args, tuple) else args))
                if fits is not None:
                    fits(checked[-1], keywords) if keywords is not None else fits(checked[-1])
            except JobArgumentError as exc:
                prefix = f"job {index} of the bulk: " if len(args_list) > 1 else ""
                raise JobArgumentError(f"{prefix}{exc}") from None
        stamps: list[plugins.Stamp] = []
        for names, shape in plugins.SHAPES:  # features' parts of a push (debounce, throttle): most pushes, none
            for option in names:  # plain `in` tests: no call on the hot path
                if option in base or option in options:
                    times, marks = shape(job, base, options, times, now)
                    stamps += [marks] if marks is not None else []
                    break
        groups: list[str] | None = None
        if any(option in base for option in LANE_OPTIONS):
            function = lane_group(base)  # most pushes: none of these, no other work
            if function is not None:
                groups = [group_value(function, args, keywords, name) for args in checked]
        on_wire = keywords  # a Python job's keywords travel in "kwargs"; an ActiveJob's among its arguments
        if getattr(job, "active_job", False) is True:  # for a Rails worker: Rails' wrapper (see `active_job`)
            checked = [[active_job.job_data_for(name, args, keywords, queue=base["queue"], now=now)]
                       for args in checked]
            base["wrapped"], name, on_wire = name, active_job.RAILS_WRAPPER, None
        entries: list[tuple[dict[str, Any], float | None]] = []
        jids: list[str | None] = []
        middleware = len(self.config.client_middleware) > 0
        created = stamp(now, self.config.sidekiq_version >= 8)
        expiring = base.get("expires_in") is not None
        for index, (args, when, jid) in enumerate(zip(checked, times, new_jids(len(checked)), strict=True)):
            payload = dict(base)
            if groups is not None:
                payload["group"] = groups[index]
            payload["args"] = args  # Sidekiq 6.4 writes args before class; keep its field order
            if on_wire is not None:
                payload["kwargs"] = on_wire  # read by Python workers alone (see `payload`)
            payload["class"] = name
            payload["jid"] = jid
            payload["created_at"] = created
            for marks in stamps:
                marks(payload, args, keywords)
            if expiring:  # the deadline counts from the job's own time, as Sidekiq Pro's
                payload["expires_at"] = expires_at(payload, when, now)
            if middleware:
                pushed = self._through_middleware(name, payload)
                if pushed is None:
                    jids.append(None)
                    continue
                payload = pushed
            entries.append((payload, when))
            jids.append(payload["jid"])
        return entries, jids

    # -- building ------------------------------------------------------------------------------
    @staticmethod
    def _describe(job: Any, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The wire name and options of a job: a Job class or `@job` function (anything with a
        `name` and `payload_options()`), or a bare wire name."""
        name, defaults = getattr(job, "name", None), getattr(job, "payload_options", None)
        if not isinstance(job, str) and isinstance(name, str) and name and callable(defaults):
            return name, {**defaults(), **payload_fields(check_options(options))}
        if isinstance(job, str) and job:
            return job, {**DEFAULTS, **payload_fields(check_options(options))}
        raise JobArgumentError(f"push needs a Job class, a @job function or a job name, got {job!r}")

    def _through_middleware(self, name: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        chain = self.config.client_middleware
        if not len(chain):
            return payload
        result = chain.invoke(name, payload, payload["queue"], final=lambda: payload)
        return result if isinstance(result, dict) else None

    @staticmethod
    def schedule_time(at: Any, in_: Any, now: float) -> float | None:
        """Epoch seconds for `at` (time) or `in_` (delay), or None to enqueue now."""
        if at is not None and in_ is not None:
            raise JobArgumentError("give `at` or `in_`, not both")
        if at is not None:
            return schedule_at(at, now, method="perform_at")
        if in_ is not None:
            return schedule_at(in_, now, method="perform_in")
        return None

    @staticmethod
    def bulk_times(at: Any, count: int, now: float, spread: Any = None) -> list[float | None]:
        """One schedule time per job of a bulk: `at` is one time for all, or a list of them;
        with `spread`, the jobs' times step evenly from `at` (or now) over that interval."""
        if spread is not None:
            if isinstance(at, (list, tuple)):
                raise JobArgumentError("give a bulk push either a list of times or spread, not both")
            start = now if at is None else schedule_at(at, now, method="perform_at") or now
            return spread_times(start, count, spread_seconds(spread), now)
        if isinstance(at, (list, tuple)):
            if len(at) != count:
                raise JobArgumentError(f"bulk `at` has {len(at)} times for {count} jobs")
            return [schedule_at(t, now, method="perform_at") for t in at]
        when = None if at is None else schedule_at(at, now, method="perform_at")
        return [when] * count

    # -- writing -------------------------------------------------------------------------------
    def write(self, entries: list[tuple[dict[str, Any], float | None]], now: float,
              also: Callable[[Any], None] | None = None, replicas: Replicas = NO_REPLICAS) -> frozenset[str]:
        """One MULTI with every entry (and `also(pipe)`'s commands, e.g. a task's records), or with
        unique jobs one script call, then with `replicas` a WAIT on the same connection
        (NotReplicatedError if too few confirm in time): see `push_plan`. Returns the jids of the
        unique jobs whose claim another copy holds: nothing of theirs was written."""
        if not entries and also is None:
            return frozenset()
        batch = self.prepare(entries, now)
        commands = push_plan.single(batch, self.keys, replicas, also)
        if commands is not None:  # the common push: one exchange
            push_plan.judge(batch, self._lane.exchange(commands), replicas)
            return frozenset()
        return push_plan.drive(self.plan(batch, replicas, also), self._send)

    def plan(self, batch: Batch, replicas: Replicas = NO_REPLICAS, also: Callable[[Any], None] | None = None
             ) -> push_plan.Plan:
        """The push of `batch` by this client, for any driver (this one's `_send`, the asyncio client's)."""
        return push_plan.plan(batch, self.keys, replicas, also, self._to_list)

    def _send(self, exchange: push_plan.Exchange) -> list[Any]:
        """An exchange on one connection of the direct path (Cluster mode: of its key's primary)."""
        key, commands, refresh = exchange
        lane = self._lane
        if not isinstance(lane, direct_path.ClusterDirectPath):
            return lane.exchange(commands)
        if refresh:
            lane.client.nodes_manager.initialize()
        try:
            return lane.for_key(key).exchange(commands)
        except (redis.ConnectionError, redis.TimeoutError):  # a failover, maybe: the next push looks again
            lane.client.nodes_manager.initialize()
            raise

    def _to_list(self, names: list[str]) -> list[str]:
        """Cluster mode: the queue names of a push to add to `queues`, each at most every LISTED_EVERY s."""
        now = self.clock()
        chosen = [name for name in names if now - self._listed.get(name, -LISTED_EVERY) >= LISTED_EVERY]
        for name in chosen:
            self._listed[name] = now
        return chosen

    def prepare(self, entries: list[tuple[dict[str, Any], float | None]], now: float) -> Batch:
        """Every entry stamped, given the claim and status record its features give it (see
        `plugins`), and encoded (all are checked before anything is written)."""
        batch = Batch()
        space = self.keys
        # see `_encode`; a shape pays off from the second payload on
        shapes = Shapes() if len(entries) > 1 and not len(self.config.client_middleware) else None
        seconds, millis = stamp(now, False), stamp(now, True)  # one object each: `Shapes` needs that
        v8 = self.config.sidekiq_version >= 8
        marks = plugins.MARKS  # the payload fields a feature's part of a push is asked for
        for index, (payload, when) in enumerate(entries):
            if when is None:
                payload["enqueued_at"] = millis if v8 or in_millis(payload) else seconds
            claim = record = None
            try:
                if space.cluster:
                    cluster_problem(payload)
                for mark in marks:  # most jobs hold none: a few `in` tests, no call
                    if mark in payload:
                        claim, record = plugins.parts(payload, when, now, space)
                        break
                blob = self._encode(payload, shapes)
            except (JobArgumentError, TypeError, ValueError, RecursionError) as exc:
                text = str(exc) if isinstance(exc, JobArgumentError) else (  # a claim's digest of what client
                    f"payload of job {payload.get('class')!r} is not JSON: {exc}")  # middleware added
                raise JobArgumentError(f"job {index} of the bulk: {text}" if len(entries) > 1 else text) from None
            lane = lanes.route(payload, space) if when is None else None  # a scheduled one: when it is due
            batch.add(payload, when, blob, claim, record, lane)
        return batch

    @cached_property
    def direct(self) -> PlainRedis:
        """A redis-py client on this client's Redis whose plain commands take the direct path
        (`direct_path.DirectRedis`): what `sidequest.redis()` returns. On a Redis Cluster, the cluster
        client itself (it sends each command to the node of its key)."""
        if self.keys.cluster:
            return self.redis
        return direct_path.DirectRedis(connection_pool=self.redis.connection_pool)

    @cached_property
    def keys(self) -> keys.Keyspace:
        """Where this client's jobs go: Sidekiq's layout, or Cluster mode's (see `keys`); read
        from the URL when no client was given, so building a payload never connects."""
        if self._redis is not None:
            return keys.space(self._redis)
        return keys.CLUSTER if is_cluster_url(self.config.url) else keys.DEFAULT

    @cached_property
    def _lane(self) -> direct_path.DirectPath:
        return direct_path.direct_path_for(self.redis)

    def _encode(self, payload: dict[str, Any], shapes: Shapes | None = None) -> bytes:
        """The payload as the UTF-8 bytes Redis stores, refused with a clear error if it cannot be.
        Without client middleware every value in it was checked as native JSON, so the fast
        encoder writes it (`payload.encode_fast`, through `shapes` for a push's many payloads);
        middleware may add anything, which the standard encoder refuses clearly."""
        try:
            if len(self.config.client_middleware):
                blob = encode(payload).encode("utf-8")
            else:
                blob = shapes.encode(payload) if shapes is not None else encode_fast(payload)
        except UnicodeEncodeError as exc:  # a lone surrogate, from undecodable bytes in argv or a path
            raise JobArgumentError(
                f"job {payload.get('class')!r} has a string that is not valid Unicode ({exc.reason}: "
                f"{exc.object[exc.start:exc.end]!r}); decode the bytes it came from properly") from None
        except (TypeError, ValueError, RecursionError) as exc:  # client middleware added something
            raise JobArgumentError(f"payload of job {payload.get('class')!r} is not JSON: {exc}") from None
        limit = self.config.max_payload_size
        if len(blob) > limit:
            size = len(blob)
            raise JobArgumentError(
                f"job {payload.get('class')!r} is {size:,} bytes of JSON, over max_payload_size "
                f"({limit:,}); pass a reference (an id, a path, a URL) instead of the data, "
                "or raise max_payload_size")
        return blob


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a bulk push builds its payloads: they
    hold no cycles, but thousands of new dicts trigger full collections that walk every object
    of the process (about 20 ms, one 10,000-job push in three, measured). Left off if it was off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _python_job(registry: Registry, name: str, kwargs: Mapping[str, Any]) -> Any:
    """The registered Python job a push by `name` with keyword arguments goes to; refused in
    one line for any other name: its worker (Ruby Sidekiq's, another codebase's) calls perform
    with `args` alone, so the keywords would be lost."""
    if name in registry:
        return registry.get(name)
    raise JobArgumentError(
        f"job {name}: keyword arguments ({', '.join(f'{key}=' for key in kwargs)}) cannot go to a job that is not "
        "a Python job of this codebase (its worker passes only the positional args to perform); "
        "pass them in args, e.g. a dict as the last argument")


# payload fields whose feature keeps records outside the job's queue slot: not in Cluster mode yet
def cluster_problem(payload: dict[str, Any]) -> None:
    """Refuse, in one line, a job Cluster mode cannot hold: a queue name that is not a hash tag,
    or a `retry_queue` in another slot (a retry moves within its slot, see `keys.group_of`)."""
    queue = str(payload["queue"])
    problem = keys.cluster_queue_problem(queue)
    if problem is not None:
        raise JobArgumentError(f"{problem}; rename the queue")
    retry_queue = payload.get("retry_queue")
    if retry_queue is not None and keys.group_of(str(retry_queue)) != keys.group_of(queue):
        raise JobArgumentError(
            f"job {payload.get('class')!r}: in Cluster mode a retry stays in its queue's slot, so retry_queue "
            f"{retry_queue!r} must be in the group of queue {queue!r}: name both {{group}}name, as "
            f"{{{keys.group_of(queue)}}}{str(retry_queue).rpartition('}')[2]}")


_default: Client | None = None
_default_lock = threading.Lock()


def configure(config: Config | None = None, *, client: Client | None = None) -> Client:
    """Set the client behind module-level calls like `MyJob.perform_async` (the edge default)."""
    global _default
    with _default_lock:
        _default = client or Client(config or Config.from_env())
        return _default


def configure_unless_set(config: Config) -> Client:
    """The worker's own settings become the default, unless the job modules configured one."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client(config)
        return _default


def redis_for_jobs() -> redis.Redis:
    """The Redis of the default client, for a job's own commands (`sidequest.redis()`), as
    `Sidekiq.redis` lends a Ruby job the worker's pool:

        @sidequest.job
        def count_visit(page):
            sidequest.redis().incr(f"visits:{page}")

    A redis-py client (the same methods and replies) whose plain commands cost about half the
    CPU of a stock one (see `store.direct`). In a worker it is the worker's Redis."""
    return default_client().direct


def default_client() -> Client:
    """The process-wide client; built from the environment (`REDIS_URL`) on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Client(Config.from_env())
    return _default

"""Defining jobs: the `@job` decorator on functions and the `Job` base class.

    @sidequest.job(queue="mail", retry=5)
    def send_welcome(user_id: int) -> None: ...

    class Resize(sidequest.Job, queue="images", backtrace=True):
        def perform(self, path: str, width: int) -> None: ...

    send_welcome.perform_async(42)                    # -> jid
    send_welcome.perform_async(42, template="reset")  # keyword arguments too (a Python job's)
    Resize.perform_in(60, "a.png", 200)               # in a minute
    Resize.set(queue="urgent").perform_async("b.png", 100)
    send_welcome.perform_bulk([[1], [2], [3]])        # -> [jid, jid, jid]

Options are the known names of `options.JobOptions` (typed, so a type checker sees a misspelt
one, and refused at run time with the nearest name); fields of your own go in `custom={...}`.
A definition also takes the worker-side ones (`options.DefinitionOptions`: `retry_on`,
`discard_on`), which `.set(...)` and a push refuse.

A decorated function becomes a `Job` subclass behind the scenes, so a worker runs both kinds
the same way. Every job is registered under its wire name (`module.qualname` unless `name=`
is given); only registered names are ever run by a worker.

The enqueue methods are typed from the job's own parameters (`ParamSpec`): the function's for
`@job`, `perform`'s for a `Job` subclass (through the classmethods' self-type, `_Performs`), so
a type checker flags `send_welcome.perform_async("x")`. At run time the arguments are bound to
that same signature at push, before anything is written. Keyword arguments travel in the
payload's `kwargs` (see `payload`), which a Ruby worker never passes to its `perform`.

Celery's `delay` and `apply_async` are here too, as a porting aid: `delay` is `perform_async`,
and `apply_async(args, kwargs, countdown=, eta=, expires=, queue=, priority=, time_limit=)` maps
its options to `perform_in`/`perform_at`, `expires_in`, `queue`, `priority` and `timeout`, and
refuses Celery's others with what to use instead (see `client.porting`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from sidequest.client import porting
from sidequest.client.porting import ApplyAsyncOptions
from sidequest.client.sync_client import default_client
from sidequest.errors import JobArgumentError, JobDefinitionError
from sidequest.jobs.arguments import bind, function_signature, perform_signature
from sidequest.jobs.options import (
    DEFAULTS,
    PUSH_ONLY,
    DefinitionOptions,
    JobOptions,
    check_options,
    merge_options,
    payload_fields,
)
from sidequest.jobs.registry import Registry, default_registry

if TYPE_CHECKING:
    from sidequest.client.async_client import AsyncJobSetter
    from sidequest.client.sync_client import Client
    from sidequest.features.workflows.signature import Signature

P = ParamSpec("P")
Q = ParamSpec("Q")  # `s`: a job's parameters after the first, where its dependencies' results go (Celery's order)
R = TypeVar("R")

Delay = float | timedelta  # perform_in: seconds (int or float) or a timedelta
When = float | datetime  # perform_at: epoch seconds or an aware datetime
BulkAt = When | Sequence[When] | None  # perform_bulk: one time for all, or one per job
# retry_in: seconds until the retry, None for the default back-off, "kill" (dead now, as out of
# retries) or "discard" (dropped), as Sidekiq's `sidekiq_retry_in` returns :kill / :discard
RetryIn = float | Literal["kill", "discard"] | None


class SetOptions(JobOptions, total=False):
    """What `.set(...)` takes: the job options, and a client to push through."""

    client: Client


class _Performs(Protocol[P]):
    """A Job class seen through its `perform`: the classmethods take `cls` as this, so a type
    checker reads their argument types (P) from the subclass's own `perform`."""

    def perform(self, *args: P.args, **kwargs: P.kwargs) -> object: ...


class _Aio:
    """`Resize.aio`: a Job class's enqueue methods as coroutines, typed from its `perform` (see `aio`)."""

    def __get__(self, instance: object, owner: type[_Performs[P]]) -> AsyncJobSetter[P]:
        from sidequest.client.async_client import AsyncJobSetter  # redis.asyncio is loaded only by code that uses it

        return AsyncJobSetter(cast("type[Job]", owner), {})


class Job:
    """Base class of every job. Subclass it with options as class keywords and define `perform`.

    While a job runs, `self.jid` and `self.payload` describe the payload being worked.
    Override `retry_in(count, exc)` to choose retry delays (return seconds, None for the
    default backoff, "kill" to send the job to the dead set now, "discard" to drop it) and
    `retries_exhausted(payload, exc)` to act when retries run out;
    `after_succeeded(*args, **kwargs)` and `after_failed(exc, *args, **kwargs)` run in the worker
    once the outcome of a run has been handed to Redis (after_failed on every failed attempt),
    with the job's arguments. An exception in a hook is logged, never a job failure.
    """

    name: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}  # checked (`options.check_options`), `custom` nested
    registry: ClassVar[Registry] = default_registry
    active_job: ClassVar[bool] = False  # pushed as Rails' ActiveJob wrapper, for a Rails worker (see `active_job`)
    # perform's parameters without self (the function's, for @job), computed once per class and
    # bound to every push's arguments; None when they cannot be read (pushes go unchecked).
    _signature: ClassVar[inspect.Signature | None] = None

    jid: str
    payload: dict[str, Any]

    def __init_subclass__(cls, *, name: str | None = None, abstract: bool = False,
                          registry: Registry | None = None, active_job: bool | None = None,
                          **options: Unpack[DefinitionOptions]) -> None:
        super().__init_subclass__()
        if registry is not None:
            cls.registry = registry
        if active_job is not None:
            cls.active_job = active_job is True
        try:
            merged = merge_options(cls.options, check_options(options, definition=True))
        except JobArgumentError as exc:
            raise JobDefinitionError(f"job {cls.__module__}.{cls.__qualname__}: {exc}") from None
        if merged.get("key") is not None and merged.get("debounce") is None and merged.get("throttle") is None:
            raise JobDefinitionError(f"job {cls.__module__}.{cls.__qualname__}: option 'key' says which pushes are the "
                                     "same for debounce or throttle; give debounce=... or throttle=... too")
        cls.options = merged
        if name is not None and (not isinstance(name, str) or not name):
            raise JobDefinitionError(f"job name must be a non-empty string, got {name!r}")
        if name is None and not abstract and cls.__module__ == "__main__":
            # A worker finds jobs by importing their module; no worker can import `__main__`
            # (the script that pushed), so the default name would never resolve.
            raise JobDefinitionError(
                f"job {cls.__qualname__} is defined in __main__ (a script run directly), so its "
                f"default name would be '__main__.{cls.__qualname__}', which no worker can find; "
                f'give it name="{cls.__name__}" (or define it in a module the worker imports '
                "with -r, and import it from there)")
        cls.name = name or f"{cls.__module__}.{cls.__qualname__}"
        cls._signature = perform_signature(cls)
        if not abstract:
            cls.registry.register(cls)

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        # (*args: Any, **kwargs: Any) is the gradual signature: a type checker accepts any
        # override of it, so each subclass types `perform` (and thereby its enqueue calls) itself.
        raise NotImplementedError(f"{type(self).__qualname__} must define perform()")

    def retry_in(self, count: int, exc: BaseException) -> RetryIn:
        """Seconds until retry `count` (0 for the first retry); None uses Sidekiq's backoff;
        "kill": to the dead set now (`retries_exhausted` runs); "discard": dropped."""
        return None

    def retries_exhausted(self, payload: dict[str, Any], exc: BaseException) -> None:
        """Called once when a job has failed its last allowed attempt."""

    def after_succeeded(self, *args: Any, **kwargs: Any) -> None:
        """Called after a run returned, with the job's arguments."""

    def after_failed(self, exc: BaseException, *args: Any, **kwargs: Any) -> None:
        """Called after each failed run (retried, dead or dropped), with the exception and the arguments."""

    # -- enqueueing (class-level) --------------------------------------------------------------
    @classmethod
    def set(cls: type[_Performs[P]], **options: Unpack[SetOptions]) -> JobSetter[P]:
        """Options for one call: `Resize.set(queue="urgent", retry=False).perform_async(...)`."""
        return _setter(cls, dict(options))

    @classmethod
    def perform_async(cls: type[_Performs[P]], *args: P.args, **kwargs: P.kwargs) -> str | None:
        return _setter(cls).perform_async(*args, **kwargs)

    @classmethod
    def perform_in(cls: type[_Performs[P]], delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return _setter(cls).perform_in(delay, *args, **kwargs)

    @classmethod
    def perform_at(cls: type[_Performs[P]], when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return _setter(cls).perform_at(when, *args, **kwargs)

    @classmethod
    def perform_bulk(cls, args_list: Iterable[Sequence[Any]], *, at: BulkAt = None,
                     spread: Delay | None = None) -> list[str | None]:
        return JobSetter[Any](cls, {}).perform_bulk(args_list, at=at, spread=spread)

    @classmethod
    def delay(cls: type[_Performs[P]], *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Celery's name for `perform_async` (a porting aid)."""
        return _setter(cls).perform_async(*args, **kwargs)

    @classmethod
    def apply_async(cls, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
                    **options: Unpack[ApplyAsyncOptions]) -> str | None:
        """Celery's `apply_async` mapped to a push (a porting aid; see `JobSetter.apply_async`)."""
        return JobSetter[Any](cls, {}).apply_async(args, kwargs, **options)

    aio = _Aio()  # `await Resize.aio.perform_async(...)`: the same methods for asyncio code

    # `s` is typed both ways: with every argument (a first step, which gets no result) or with all
    # but the first (a step after others: their results come first, as Celery passes them).
    @overload
    @classmethod
    def s(cls: type[_Performs[Concatenate[Any, Q]]], *args: Q.args, **kwargs: Q.kwargs) -> Signature: ...

    @overload
    @classmethod
    def s(cls: type[_Performs[P]], *args: P.args, **kwargs: P.kwargs) -> Signature: ...

    @classmethod
    def s(cls, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step whose dependencies' results come as its first argument (see `workflows`)."""
        return _signature(cls, args, kwargs, {}, immutable=False)

    @classmethod
    def si(cls: type[_Performs[P]], *args: P.args, **kwargs: P.kwargs) -> Signature:
        """A workflow step with exactly these arguments (see `workflows`)."""
        return _signature(cast("type[Job]", cls), args, kwargs, {}, immutable=True)

    @classmethod
    def payload_options(cls) -> dict[str, Any]:
        """The fields stored in every payload of this job: Sidekiq's defaults, then the job's options."""
        return {**DEFAULTS, **payload_fields(cls.options)}

    @classmethod
    def push_options(cls) -> dict[str, Any]:
        """The job's options of how it is pushed (`wait_replicas`, `wait_timeout`): not stored."""
        return {key: cls.options[key] for key in PUSH_ONLY if key in cls.options}

    @classmethod
    def check_arguments(cls, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> None:
        """Raise JobArgumentError unless `args` and `kwargs` fit the job's parameters (called at every push)."""
        bind(cls.name, cls._signature, args, kwargs)


def _signature(job_class: type[Job], args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any],
               immutable: bool) -> Signature:
    """A workflow step (its arguments are checked when the workflow starts, where a mutable
    step's place for its dependencies' results is known)."""
    from sidequest.features.workflows.signature import Signature  # loaded only by code that builds workflows

    return Signature(job_class, tuple(args), dict(options), immutable=immutable, kwargs=dict(kwargs))


def _setter(job_class: type[_Performs[P]], options: dict[str, Any] | None = None) -> JobSetter[P]:
    # Job's classmethods are the only callers, so `job_class` is a Job subclass.
    return JobSetter(cast("type[Job]", job_class), options or {})


class JobSetter(Generic[P]):
    """A job plus per-call options (and optionally a specific client), typed like the job."""

    def __init__(self, job_class: type[Job], options: dict[str, Any], client: Client | None = None) -> None:
        client = options.pop("client", client)
        self.job_class = job_class
        self.options = check_options(options)
        self.client = client

    def set(self, **options: Unpack[SetOptions]) -> JobSetter[P]:
        more: dict[str, Any] = dict(options)
        client = more.pop("client", self.client)
        return JobSetter(self.job_class, merge_options(self.options, check_options(more)), client)

    def _client(self) -> Client:
        return self.client if self.client is not None else default_client()

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self._client().push(self.job_class, list(args), kwargs, **self.options)

    def perform_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self._client().push(self.job_class, list(args), kwargs, in_=delay, **self.options)

    def perform_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self._client().push(self.job_class, list(args), kwargs, at=when, **self.options)

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], *, at: BulkAt = None,
                     spread: Delay | None = None) -> list[str | None]:
        return self._client().push_bulk(self.job_class, args_list, at=at, spread=spread, **self.options)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Celery's name for `perform_async` (a porting aid)."""
        return self.perform_async(*args, **kwargs)

    def apply_async(self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
                    **options: Unpack[ApplyAsyncOptions]) -> str | None:
        """Celery's `apply_async`, as a porting aid: `countdown` is `perform_in`'s delay, `eta`
        `perform_at`'s time, `expires` (seconds or a timedelta from now, or a datetime: Celery's
        deadline) the `expires_in` option counted from the job's own time, `queue`, `priority`
        (9 first) and `time_limit` (`timeout`) the options; Celery's others are refused with what
        to use instead (`client.porting`). Returns the jid (Celery returns an AsyncResult: see
        `sidequest.result`)."""
        client = self._client()
        push = porting.translate(args, kwargs, self.options, options, client.clock())
        return client.push(self.job_class, push.args, push.kwargs, at=push.at, **push.options)

    @overload
    def s(self: JobSetter[Concatenate[Any, Q]], *args: Q.args, **kwargs: Q.kwargs) -> Signature: ...

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature: ...

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step with these options, given its dependencies' results as its first argument."""
        return _signature(self.job_class, args, kwargs, self.options, immutable=False)

    def si(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """A workflow step with these options and exactly these arguments."""
        return _signature(self.job_class, args, kwargs, self.options, immutable=True)

    @property
    def aio(self) -> AsyncJobSetter[P]:
        """These options' enqueue methods as coroutines: `await job.set(queue="x").aio.perform_async(...)`."""
        from sidequest.client.async_client import AsyncJobSetter

        return AsyncJobSetter(self.job_class, dict(self.options), self.client)


@overload
def job(func: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(*, name: str | None = None,
        retry_in: Callable[[int, BaseException], RetryIn] | None = None,
        retries_exhausted: Callable[[dict[str, Any], BaseException], None] | None = None,
        after_succeeded: Callable[..., None] | None = None,
        after_failed: Callable[..., None] | None = None,
        registry: Registry | None = None, active_job: bool | None = None,
        **options: Unpack[DefinitionOptions]) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...


def job(func: Callable[P, R] | None = None, *, name: str | None = None,
        retry_in: Callable[[int, BaseException], RetryIn] | None = None,
        retries_exhausted: Callable[[dict[str, Any], BaseException], None] | None = None,
        after_succeeded: Callable[..., None] | None = None,
        after_failed: Callable[..., None] | None = None,
        registry: Registry | None = None, active_job: bool | None = None,
        **options: Unpack[DefinitionOptions]) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
    """Turn a function (sync or `async def`) into a job. Usable bare (`@job`) or with options."""

    def wrap(fn: Callable[P, R]) -> JobFunction[P, R]:
        if not callable(fn):
            raise JobDefinitionError(f"@job decorates a function, got {type(fn).__name__}")
        body: dict[str, Any] = {
            "__module__": fn.__module__,
            "__qualname__": fn.__qualname__,
            "__doc__": fn.__doc__,
            "function": staticmethod(fn),
        }
        call: Callable[..., Any] = fn  # P is the caller's concern; the worker passes a payload's args
        if inspect.iscoroutinefunction(fn):
            async def perform_async_fn(self: Job, *args: Any, **kwargs: Any) -> Any:
                return await call(*args, **kwargs)
            body["perform"] = perform_async_fn
        else:
            def perform(self: Job, *args: Any, **kwargs: Any) -> Any:
                return call(*args, **kwargs)
            body["perform"] = perform
        if retry_in is not None:
            body["retry_in"] = lambda self, count, exc: retry_in(count, exc)
        if retries_exhausted is not None:
            body["retries_exhausted"] = lambda self, payload, exc: retries_exhausted(payload, exc)
        if after_succeeded is not None:
            body["after_succeeded"] = lambda self, *args, **kwargs: after_succeeded(*args, **kwargs)
        if after_failed is not None:
            body["after_failed"] = lambda self, exc, *args, **kwargs: after_failed(exc, *args, **kwargs)
        kwargs: dict[str, Any] = dict(options, name=name)
        if registry is not None:
            kwargs["registry"] = registry
        if active_job is not None:
            kwargs["active_job"] = active_job
        job_class = cast("type[Job]", type(fn.__name__, (Job,), body, **kwargs))
        job_class._signature = function_signature(fn)  # the function's, not the wrapper's (*args)
        return JobFunction(fn, job_class)

    return wrap(func) if func is not None else wrap


class JobFunction(Generic[P, R]):
    """What `@job` returns: still callable as the function, plus the enqueue methods."""

    def __init__(self, fn: Callable[P, R], job_class: type[Job]) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.job_class = job_class
        self.name = job_class.name
        self.active_job = job_class.active_job

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<sidequest job {self.name}>"

    def set(self, **options: Unpack[SetOptions]) -> JobSetter[P]:
        return JobSetter(self.job_class, dict(options))

    def payload_options(self) -> dict[str, Any]:
        return self.job_class.payload_options()

    def push_options(self) -> dict[str, Any]:
        return self.job_class.push_options()

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> None:
        self.job_class.check_arguments(args, kwargs)

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.set().perform_async(*args, **kwargs)

    def perform_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.set().perform_in(delay, *args, **kwargs)

    def perform_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        return self.set().perform_at(when, *args, **kwargs)

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], *, at: BulkAt = None,
                     spread: Delay | None = None) -> list[str | None]:
        return self.set().perform_bulk(args_list, at=at, spread=spread)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Celery's name for `perform_async` (a porting aid)."""
        return self.set().perform_async(*args, **kwargs)

    def apply_async(self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
                    **options: Unpack[ApplyAsyncOptions]) -> str | None:
        """Celery's `apply_async` mapped to a push (a porting aid; see `JobSetter.apply_async`)."""
        return self.set().apply_async(args, kwargs, **options)

    @overload
    def s(self: JobFunction[Concatenate[Any, Q], R], *args: Q.args, **kwargs: Q.kwargs) -> Signature: ...

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature: ...

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step given its dependencies' results as its first argument (see `workflows`)."""
        return _signature(self.job_class, args, kwargs, {}, immutable=False)

    def si(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """A workflow step with exactly these arguments (see `workflows`)."""
        return self.set().si(*args, **kwargs)

    @property
    def aio(self) -> AsyncJobSetter[P]:
        """The enqueue methods as coroutines, for asyncio code: `await send_welcome.aio.perform_async(42)`."""
        return self.set().aio

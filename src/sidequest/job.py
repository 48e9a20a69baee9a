"""Defining jobs: the `@job` decorator on functions and the `Job` base class.

    @sidequest.job(queue="mail", retry=5)
    def send_welcome(user_id): ...

    class Resize(sidequest.Job, queue="images", backtrace=True):
        def perform(self, path, width): ...

    send_welcome.perform_async(42)                    # -> jid
    Resize.perform_in(60, "a.png", 200)               # in a minute
    Resize.set(queue="urgent").perform_async("b.png", 100)
    send_welcome.perform_bulk([[1], [2], [3]])        # -> [jid, jid, jid]

A decorated function becomes a `Job` subclass behind the scenes, so a worker runs both kinds
the same way. Every job is registered under its wire name (`module.qualname` unless `name=`
is given); only registered names are ever run by a worker.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from .client import default_client
from .errors import JobArgumentError, JobDefinitionError
from .options import DEFAULTS, check_options
from .registry import Registry, default_registry


class Job:
    """Base class of every job. Subclass it with options as class keywords and define `perform`.

    While a job runs, `self.jid` and `self.payload` describe the payload being worked.
    Override `retry_in(count, exc)` to choose retry delays (return seconds, or None for the
    default backoff) and `retries_exhausted(payload, exc)` to act when retries run out;
    `after_succeeded(*args)` and `after_failed(exc, *args)` run in the worker once the outcome
    of a run has been handed to Redis (after_failed on every failed attempt). An exception in a
    hook is logged, never a job failure.
    """

    name: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}
    registry: ClassVar[Registry] = default_registry

    jid: str
    payload: dict[str, Any]

    def __init_subclass__(cls, *, name: str | None = None, abstract: bool = False,
                          registry: Registry | None = None, **options: Any) -> None:
        super().__init_subclass__()
        if registry is not None:
            cls.registry = registry
        try:
            merged = {**cls.options, **check_options(options)}
        except JobArgumentError as exc:
            raise JobDefinitionError(f"job {cls.__module__}.{cls.__qualname__}: {exc}") from None
        cls.options = merged
        if name is not None and (not isinstance(name, str) or not name):
            raise JobDefinitionError(f"job name must be a non-empty string, got {name!r}")
        cls.name = name or f"{cls.__module__}.{cls.__qualname__}"
        if not abstract:
            cls.registry.register(cls)

    def perform(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__qualname__} must define perform()")

    def retry_in(self, count: int, exc: BaseException) -> float | None:
        """Seconds until retry `count` (0 for the first retry); None uses Sidekiq's backoff."""
        return None

    def retries_exhausted(self, payload: dict[str, Any], exc: BaseException) -> None:
        """Called once when a job has failed its last allowed attempt."""

    def after_succeeded(self, *args: Any) -> None:
        """Called after a run returned, with the job's arguments."""

    def after_failed(self, exc: BaseException, *args: Any) -> None:
        """Called after each failed run (retried, dead or dropped), with the exception and the arguments."""

    # -- enqueueing (class-level) --------------------------------------------------------------
    @classmethod
    def set(cls, **options: Any) -> JobSetter:
        """Options for one call: `Resize.set(queue="urgent", retry=False).perform_async(...)`."""
        return JobSetter(cls, options)

    @classmethod
    def perform_async(cls, *args: Any) -> str | None:
        return JobSetter(cls, {}).perform_async(*args)

    @classmethod
    def perform_in(cls, delay: Any, *args: Any) -> str | None:
        return JobSetter(cls, {}).perform_in(delay, *args)

    @classmethod
    def perform_at(cls, when: Any, *args: Any) -> str | None:
        return JobSetter(cls, {}).perform_at(when, *args)

    @classmethod
    def perform_bulk(cls, args_list: Iterable[Any], *, at: Any = None) -> list[str | None]:
        return JobSetter(cls, {}).perform_bulk(args_list, at=at)

    @classmethod
    def payload_options(cls) -> dict[str, Any]:
        """The options stored in every payload of this job: Sidekiq's defaults, then the job's."""
        return {**DEFAULTS, **cls.options}


class JobSetter:
    """A job plus per-call options (and optionally a specific client)."""

    def __init__(self, job_class: type[Job], options: dict[str, Any], client: Any = None) -> None:
        client = options.pop("client", client)
        self.job_class = job_class
        self.options = check_options(options)
        self.client = client

    def set(self, **options: Any) -> JobSetter:
        return JobSetter(self.job_class, {**self.options, **options}, self.client)

    def _client(self) -> Any:
        return self.client if self.client is not None else default_client()

    def perform_async(self, *args: Any) -> str | None:
        return self._client().push(self.job_class, list(args), **self.options)

    def perform_in(self, delay: Any, *args: Any) -> str | None:
        return self._client().push(self.job_class, list(args), in_=delay, **self.options)

    def perform_at(self, when: Any, *args: Any) -> str | None:
        return self._client().push(self.job_class, list(args), at=when, **self.options)

    def perform_bulk(self, args_list: Iterable[Any], *, at: Any = None) -> list[str | None]:
        return self._client().push_bulk(self.job_class, args_list, at=at, **self.options)


def job(func: Callable[..., Any] | None = None, *, name: str | None = None,
        retry_in: Callable[[int, BaseException], float | None] | None = None,
        retries_exhausted: Callable[[dict[str, Any], BaseException], None] | None = None,
        after_succeeded: Callable[..., None] | None = None,
        after_failed: Callable[..., None] | None = None,
        registry: Registry | None = None, **options: Any) -> Any:
    """Turn a function (sync or `async def`) into a job. Usable bare (`@job`) or with options."""

    def wrap(fn: Callable[..., Any]) -> JobFunction:
        if not callable(fn):
            raise JobDefinitionError(f"@job decorates a function, got {type(fn).__name__}")
        body: dict[str, Any] = {
            "__module__": fn.__module__,
            "__qualname__": fn.__qualname__,
            "__doc__": fn.__doc__,
            "function": staticmethod(fn),
        }
        if inspect.iscoroutinefunction(fn):
            async def perform_async_fn(self: Job, *args: Any) -> Any:
                return await fn(*args)
            body["perform"] = perform_async_fn
        else:
            def perform(self: Job, *args: Any) -> Any:
                return fn(*args)
            body["perform"] = perform
        if retry_in is not None:
            body["retry_in"] = lambda self, count, exc: retry_in(count, exc)
        if retries_exhausted is not None:
            body["retries_exhausted"] = lambda self, payload, exc: retries_exhausted(payload, exc)
        if after_succeeded is not None:
            body["after_succeeded"] = lambda self, *args: after_succeeded(*args)
        if after_failed is not None:
            body["after_failed"] = lambda self, exc, *args: after_failed(exc, *args)
        kwargs: dict[str, Any] = dict(options, name=name)
        if registry is not None:
            kwargs["registry"] = registry
        job_class = type(fn.__name__, (Job,), body, **kwargs)
        return JobFunction(fn, job_class)

    return wrap(func) if func is not None else wrap


class JobFunction:
    """What `@job` returns: still callable as the function, plus the enqueue methods."""

    def __init__(self, fn: Callable[..., Any], job_class: type[Job]) -> None:
        functools.update_wrapper(self, fn)
        self.job_class = job_class
        self.name = job_class.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"<sidequest job {self.name}>"

    def set(self, **options: Any) -> JobSetter:
        return self.job_class.set(**options)

    def payload_options(self) -> dict[str, Any]:
        return self.job_class.payload_options()

    def perform_async(self, *args: Any) -> str | None:
        return self.job_class.perform_async(*args)

    def perform_in(self, delay: Any, *args: Any) -> str | None:
        return self.job_class.perform_in(delay, *args)

    def perform_at(self, when: Any, *args: Any) -> str | None:
        return self.job_class.perform_at(when, *args)

    def perform_bulk(self, args_list: Iterable[Any], *, at: Any = None) -> list[str | None]:
        return self.job_class.perform_bulk(args_list, at=at)

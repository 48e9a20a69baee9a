"""Enqueue once the transaction commits: a job never runs before the rows it reads exist, and a
rolled-back transaction pushes nothing.

    from sidequest.contrib.django import after_commit, enqueue_on_commit

    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue_on_commit(send_receipt, order.pk)                  # the default database
        after_commit(send_receipt, using="orders").perform_in(60, order.pk)

Each call hands the push to `transaction.on_commit` of that database: outside a transaction
(autocommit) it pushes at once; inside, when the outermost `atomic` block commits. The
arguments are checked against the job's parameters now, so a wrong call fails where it is
written, not after the commit. The jid is not known until then: these return None.
"""

from __future__ import annotations

import functools
from typing import Any, Generic, ParamSpec, Protocol

from django.db import transaction

from sidequest.jobs.definition import Delay, When
from sidequest.jobs.payload import check_args, check_kwargs

P = ParamSpec("P")


class Enqueues(Protocol[P]):
    """What `after_commit` takes: a `@job` function, a job's `.set(...)`, or a Job class."""

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> str | None: ...
    def perform_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> str | None: ...
    def perform_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> str | None: ...


class AfterCommit(Generic[P]):
    """A job's enqueue methods, each deferred to the commit of database `using`."""

    def __init__(self, job: Enqueues[P], using: str | None = None, robust: bool = False) -> None:
        self.job = job
        self.using = using
        self.robust = robust

    def _defer(self, push: Any, *args: Any, **kwargs: Any) -> None:
        transaction.on_commit(functools.partial(push, *args, **kwargs), using=self.using, robust=self.robust)

    def perform_async(self, *args: P.args, **kwargs: P.kwargs) -> None:
        self._check(args, kwargs)
        self._defer(self.job.perform_async, *args, **kwargs)

    def perform_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> None:
        self._check(args, kwargs)
        self._defer(self.job.perform_in, delay, *args, **kwargs)

    def perform_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> None:
        self._check(args, kwargs)
        self._defer(self.job.perform_at, when, *args, **kwargs)

    def _check(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        checked = check_args(list(args))  # JSON-native, as the push will check
        keywords = check_kwargs(kwargs) if kwargs else None
        job_class = getattr(self.job, "job_class", self.job)  # a `.set(...)` checks through its class
        fits = getattr(job_class, "check_arguments", None)
        if callable(fits):
            fits(checked, keywords) if keywords else fits(checked)


def after_commit(job: Enqueues[P], *, using: str | None = None, robust: bool = False) -> AfterCommit[P]:
    """`job`'s enqueue methods, run when database `using`'s transaction commits (see the module
    docstring). `robust=True`: a failed push is logged instead of raised, as `on_commit`'s."""
    return AfterCommit(job, using, robust)


def enqueue_on_commit(job: Enqueues[P], *args: P.args, **kwargs: P.kwargs) -> None:
    """`job.perform_async(*args)` once the default database's transaction commits."""
    AfterCommit(job).perform_async(*args, **kwargs)

"""A step to run: a job with its arguments and options (`job.s(...)`, `job.si(...)`), and how a
failure of it is handled.

    sub.s(100)                 # mutable: the result(s) of its dependencies come first, sub(<result>, 100)
    upload.si("a.png", "s3")   # immutable: exactly these arguments
    notify.s("ops", urgent=True)              # keyword arguments travel as the payload's "kwargs"
    charge.s(7).on_failure("continue")        # its dependents run anyway (its result is None)
    charge.s(7).on_failure(refund.si(7))      # run a compensating job, then stop the workflow

The order is Celery's: a parent's result is a mutable step's first argument. `si` is typed with
the job's parameters; `s` with all of them (a first step, which gets no result) or all but the
first (`Concatenate`). Both are checked again at `perform_async`, against the job's signature
with the result's place filled, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Policy = Literal["stop", "continue"]
POLICIES = ("stop", "continue")


@dataclass(frozen=True)
class Signature:
    """A job (a Job class, a `@job` function or a wire name), its arguments and push options."""

    job: Any
    args: tuple[Any, ...]
    options: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False  # True: the dependencies' results are not passed on
    policy: Policy | Signature = "stop"  # on failure: stop, continue, or run this compensating job
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments: the payload's "kwargs"

    def on_failure(self, policy: Policy | Signature) -> Signature:
        """The same step with another failure policy: "stop" (the default), "continue", or a
        compensating job's signature (enqueued once when this step fails; then the workflow stops)."""
        if not isinstance(policy, Signature) and policy not in POLICIES:
            raise ValueError(f"on_failure takes 'stop', 'continue' or a job's signature, got {policy!r}")
        return replace(self, policy=policy)

    def set(self, **options: Any) -> Signature:
        """The same step with more push options (`queue=`, `retry=`, ...)."""
        return replace(self, options={**self.options, **options})

    @property
    def label(self) -> str:
        """The job's wire name, for the graph."""
        name = self.job if isinstance(self.job, str) else getattr(self.job, "name", None)
        return str(name or getattr(self.job, "__name__", repr(self.job)))

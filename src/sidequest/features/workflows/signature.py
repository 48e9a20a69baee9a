"""A step to run: a job with its arguments and options (`job.s(...)`, `job.si(...)`), and how a
failure of it is handled.

    sub.s(100)                 # mutable: the result(s) of its dependencies come first, sub(<result>, 100)
    upload.si("a.png", "s3")   # immutable: exactly these arguments
    notify.s("ops", urgent=True)              # keyword arguments travel as the payload's "kwargs"
    charge.s(7).on_failure("continue")        # its dependents run anyway (its result is None)
    charge.s(7).on_failure(refund.si(7))      # run a compensating job, then stop the workflow
    add.s(1, 1) | mul.s(3)                    # Celery's `|`: a chain (see `canvas`)
    add.s(1, 1).delay()                       # one job, pushed now: its jid (Celery's shortcut)
    add.s(1).apply_async((2,), priority=9)    # add(2, 1): Celery's partial arguments come first

The order is Celery's: a parent's result is a mutable step's first argument. `si` is typed with
the job's parameters; `s` with all of them (a first step, which gets no result) or all but the
first (`Concatenate`). Both are checked again at `perform_async`, against the job's signature
with the result's place filled, before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Unpack

from sidequest.client import porting
from sidequest.client.porting import ApplyAsyncOptions
from sidequest.client.sync_client import Client, default_client
from sidequest.errors import JobArgumentError

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

    # `step | other` is a Chain, which `canvas` builds on this module, so this module cannot import
    # it (no import circles): canvas sets its `pipe` here as it loads, and Python loads it (from the
    # workflows package's __init__) before any module of the package, so before any Signature exists.
    pipe: ClassVar[Callable[[object, object], Any]]

    def __or__(self, other: object) -> Any:
        """`add.s(1, 1) | mul.s(3)`: Celery's chain of this step and `other` (a step, a chain,
        a group: a group's results come as one list), the same as `chain(add.s(1, 1), mul.s(3))`."""
        return Signature.pipe(self, other)

    def delay(self, *args: Any, **kwargs: Any) -> str | None:
        """Push this step as one job now; return its jid (Celery's `sig.delay()`): `args` come
        before the step's own (Celery's partial arguments), `kwargs` over its own."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, *,
                    client: Client | None = None, **options: Unpack[ApplyAsyncOptions]) -> str | None:
        """Push this step as one job, with Celery's options (`countdown`, `eta`, `expires`,
        `queue`, `priority`, `time_limit`: see `client.porting`) over the step's own; `args`
        come before the step's arguments, `kwargs` over its keyword arguments. Returns the jid."""
        if self.immutable and args:
            raise JobArgumentError(f"step {self.label} was made with .si(...), so it takes no more arguments "
                                   "(Celery would drop them): give them in .si(...), or make it with .s(...)")
        if self.policy != "stop":
            raise JobArgumentError(f"{self.label}: on_failure(...) applies to a step of a workflow, not to one job "
                                   "pushed alone; start it as one: sidequest.chain(step).apply_async()")
        if isinstance(args, (str, bytes)) or not isinstance(args, (Sequence, type(None))):
            raise JobArgumentError(f"apply_async takes args as a list or tuple, got {type(args).__name__}")
        client = client if client is not None else default_client()
        push = porting.translate([*(args or ()), *self.args], {**self.kwargs, **(kwargs or {})}, self.options,
                                 options, client.clock())
        return client.push(self.job, push.args, push.kwargs or None, at=push.at, **push.options)

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

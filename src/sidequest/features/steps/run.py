"""A step inside a running job: its body runs once and its result is recorded; every later run of
the job (a retry, a recovery after `kill -9`, a put-back, a retry from `dead`) returns the recorded
result without calling it.

    @sidequest.job
    def checkout(order_id):
        charge = sidequest.step("charge", charge_card, order_id)    # runs once
        sidequest.step("receipt", send_receipt, order_id, charge["id"])
        sidequest.step("crm", update_crm, order_id)

    @sidequest.job
    async def checkout_async(order_id):
        charge = await sidequest.astep("charge", charge_card_async, order_id)

The rules, made once for both forms (`_Run`, `_encoded`), the two forms differing only in how the
two script calls are sent (a blocking client, or the loop's): a step begins with one call
(`STEP_BEGIN`: its recorded result, or the step marked running), and a body that returned ends with
one more (`STEP_END`). A body that raised is marked failed, not recorded. The first step of a run
marks the running job's payload (`records.MARK`, in memory only), so the call that ends the job
removes its records (`StepsFeature`); a job that never calls `step` costs nothing.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from redis.exceptions import NoScriptError

from sidequest.client import async_client
from sidequest.client.sync_client import default_client
from sidequest.errors import JobArgumentError, StepError
from sidequest.features.steps import observer
from sidequest.features.steps.lua import STEP_BEGIN, STEP_END
from sidequest.features.steps.records import MARK, digest_of, idempotency_key
from sidequest.jobs.payload import check_json_value
from sidequest.store import keys
from sidequest.store.outage import REDIS_ERRORS
from sidequest.worker.job_run import job_context
from sidequest.worker.outcome import error_class_name

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_RESULT = 256 * 1024  # bytes of JSON a step's result may take (records are read whole by the job's runs)
_SHA = {source: hashlib.sha1(source.encode()).hexdigest() for source in (STEP_BEGIN, STEP_END)}
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class CurrentStep:
    """The step whose body is running (`sidequest.current_step()`)."""

    name: str
    jid: str
    attempt: int  # 1 the first time its body runs; more after a crash or a failure inside it
    idempotency_key: str  # the same on every run of this job for this step: give it to the provider


_current: contextvars.ContextVar[CurrentStep | None] = contextvars.ContextVar("sidequest_step", default=None)


def current_step() -> CurrentStep | None:
    """The step whose body runs in this context (inside `sidequest.step`'s `fn`), else None."""
    return _current.get()


class _Run:
    """One run of one job, as its steps see it: the records' key, the names used so far."""

    __slots__ = ("context", "digest", "jid", "key", "klass", "names", "queue", "ttl_ms")

    def __init__(self, context: tuple[str, str, str, str | None, dict[str, Any]], space: keys.Keyspace) -> None:
        _, self.jid, queue, _, payload = context
        self.context = context
        self.klass = str(payload.get("class", ""))
        self.queue = str(payload.get("queue") or queue)
        self.digest = digest_of(payload)
        payload[MARK] = self.digest  # the call that ends the job removes its records (see `feature`)
        self.key = space.steps(self.jid, self.queue)
        self.names: set[str] = set()
        self.ttl_ms = keys.STEPS_TTL * 1000

    def claim(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise StepError(f"a step's name is a non-empty string, got {name!r}")
        if name in self.names:
            raise StepError(f"step {name!r} is used twice in one run of {self.klass} {self.jid}: give each "
                            "step its own name (add an index for steps in a loop: f'send-{i}')")
        self.names.add(name)

    def begin_args(self, name: str, now: float) -> list[Any]:
        return [name, self.digest, repr(now), self.ttl_ms, self.jid, self.klass, self.queue]

    def end_args(self, name: str, now: float, state: str, value: str, attempt: int) -> list[Any]:
        return [name, self.digest, repr(now), self.ttl_ms, state, value, attempt]

    def current(self, name: str, attempt: int) -> CurrentStep:
        return CurrentStep(name, self.jid, attempt, idempotency_key(self.jid, self.digest, name))


_run: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("sidequest_steps_run", default=None)


def _this_run(name: str, space: keys.Keyspace) -> _Run:
    context = job_context.get()
    if context is None:
        raise StepError("sidequest.step() records a step of the running job: call it inside a job")
    if _current.get() is not None:
        raise StepError(f"step {name!r} is called inside step {_current.get().name!r}: steps do not nest")  # type: ignore[union-attr]
    run = _run.get()
    if run is None or run.context is not context:  # the first step of this run (a new one each run)
        run = _Run(context, space)
        _run.set(run)
    run.claim(name)
    return run


def _encoded(name: str, value: Any) -> str:
    """The result as JSON, or a one-line StepError: not native JSON, or over MAX_RESULT."""
    try:
        check_json_value(value, f"the result of step {name!r}")
        blob = _ENCODER.encode(value)
    except (JobArgumentError, ValueError, TypeError) as exc:
        raise StepError(f"{exc}; return JSON (dicts, lists, str, numbers, bools, None)") from None
    if len(blob) > MAX_RESULT:  # characters: at most as many as bytes, so check bytes only near the limit
        size = len(blob.encode("utf-8"))
        if size > MAX_RESULT:
            raise StepError(f"the result of step {name!r} is {size:,} bytes of JSON, over the limit of "
                            f"{MAX_RESULT:,}: return an id or a summary, and keep the data elsewhere")
    return blob


def _replayed(run: _Run, name: str, reply: list[Any]) -> tuple[bool, int, Any]:
    """(done already, attempt, its recorded value) from STEP_BEGIN's reply."""
    state, attempt = _text(reply[0]), int(reply[1])
    if state != "done":
        return False, attempt, None
    observer.replayed(run.klass)
    return True, attempt, json.loads(_text(reply[2]))


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _failure(exc: BaseException) -> str:
    return f"{error_class_name(exc)}: {exc}"[:500]


class _Attempt:
    """One attempt at a step's body, after STEP_BEGIN said to run it: the context it runs in
    (`current_step`), and each end's STEP_END arguments (the rules both forms share)."""

    def __init__(self, run: _Run, name: str, attempt: int, clock: Callable[[], float]) -> None:
        self.run, self.name, self.attempt, self.clock = run, name, attempt, clock
        self.token = _current.set(run.current(name, attempt))
        self.began = clock()

    def failed(self, exc: BaseException) -> list[Any]:
        """A body that raised (or whose result was refused): marked failed, not recorded."""
        return self._end("failed", _failure(exc))

    def succeeded(self, blob: str) -> list[Any]:
        return self._end("done", blob)

    def _end(self, state: str, value: str) -> list[Any]:
        _current.reset(self.token)
        observer.ran(self.run.klass, self.clock() - self.began, failed=state == "failed")
        return self.run.end_args(self.name, self.clock(), state, value, self.attempt)


def _failed_mark_lost(exc: BaseException) -> None:
    """A failed step's mark is best effort, so the step's own exception is the one the job sees."""
    log.warning("could not mark a failed step (%s); it is not recorded either way", exc)


# -- the blocking form -----------------------------------------------------------------------------
def step(name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn(*args, **kwargs)` as the step `name` of the running job, once: its JSON result is
    recorded, and any later run of the same job returns it without calling `fn`. A step that
    raises is not recorded (the next run calls `fn` again). See docs/durable-steps.md."""
    client = default_client()
    run = _this_run(name, client.keys)
    done, attempt, value = _replayed(run, name, _call(client.redis, STEP_BEGIN, run.key,
                                                      run.begin_args(name, client.clock())))
    if done:
        return cast(T, value)
    this = _Attempt(run, name, attempt, client.clock)
    try:
        returned = fn(*args, **kwargs)
        if inspect.isawaitable(returned):
            raise StepError(f"step {name!r} returned an awaitable: in an async def job, "
                            "use `await sidequest.astep(...)`")
        blob = _encoded(name, returned)
    except BaseException as exc:
        try:
            _call(client.redis, STEP_END, run.key, this.failed(exc))
        except REDIS_ERRORS as write_error:
            _failed_mark_lost(write_error)
        raise
    _call(client.redis, STEP_END, run.key, this.succeeded(blob))
    return cast(T, json.loads(blob))


def _call(r: Any, source: str, key: str, args: list[Any]) -> Any:
    try:
        return r.evalsha(_SHA[source], 1, key, *args)
    except NoScriptError:
        return r.eval(source, 1, key, *args)


# -- the awaitable form ----------------------------------------------------------------------------
async def astep(name: str, fn: Callable[..., Awaitable[T] | T], *args: Any, **kwargs: Any) -> T:
    """`step` in an `async def` job, on the job's event loop: `fn` may be a coroutine function
    (awaited) or a plain one (called)."""
    aclient = async_client.default_client()
    client = aclient.sync
    run = _this_run(name, client.keys)
    r = await aclient.connection()
    done, attempt, value = _replayed(run, name, await _acall(r, STEP_BEGIN, run.key,
                                                             run.begin_args(name, client.clock())))
    if done:
        return cast(T, value)
    this = _Attempt(run, name, attempt, client.clock)
    try:
        returned = fn(*args, **kwargs)
        if inspect.isawaitable(returned):
            returned = await returned
        blob = _encoded(name, returned)
    except BaseException as exc:
        try:
            await _acall(r, STEP_END, run.key, this.failed(exc))
        except REDIS_ERRORS as write_error:
            _failed_mark_lost(write_error)
        raise
    await _acall(r, STEP_END, run.key, this.succeeded(blob))
    return cast(T, json.loads(blob))


async def _acall(r: Any, source: str, key: str, args: list[Any]) -> Any:
    try:
        return await r.evalsha(_SHA[source], 1, key, *args)
    except NoScriptError:
        return await r.eval(source, 1, key, *args)

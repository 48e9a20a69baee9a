"""Durable waits inside a running job: the run ends, the job is parked, and a later run resumes
past the job's recorded steps. No thread waits and no retry is spent.

    @sidequest.job
    def onboarding(user_id):
        sidequest.step("welcome", send_welcome, user_id)
        sidequest.sleep(timedelta(days=1))                          # the job leaves the worker for a day
        answer = sidequest.wait_for("approved", timeout=3600)       # parked until send_event, or an hour
        sidequest.step("activate", activate, user_id, answer["by"])

    sidequest.send_event(jid, "approved", {"by": "ada"})            # from anywhere (see `events`)

Each wait is a record among the job's steps (`lua.WAIT_BEGIN`, kind `sleep` or `wait`, state
`waiting` with its `until`): the first call records it and raises `Suspended`, which the worker
turns into the job parked in `schedule` until `until` (`Retrier.suspend`); the run that resumes
finds the record passed (the time came, or the event was sent: its payload is returned) and goes
on. A wait for an event that times out is recorded too: that run, and every later one, raises
`WaitTimeout` at the call. The two forms differ only in how the one script call is sent (a
blocking client, or the loop's); the rules are `_plan` and `_answer`.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import timedelta
from typing import Any

from redis.exceptions import NoScriptError

from sidequest.client import async_client
from sidequest.client.sync_client import default_client
from sidequest.errors import StepError, Suspended, WaitTimeout
from sidequest.features.steps.lua import WAIT_BEGIN
from sidequest.features.steps.run import _run, _text, _this_run
from sidequest.store import keys
from sidequest.worker.job_run import job_context

MAX_WAIT = keys.STEPS_TTL - 24 * 3600  # seconds: a wait ends a day before its records could expire
_SHA = hashlib.sha1(WAIT_BEGIN.encode()).hexdigest()


def _seconds(value: float | timedelta | None, what: str) -> float:
    seconds = MAX_WAIT if value is None else value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or not 0 <= seconds <= MAX_WAIT:
        raise StepError(f"{what} takes seconds from 0 to {MAX_WAIT:,} (179 days) or a timedelta, got {value!r}")
    return float(seconds)


def _sleep_name() -> str:
    """`sleep-<n>`: the n-th sleep of this run (the code between steps runs the same way each run)."""
    run, context = _run.get(), job_context.get()
    done = 0 if run is None or run.context is not context else sum(n.startswith("sleep-") for n in run.names)
    return f"sleep-{done + 1}"


def _plan(kind: str, name: str, seconds: float, event: str | None, space: keys.Keyspace,
          now: float) -> tuple[str, list[Any]]:
    """The records' key and WAIT_BEGIN's arguments for this wait of the running job."""
    run = _this_run(name, space)
    return run.key, [name, run.digest, repr(now), run.ttl_ms, run.jid, run.klass, run.queue, kind,
                     repr(now + seconds), event or ""]


def _answer(reply: list[Any], kind: str, name: str, event: str | None, timeout: float) -> Any:
    """What the wait gives the job: the sleep passed (None), the event's payload, or the raise."""
    state, value = _text(reply[0]), _text(reply[1])
    if state == "done":
        return json.loads(value)
    if state == "timed_out":
        raise WaitTimeout(f"no event {event!r} came within the wait's timeout ({timeout:g} s, at {float(value):.3f}); "
                          f"reset the wait with `sidequest steps JID --reset {name}` to wait again")
    raise Suspended(float(value), name, kind, event)


def _check_event(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise StepError(f"an event's name is a non-empty string, got {name!r}")
    return name


# -- the blocking forms ----------------------------------------------------------------------------
def sleep(seconds: float | timedelta, *, name: str | None = None) -> None:
    """End this run of the job and resume it `seconds` from now, past its recorded steps, holding
    no thread and spending no retry. A recorded step itself (`name`, default `sleep-<n>` for the
    n-th sleep of the run): the resumed run passes it. Call it inside a job, outside any step."""
    wait = _seconds(seconds, "sidequest.sleep")
    client = default_client()
    key, args = _plan("sleep", name or _sleep_name(), wait, None, client.keys, client.clock())
    _answer(_eval(client.redis, key, args), "sleep", args[0], None, wait)


def wait_for(event: str, timeout: float | timedelta | None = None) -> Any:
    """Wait for `sidequest.send_event(jid, event, payload)` and return its payload: this run ends
    and the job is parked until the event comes (it resumes within a second) or `timeout` passes
    (None: 179 days), when `WaitTimeout` is raised here. An event sent before the wait is kept for
    it. The wait is recorded under the event's name, so each event is waited for once per job."""
    name = _check_event(event)
    limit = _seconds(timeout, "sidequest.wait_for's timeout")
    client = default_client()
    key, args = _plan("wait", name, limit, name, client.keys, client.clock())
    return _answer(_eval(client.redis, key, args), "wait", name, name, limit)


def _eval(r: Any, key: str, args: list[Any]) -> Any:
    try:
        return r.evalsha(_SHA, 1, key, *args)
    except NoScriptError:
        return r.eval(WAIT_BEGIN, 1, key, *args)


# -- the awaitable forms ---------------------------------------------------------------------------
async def asleep(seconds: float | timedelta, *, name: str | None = None) -> None:
    """`sleep` in an `async def` job, on the job's event loop."""
    wait = _seconds(seconds, "sidequest.asleep")
    aclient = async_client.default_client()
    key, args = _plan("sleep", name or _sleep_name(), wait, None, aclient.sync.keys, aclient.sync.clock())
    _answer(await _aeval(await aclient.connection(), key, args), "sleep", args[0], None, wait)


async def await_for(event: str, timeout: float | timedelta | None = None) -> Any:
    """`wait_for` in an `async def` job, on the job's event loop."""
    name = _check_event(event)
    limit = _seconds(timeout, "sidequest.await_for's timeout")
    aclient = async_client.default_client()
    key, args = _plan("wait", name, limit, name, aclient.sync.keys, aclient.sync.clock())
    return _answer(await _aeval(await aclient.connection(), key, args), "wait", name, name, limit)


async def _aeval(r: Any, key: str, args: list[Any]) -> Any:
    try:
        return await r.evalsha(_SHA, 1, key, *args)
    except NoScriptError:
        return await r.eval(WAIT_BEGIN, 1, key, *args)

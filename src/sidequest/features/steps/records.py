"""Where a job's step records live and how they read: the key and digest of a payload, the
records decoded (`JobSteps`, `StepRecord`), found by jid alone, and an operator's reset.

    read_steps(client, jid)             # JobSteps or None (no step recorded, or ended)
    reset_steps(client, jid, "charge")  # forget one step (or every step): the next run runs it again
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, cast

import redis

from sidequest.store import keys

MARK = "sidequest_steps"  # set in a running job's payload (in memory) by its first step: its digest
RESULT_PREVIEW = 200  # characters of a result shown by `sidequest steps` and the job page


def digest_of(payload: dict[str, Any]) -> str:
    """Of the job's class and arguments: another push of the jid with other arguments differs."""
    text = json.dumps([payload.get("class"), payload.get("args")], sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def idempotency_key(jid: str, digest: str, name: str) -> str:
    """The same on every run of this job (jid and arguments) for the step `name`; another job's,
    or another step's, differs. Short and plain ASCII, as payment and e-mail APIs take them."""
    return f"sq-{jid}-{hashlib.sha256(f'{digest}:{name}'.encode()).hexdigest()[:24]}"


@dataclass(frozen=True)
class StepRecord:
    """One step as recorded."""

    name: str
    state: str  # running (begun, not ended: running now, or its run died), done, failed (raised)
    attempts: int  # how many times its body was begun
    seq: int  # its order among the job's steps
    started_at: float | None
    ended_at: float | None
    result: Any  # the recorded value (done), else None
    result_json: str | None  # as stored
    error: str | None  # a failed attempt's error, in a few words
    kind: str = "step"  # step, or a durable wait: sleep, wait (for an event)
    until: float | None = None  # a wait's time: when a sleep ends, when a wait for an event times out
    event: str | None = None  # the event a wait waits for

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(self.ended_at - self.started_at, 0.0)

    def preview(self, limit: int = RESULT_PREVIEW) -> str:
        """The result's JSON, cut to `limit` characters (the text is escaped where it is shown)."""
        text = self.result_json or ""
        return text if len(text) <= limit else text[:limit] + "…"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "attempts": self.attempts, "seq": self.seq,
                "started_at": self.started_at, "ended_at": self.ended_at, "duration": self.duration,
                "result": self.result, "error": self.error, "kind": self.kind, "until": self.until,
                "event": self.event}


@dataclass(frozen=True)
class JobSteps:
    """A job's records: which job (class, queue, when the first step began) and its steps in order."""

    jid: str
    klass: str
    queue: str
    created_at: float | None
    digest: str
    steps: list[StepRecord]

    @property
    def waiting(self) -> StepRecord | None:
        """The sleep or wait the job is parked on (state `waiting`), or None."""
        return next((s for s in self.steps if s.state == "waiting"), None)

    def as_dict(self) -> dict[str, Any]:
        """`completed` as Rails 8.1's continuation names its done steps (`"continuation"` => `"completed"`)."""
        return {"jid": self.jid, "class": self.klass, "queue": self.queue, "created_at": self.created_at,
                "completed": [s.name for s in self.steps if s.state == "done"],
                "waiting": self.waiting.name if self.waiting is not None else None,
                "steps": [s.as_dict() for s in self.steps]}


def decode(jid: str, raw: dict[bytes, bytes]) -> JobSteps | None:
    if not raw:
        return None
    text = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in raw.items()}
    steps = []
    for field, value in text.items():
        if field.startswith("s:"):
            steps.append(_step(field[2:], value, text.get("r:" + field[2:])))
    steps.sort(key=lambda s: s.seq)
    created = text.get("created_at")
    return JobSteps(jid, text.get("class", ""), text.get("queue", ""), float(created) if created else None,
                    text.get("digest", ""), steps)


def _step(name: str, meta: str, result: str | None) -> StepRecord:
    try:
        m = json.loads(meta)
    except ValueError:
        m = {}
    m = m if isinstance(m, dict) else {}
    value = None
    if result is not None:
        try:
            value = json.loads(result)
        except ValueError:
            value = None
    return StepRecord(name, str(m.get("state", "unknown")), int(m.get("attempts") or 0), int(m.get("seq") or 0),
                      _float(m.get("started_at")), _float(m.get("ended_at")), value, result,
                      m.get("error") if isinstance(m.get("error"), str) else None,
                      str(m.get("kind") or "step"), _float(m.get("until")),
                      m.get("event") if isinstance(m.get("event"), str) else None)


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def find_key(client: redis.Redis, jid: str) -> str | None:
    """The key of `jid`'s records, or None. On one Redis its name; in Cluster mode it sits in its
    queue's slot, so each queue named in `queues` is looked at (one EXISTS each)."""
    space = keys.space(client)
    if not space.cluster:
        key = space.steps(jid, "")
        return key if client.exists(key) else None
    for name in sorted(q.decode() for q in cast("set[bytes]", client.smembers(keys.QUEUES))):
        key = space.steps(jid, name)
        if client.exists(key):
            return key
    return None


def read_steps(client: redis.Redis, jid: str) -> JobSteps | None:
    """The recorded steps of job `jid`, or None when it has none (it used no step, or it ended)."""
    key = find_key(client, jid)
    return None if key is None else decode(jid, cast("dict[bytes, bytes]", client.hgetall(key)))


def reset_steps(client: redis.Redis, jid: str, name: str | None = None) -> int:
    """Forget step `name` of job `jid` (every step without a name): its next run runs the step's
    body again. The number of steps forgotten (0: no such job or step)."""
    from sidequest.features.steps.lua import STEP_RESET

    key = find_key(client, jid)
    if key is None:
        return 0
    return int(client.eval(STEP_RESET, 1, key, name or ""))

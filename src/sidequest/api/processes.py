"""Worker processes and what they run (Sidekiq's `ProcessSet`, `Process` and `WorkSet`).

Every worker process, sidequest's or Ruby Sidekiq's, beats into `<identity>` (info JSON, busy,
beat, quiet, rss) and lists its running jobs in `<identity>:work` (Sidekiq 7+; Sidekiq 6 writes
`<identity>:workers`, read when the other is missing). Quiet and stop go through the process's
signal list, as Sidekiq's API sends them: the process pops one signal per heartbeat, so it acts
within a heartbeat interval (sidequest never sends an OS signal on a remote one).

In Cluster mode these keys keep their names, each in its own slot: the reads are pipelines that
redis-py sends per slot, and the one MULTI left (a signal: LPUSH and EXPIRE of one key) is in one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from sidequest.api.actions import Actions
from sidequest.api.records import JobRecord, epoch_of
from sidequest.client.sync_client import Client, default_client
from sidequest.store import keys

FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us", "concurrency")
SIGNAL_TTL = 60  # seconds an unread signal waits (Sidekiq's)


class CapsuleDict(TypedDict):
    """One capsule of a process (a group of its threads with queues of their own), as Sidekiq 7
    writes it in the process's info."""

    concurrency: int
    """Its threads."""
    mode: str
    """How it orders its queues: strict, random (every weight 1) or weighted."""
    weights: dict[str, int]
    """Its queues, each with its weight (0: strict order)."""


class ProcessDict(TypedDict):
    """A worker process as plain JSON (`Process.as_dict()`)."""

    identity: str
    """`hostname:pid:nonce`, unique per process start."""
    hostname: str
    """The host it runs on."""
    pid: int | None
    """Its operating-system process id."""
    tag: str | None
    """Its `tag` setting, if any."""
    labels: list[str]
    """Its labels."""
    queues: list[str]
    """The queues it works, in its order."""
    concurrency: int
    """Its threads."""
    busy: int
    """Threads running a job at its last beat."""
    beat: float | None
    """Its last heartbeat, epoch seconds."""
    started_at: float | None
    """When it started, epoch seconds."""
    rss: int
    """Resident memory in KB at its last beat (0 where unknown)."""
    stopping: bool
    """True once it is quiet or stopping: it takes no new jobs."""
    version: str | None
    """The sidequest (or Sidekiq) version it runs."""
    capsules: dict[str, CapsuleDict]
    """Its capsules by name ("default" first); a Sidekiq 6 process shows one, made of its queues."""


class Process:
    """One registered worker process.

    ```python
    for process in ProcessSet():
        process.identity, process.busy, process.beat, process.stopping
        process.quiet()     # finish running jobs, take no new ones
        process.stop()      # shut down within its timeout
    ```
    """

    def __init__(self, identity: str, fields: dict[str, Any], client: Client) -> None:
        self.client = client
        self.identity = identity
        self.info: dict[str, Any] = fields.get("info") or {}  # the process's own description
        self.busy = _int(fields.get("busy"))
        self.beat = epoch_of(fields.get("beat"))
        self.stopping = _text(fields.get("quiet")) == "true"
        self.rss = _int(fields.get("rss"))
        self.rtt_us = _int(fields.get("rtt_us"))
        self.concurrency = _int(fields.get("concurrency")) or _int(self.info.get("concurrency"))
        self.started_at = epoch_of(self.info.get("started_at"))
        self.hostname = str(self.info.get("hostname", identity.split(":", 1)[0]))
        pid = self.info.get("pid")
        self.pid = pid if isinstance(pid, int) else None
        self.tag = self.info.get("tag") if isinstance(self.info.get("tag"), str) else None
        self.labels = [str(x) for x in self.info.get("labels") or []]
        self.queues = [str(x) for x in self.info.get("queues") or []]
        self.version = str(self.info["version"]) if "version" in self.info else None
        self.embedded = self.info.get("embedded") is True
        self.capsules = _capsules(self.info, self.queues, self.concurrency)

    def __repr__(self) -> str:
        return f"<Process {self.identity} busy={self.busy}/{self.concurrency}>"

    def __getitem__(self, name: str) -> Any:
        """A field of its info (Sidekiq's `process["tag"]`)."""
        return self.info[name]

    def quiet(self) -> None:
        """Ask it to take no new jobs and finish the running ones (Sidekiq's `quiet!`: TSTP)."""
        self._signal("TSTP")

    def stop(self) -> None:
        """Ask it to shut down within its timeout (Sidekiq's `stop!`: TERM)."""
        self._signal("TERM")

    def dump_threads(self) -> None:
        """Ask it to log every thread's stack (TTIN)."""
        self._signal("TTIN")

    def _signal(self, name: str) -> None:
        if self.embedded:
            raise RuntimeError(f"process {self.identity} is embedded in an application; control it there")
        # one MULTI; redis-py before 6 has none on a Cluster: there the two calls go in one round
        # trip (one key: a lost EXPIRE leaves a list its process empties at its next beat)
        pipe = self.client.redis.pipeline(transaction=not self.client.keys.cluster)
        pipe.lpush(keys.signals(self.identity), name)
        pipe.expire(keys.signals(self.identity), SIGNAL_TTL)
        pipe.execute()

    def as_dict(self) -> ProcessDict:
        return {
            "identity": self.identity, "hostname": self.hostname, "pid": self.pid, "tag": self.tag,
            "labels": self.labels, "queues": self.queues, "concurrency": self.concurrency, "busy": self.busy,
            "beat": self.beat, "started_at": self.started_at, "rss": self.rss, "stopping": self.stopping,
            "version": self.version, "capsules": self.capsules,
        }

    @property
    def weights(self) -> list[dict[str, int]]:
        """Each capsule's queue weights (Sidekiq's `Process#weights`)."""
        return [capsule["weights"] for capsule in self.capsules.values()]


class ProcessSet:
    """Every live worker process, sorted by identity (Sidekiq's `ProcessSet`).

    Built with `clean=True` (the default), it first drops identities whose heartbeat expired.
    """

    def __init__(self, client: Client | None = None, clean: bool = True) -> None:
        self.client = client or default_client()
        if clean:
            self.cleanup()

    def cleanup(self) -> int:
        """Drop identities whose heartbeat hash expired from `processes`; how many were dropped."""
        redis = self.client.redis
        members = list(cast("set[bytes]", redis.smembers(keys.PROCESSES)))
        if not members:
            return 0
        pipe = redis.pipeline(transaction=False)
        for member in members:
            pipe.exists(keys.process(member.decode("utf-8", "replace")))
        gone = [m for m, alive in zip(members, pipe.execute(), strict=True) if not alive]
        return redis.srem(keys.PROCESSES, *gone) if gone else 0

    def __iter__(self) -> Iterator[Process]:
        redis = self.client.redis
        identities = sorted(m.decode("utf-8", "replace") for m in cast("set[bytes]", redis.smembers(keys.PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hmget(keys.process(identity), list(FIELDS))
        for identity, values in zip(identities, pipe.execute(), strict=True):
            process = _process(identity, values, self.client)
            if process is not None:  # it stopped between the two reads
                yield process

    def get(self, identity: str) -> Process | None:
        """The process of this identity, or None (Sidekiq's `ProcessSet[identity]`)."""
        # one MULTI; in Cluster mode the two keys are in two slots, so two reads in one round trip
        pipe = self.client.redis.pipeline(transaction=not self.client.keys.cluster)
        pipe.sismember(keys.PROCESSES, identity)
        pipe.hmget(keys.process(identity), list(FIELDS))
        member, values = pipe.execute()
        return _process(identity, values, self.client) if member else None

    @property
    def size(self) -> int:
        return self.client.redis.scard(keys.PROCESSES)

    @property
    def total_concurrency(self) -> int:
        return sum(p.concurrency for p in self)

    @property
    def total_rss_in_kb(self) -> int:
        return sum(p.rss for p in self)


@dataclass(frozen=True)
class Work:
    """One job running right now (Sidekiq's `Work`)."""

    process_id: str  # the identity of the process running it
    thread_id: str  # the thread within it
    queue: str  # the queue it came from
    run_at: float  # when it started, epoch seconds
    payload: str  # the job as JSON text
    actions: Actions = field(repr=False, compare=False)

    @property
    def job(self) -> JobRecord:
        """The job as a record (its `jid`, `klass`, `args`, `item`...)."""
        return JobRecord(self.payload.encode("utf-8"), self.queue, self.actions)


class Workers:
    """Every job running right now, oldest first (Sidekiq's `WorkSet`, formerly `Workers`).

    ```python
    for work in Workers():
        work.process_id, work.thread_id, work.queue, work.run_at, work.job.klass, work.job.args
    ```
    """

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or default_client()
        self.actions = Actions(self.client)

    def __iter__(self) -> Iterator[Work]:
        redis = self.client.redis
        identities = sorted(m.decode("utf-8", "replace") for m in cast("set[bytes]", redis.smembers(keys.PROCESSES)))
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hgetall(keys.work(identity))
            pipe.hgetall(keys.workers(identity))  # Sidekiq 6's name
        found = pipe.execute()
        works: list[Work] = []
        for index, identity in enumerate(identities):
            entries = found[2 * index] or found[2 * index + 1]
            for tid, raw in entries.items():
                work = self._work(identity, tid.decode("utf-8", "replace"), raw)
                if work is not None:
                    works.append(work)
        return iter(sorted(works, key=lambda w: w.run_at))

    def _work(self, identity: str, tid: str, raw: bytes) -> Work | None:
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        payload = data.get("payload")
        # Sidekiq 7+ stores the job as a JSON string, Sidekiq 6 as an object
        text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        return Work(identity, tid, str(data.get("queue", "")), epoch_of(data.get("run_at")) or 0.0, text,
                    self.actions)

    @property
    def size(self) -> int:
        """Busy threads over every process, as of their last beats."""
        redis = self.client.redis
        identities = [m.decode("utf-8", "replace") for m in cast("set[bytes]", redis.smembers(keys.PROCESSES))]
        pipe = redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(keys.process(identity), "busy")
        return sum(_int(busy) for busy in pipe.execute())

    def find_work(self, jid: str) -> Work | None:
        """The running job of this jid, or None."""
        return next((w for w in self if w.job.jid == jid), None)


WorkSet = Workers


def _process(identity: str, values: list[Any], client: Client) -> Process | None:
    fields = dict(zip(FIELDS, values, strict=True))
    if fields["info"] is None:
        return None
    try:
        info = json.loads(fields["info"])
    except ValueError:
        info = {}
    fields["info"] = info if isinstance(info, dict) else {}
    return Process(identity, fields, client)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _int(value: Any) -> int:
    try:
        return int(float(_text(value) or 0))
    except ValueError:
        return 0


def _capsules(info: dict[str, Any], queues: list[str], concurrency: int) -> dict[str, CapsuleDict]:
    """The `capsules` of a process's info, or, from a process that writes none (Sidekiq 6), one
    default capsule of its queues."""
    given = info.get("capsules")
    if not isinstance(given, dict) or not given:
        return {"default": {"concurrency": concurrency, "mode": "strict", "weights": dict.fromkeys(queues, 0)}}
    capsules: dict[str, CapsuleDict] = {}
    for name, capsule in given.items():
        capsule = capsule if isinstance(capsule, dict) else {}
        weights = capsule.get("weights")
        weights = weights if isinstance(weights, dict) else {}
        capsules[str(name)] = {"concurrency": _int(capsule.get("concurrency")), "mode": str(capsule.get("mode", "")),
                               "weights": {str(q): _int(w) for q, w in weights.items()}}
    return capsules

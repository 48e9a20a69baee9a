"""Every Redis key name sidequest reads or writes, and nothing else, with how long each lives.

Sidekiq's own layout (shared with Ruby Sidekiq, unprefixed):

    queues                      set of queue names
    queue:<name>                list; producers LPUSH, consumers take from the right
    schedule, retry, dead       sorted sets, score = epoch seconds, member = payload JSON
    processes                   set of process identities
    <identity>                  hash: info (JSON), busy, beat, quiet, rss
    <identity>:work             hash of running jobs (Sidekiq 7 name)
    <identity>:workers          the same hash under Sidekiq 6's name
    <identity>-signals          list of remote signals (TSTP, TERM, ...)
    stat:processed, stat:failed and stat:<name>:YYYY-MM-DD

sidequest's own keys live under the `sidequest:` prefix so Ruby Sidekiq never trips on them:

    sidequest:reserved:<identity>:batch   list of payloads a process took in batches, not yet settled
    sidequest:reserved:<identity>:<slot>  list of payloads processor <slot> took alone while idle
    sidequest:reserved:<identity>:batch-<capsule>  the batch list of a capsule (see `capsule_batch`)
    sidequest:reservations          set of every reserved list's key (recovery reads it, no SCAN)
    sidequest:recovered:<identity>  set of the payloads recovery took from a dead process's lists (for
                                    RECOVERED_TTL): that process, if only paused, tells them from its own
    sidequest:recovery-lock         short lock while orphaned work is put back (value: the owner)
    sidequest:task:<id>[:...]       a task (batch) and its per-job events; see below
    sidequest:tasks                 zset of task ids by creation time: the recent tasks, newest
                                    kept (bounded in count and age when a task is created)
    sidequest:paused                set of paused queue names (no worker fetches from them)
    sidequest:metrics:<YYYYMMDDHHMM>  hash of per-job counts and run times for one UTC minute
    sidequest:metrics:<YYYYMMDDHHMM>:latency  zset of queue -> the longest wait (s) of a job that
                                    started in that minute (`job_metrics`)
    sidequest:periodic              set of periodic entry ids that a periodic scheduler has described
    sidequest:periodic:<entry id>   hash: last (newest tick handled), last_run, last_jid,
                                    last_enqueued_at, and the entry's description (schedule,
                                    cron, every, tz, class, queue, missed, seen)
    sidequest:limit:concurrent:<name>  zset of the slots held in a concurrent limiter: token -> lease expiry
    sidequest:limit:window:<name>   zset of a window limiter's recent starts: token -> start time
    sidequest:limit:bucket:<name>   hash of a bucket limiter's current interval: b (its number), n (entries)
    sidequest:limit:leaky:<name>    hash of a leaky limiter's bucket: level (entries), at (when last drained)
    sidequest:limit:points:<name>   hash of a points limiter's bucket: level (points), at (when last drained)
    sidequest:cancel:<jid>          flag: a running job was cancelled (`sidequest.cancelled()`)
    sidequest:unique:<digest>       a unique job's claim: the jid holding it
    sidequest:debounce|throttle:<d>  a debounced key's pending run (payload), a throttled one's jid (`flow`)
    sidequest:lanes:<n>:<q>[:...]   a queue's lanes: jobs pushed with a group or a priority wait there
                                    until staged into queue:<q> (`lanes`: the sub-keys and their use);
                                    <n> is the length of the name <q>, so no queue's lane keys are
                                    another's (`a`'s level 5 and the queue `a:5`); an operator's
                                    overrides of a group's limits stay there until removed
    sidequest:status:<jid>          hash of a `result_ttl` job's state (and result or error)
    sidequest:status:<jid>:notify   list holding one token once that job has ended (waiters block on it)
    sidequest:django-task:<jid>     hash: a Django task's result record (`contrib.django`)
    sidequest:health                string written by `sidequest health --ready` (expires in a minute)
    sidequest:workflow:<id>[:...]   a workflow: its hash (name, state, counts), `:graph` (step -> its
                                    description), `:state` (step -> status), `:pending` (its dependencies)
    sidequest:workflows             zset of workflow ids by creation time: the recent workflows
    sidequest:iteration:<jid>       hash of an iterable job's progress: cursor (JSON), state,
                                    executions, items, runtime, class, updated_at (see `iteration`)
    sidequest:steps:<jid>           hash of a job's durable steps: digest (of its class and args),
                                    jid, class, queue, created_at, seq, and per step `s:<name>`
                                    (JSON: state, attempts, times) and `r:<name>` (its result, JSON)

How long each key lives, and which are meant to stay: `lifetimes`.

A test fails if a key literal appears in any other module; another (tests/scenarios/test_keyspace.py)
runs every feature and fails if a key left without a TTL matches no pattern of `KEPT`.
"""

from __future__ import annotations

import re

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

QUEUES = "queues"
SCHEDULE = "schedule"
RETRY = "retry"
DEAD = "dead"
PROCESSES = "processes"
STAT_PROCESSED = "stat:processed"
STAT_FAILED = "stat:failed"

PREFIX = "sidequest"
QUEUE_PREFIX = "queue:"


def queue(name: str) -> str:
    return QUEUE_PREFIX + name


def queue_name(key: str) -> str:
    """The queue name of a `queue:<name>` key."""
    return key.removeprefix(QUEUE_PREFIX)


def process(identity: str) -> str:
    return identity


def work(identity: str) -> str:
    return f"{identity}:work"


def workers(identity: str) -> str:
    return f"{identity}:workers"


def signals(identity: str) -> str:
    return f"{identity}-signals"


def stat_daily(name: str, day: str) -> str:
    """`stat:processed:2026-11-22`; `name` is `processed` or `failed`."""
    return f"stat:{name}:{day}"


BATCH_SLOT = "batch"


def reserved(identity: str, slot: int | str) -> str:
    """A reserved list of a process: `batch` holds what it took in batches for its idle
    processors; a processor's number, what that processor's blocking fetch took (see fetch)."""
    return f"{PREFIX}:reserved:{identity}:{slot}"


def identity_of_reserved(key: str) -> str:
    """`sidequest:reserved:host:12:ab12:3` -> `host:12:ab12`."""
    return key[len(f"{PREFIX}:reserved:"):].rsplit(":", 1)[0]


def recovered(identity: str) -> str:
    """What recovery took from the reserved lists of `identity` (see scripts' SETTLE)."""
    return f"{PREFIX}:recovered:{identity}"


RECOVERED_TTL = 7 * 24 * 3600  # seconds: a paused process resumed later than this is not told apart
RESERVATIONS = f"{PREFIX}:reservations"
PAUSED = f"{PREFIX}:paused"


def metrics(minute: str) -> str:
    """Per-job metrics of one UTC minute, `minute` as `YYYYMMDDHHMM`."""
    return f"{PREFIX}:metrics:{minute}"


def metrics_latency(minute: str) -> str:
    """Per-queue longest waits of one UTC minute, `minute` as `YYYYMMDDHHMM`."""
    return f"{PREFIX}:metrics:{minute}:latency"


RECOVERY_LOCK = f"{PREFIX}:recovery-lock"
HEALTH = f"{PREFIX}:health"
PERIODIC = f"{PREFIX}:periodic"


def periodic(entry_id: str) -> str:
    """The record of one periodic entry (see `periodic`): its newest tick and last run."""
    return f"{PREFIX}:periodic:{entry_id}"


def limit_concurrent(name: str) -> str:
    """The slots of concurrent limiter `name` (see `limiter`)."""
    return f"{PREFIX}:limit:concurrent:{name}"


def limit_window(name: str) -> str:
    """The recent starts of window limiter `name` (see `limiter`)."""
    return f"{PREFIX}:limit:window:{name}"


def limit_bucket(name: str) -> str:
    """The count of bucket limiter `name` in its current interval (see `limiter`)."""
    return f"{PREFIX}:limit:bucket:{name}"


def limit_leaky(name: str) -> str:
    """The level of leaky limiter `name` (see `limiter`)."""
    return f"{PREFIX}:limit:leaky:{name}"


def limit_points(name: str) -> str:
    """The level of points limiter `name` (see `limiter`)."""
    return f"{PREFIX}:limit:points:{name}"


def cancel_flag(jid: str) -> str:
    """Set while a running job is asked to stop (see `cancellation`)."""
    return f"{PREFIX}:cancel:{jid}"


def unique(digest: str) -> str:
    """The claim of a unique job: `digest` is `unique.digest` of its class, args and queue."""
    return f"{PREFIX}:unique:{digest}"


def status(jid: str) -> str:
    """The state of a job pushed with `result_ttl` (see `results`)."""
    return f"{PREFIX}:status:{jid}"


def status_notify(jid: str) -> str:
    """Holds a token once the job of `status(jid)` has ended, for `result()` to block on."""
    return f"{PREFIX}:status:{jid}:notify"


def django_task(jid: str) -> str:
    """The result record of a Django task run as job `jid` (see `contrib.django.backend`)."""
    return f"{PREFIX}:django-task:{jid}"


# -- iteration: the progress of an iterable job (`sidequest.IterableJob`), kept by its jid so a
# slice re-enqueued, put back or recovered resumes from its cursor.
def iteration(jid: str) -> str:
    """The cursor and counts of iterable job `jid` (see `iteration`)."""
    return f"{PREFIX}:iteration:{jid}"


ITERATION_TTL = 30 * 24 * 3600  # seconds a paused iteration keeps its cursor (Sidekiq's it-<jid>: 30 days)
ITERATION_DONE_TTL = 24 * 3600  # seconds a completed or cancelled one stays readable


# -- steps: the recorded steps of a job (`sidequest.step`), kept by its jid (the digest of its
# class and arguments is inside, so a re-push of the jid with other arguments starts fresh).
def steps(jid: str) -> str:
    """The step records of job `jid` on one Redis (see `features.steps`)."""
    return f"{PREFIX}:steps:{jid}"


STEPS_TTL = 180 * 24 * 3600  # seconds after its last write: the last resort (Sidekiq's dead_timeout, 6 months)


# -- tasks: `sidequest:task:<id>` hash (name, meta, counts, callbacks), `...:events` hash
# (jid -> event JSON), `...:order` zset of every jid by position, `...:status:<s>` zsets of jids
# by status (for filtered, paged event lists). All expire together: task_ttl after the task's last
# change, task_retention once it completes.
TASK_STATUSES = ("enqueued", "working", "finished", "failed", "error")


TASKS_RECENT = f"{PREFIX}:tasks"


def task(task_id: str) -> str:
    return f"{PREFIX}:task:{task_id}"


def task_events(task_id: str) -> str:
    return f"{PREFIX}:task:{task_id}:events"


def task_order(task_id: str) -> str:
    return f"{PREFIX}:task:{task_id}:order"


def task_index(task_id: str, status: str) -> str:
    return f"{PREFIX}:task:{task_id}:status:{status}"


def task_key_suffixes() -> list[str]:
    """What follows `task(id)` in the names of a task's other keys (the Lua scripts build them)."""
    return [":events", ":order", *(f":status:{s}" for s in TASK_STATUSES)]


def task_keys(task_id: str) -> list[str]:
    """Every key of a task, in the order the task scripts expect them."""
    return [task(task_id), task_events(task_id), task_order(task_id),
            *(task_index(task_id, s) for s in TASK_STATUSES)]



# -- capsules: a capsule's processors take jobs in batches into a list of their own (its name is
# letters, digits, '_' and '-', so `identity_of_reserved` still reads the owner); it is one of the
# process's reserved lists (`reserved("*", "*")`), recovered and released as the others are.
def capsule_slot(capsule: str) -> str:
    """The slot name of a capsule's batch list: `batch-<capsule>`."""
    return f"{BATCH_SLOT}-{capsule}"


def capsule_batch(identity: str, capsule: str) -> str:
    """`sidequest:reserved:<identity>:batch-<capsule>`: what capsule `capsule` took in batches."""
    return reserved(identity, capsule_slot(capsule))


# -- workflows: `sidequest:workflow:<id>` hash (name, state, counts per step status, ttl),
# `...:graph` hash (step -> its description JSON, fixed at creation), `...:state` hash (step ->
# status), `...:pending` hash (step -> how many of its dependencies are not yet resolved). All
# expire together, the workflow's ttl after its last change (see `workflows`).
WORKFLOWS_RECENT = f"{PREFIX}:workflows"


def workflow(workflow_id: str) -> str:
    return f"{PREFIX}:workflow:{workflow_id}"


def workflow_keys(workflow_id: str) -> list[str]:
    """Every key of a workflow, in the order its scripts expect them: hash, graph, state, pending."""
    base = workflow(workflow_id)
    return [base, f"{base}:graph", f"{base}:state", f"{base}:pending"]


# -- Cluster mode: where the keys of one job's moves live on a Redis Cluster ------------------------
# Every script touches one slot, so what one job's move touches shares the hash tag of its queue:
#
#     queue:{<q>}                            the queue's list
#     schedule:{<q>}, retry:{<q>}, dead:{<q>}  its jobs waiting for their time, their retry, or dead
#     sidequest:reserved:{<q>}:<identity>:<slot>  what a process took from it, per queue
#     sidequest:reservations:{<q>}           the index of those lists (recovery reads it)
#     sidequest:recovered:{<q>}:<identity>   what recovery took from a dead process's lists
#     sidequest:lanes:<n>:{<q>}[:...]        its lanes (jobs with a group or a priority, see `lanes`)
#     sidequest:unique:{<q>}:<digest>        a unique job's claim (for a queue of a group, the
#                                            group's tag: the same key whichever queue of the group)
#     sidequest:periodic:{<q>}:<entry id>    a periodic entry's claimed ticks (`last`), expiring as
#                                            its record does
#     sidequest:status:{<q>}:<jid>[:notify]  a `result_ttl` job's record, beside the job
#     sidequest:steps:{<q>}:<jid>            a job's step records (`sidequest.step`), beside the job
#     sidequest:task:{<q>}<id>[:...]         a task (its id begins with its queue's hash tag)
#
# A queue named `{<group>}<name>` (no ':' after the tag) keeps its name as it is, so the queues of
# one group share a slot (`queue:{media}resize`, `queue:{media}thumbs`): a task or a workflow,
# which lives in one slot (its id begins with the tag), may span them.
#
# Everything else keeps its name (and its own slot): `queues`, `processes`, a process's hash, the
# stats, tasks, limits, periodic records. A queue's keys live on the primary that owns its slot,
# so queues spread over the primaries. This is not Sidekiq's layout (Sidekiq has no Cluster mode).


class Keyspace:
    """The names of the keys a job moves between: Sidekiq's layout (this class), or Cluster
    mode's (`ClusterKeyspace`). `space(client)` picks the one for a client."""

    cluster = False

    def queue(self, name: str) -> str:
        return queue(name)

    def queue_name(self, key: str) -> str:
        return queue_name(key)

    def schedule(self, queue: str) -> str:
        return SCHEDULE

    def retry(self, queue: str) -> str:
        return RETRY

    def dead(self, queue: str) -> str:
        return DEAD

    def reserved(self, identity: str, slot: int | str, queue: str) -> str:
        return reserved(identity, slot)

    def reservations(self, queue: str) -> str:
        return RESERVATIONS

    def recovered(self, identity: str, queue: str) -> str:
        return recovered(identity)

    def identity_of_reserved(self, key: str) -> str:
        return identity_of_reserved(key)

    def unique(self, digest: str, queue: str) -> str:
        return unique(digest)

    def flow(self, kind: str, queue: str, digest: str = "") -> str:  # `flow`'s records; counts: no digest
        tag = f"{{{group_of(queue)}}}:" if self.cluster else ""  # Cluster mode: in the queue's slot
        return f"{PREFIX}:{kind}:{tag}{digest}" if digest else f"{PREFIX}:flow:{tag}{kind}"

    def lanes(self, queue: str) -> str:
        """The base name of a queue's lanes (`lanes.LaneKeys` names the keys under it). The name's
        length comes first: the keys under a base add `:<level>`, `:<level>:<group>`, ..., so with
        the name alone queue `a`'s level 5 would be queue `a:5`'s base."""
        return lanes_base(queue)

    def periodic_claim(self, entry_id: str, queue: str) -> str:
        """Where a periodic entry's newest handled tick (`last`) is claimed: its record."""
        return periodic(entry_id)

    def status(self, jid: str, queue: str) -> str:
        return status(jid)

    def status_notify(self, jid: str, queue: str) -> str:
        return status_notify(jid)

    def steps(self, jid: str, queue: str) -> str:
        return steps(jid)


class ClusterKeyspace(Keyspace):
    """Cluster mode's names: a queue's keys share its hash tag (see above): `{<queue>}`, or for a
    queue of a group, `{<group>}<name>`, its name as it is (see `group_of`)."""

    cluster = True

    def tagged(self, queue: str) -> str:
        """The queue's name with its hash tag: `{mail}`, or a grouped queue's own `{media}resize`."""
        return queue if queue.startswith("{") else f"{{{queue}}}"

    def slot_tag(self, queue: str) -> str:
        """The hash tag alone: `{mail}`, or for `{media}resize` its group's `{media}`. A job's own
        records (its unique claim, its status) use it, so they stay put when a retry moves the
        job to another queue of its group (`retry_queue`)."""
        return f"{{{group_of(queue)}}}"

    def queue(self, name: str) -> str:
        return QUEUE_PREFIX + self.tagged(name)

    def queue_name(self, key: str) -> str:
        name = key.removeprefix(QUEUE_PREFIX)
        if name.endswith("}") and name.find("}") == len(name) - 1:  # `{mail}`, not `{media}resize`
            return name[1:-1]
        return name

    def schedule(self, queue: str) -> str:
        return f"{SCHEDULE}:{self.tagged(queue)}"

    def retry(self, queue: str) -> str:
        return f"{RETRY}:{self.tagged(queue)}"

    def dead(self, queue: str) -> str:
        return f"{DEAD}:{self.tagged(queue)}"

    def reserved(self, identity: str, slot: int | str, queue: str) -> str:
        return f"{PREFIX}:reserved:{self.tagged(queue)}:{identity}:{slot}"

    def reservations(self, queue: str) -> str:
        return f"{RESERVATIONS}:{self.tagged(queue)}"

    def recovered(self, identity: str, queue: str) -> str:
        return f"{PREFIX}:recovered:{self.tagged(queue)}:{identity}"

    def _split_reserved(self, key: str) -> tuple[str, str]:
        """`sidequest:reserved:{q}:host:12:ab12:3` -> (`q`, `host:12:ab12:3`); a grouped queue's
        name, `{media}resize`, has no ':' (see `cluster_queue_problem`)."""
        rest = key[len(f"{PREFIX}:reserved:"):]
        close = rest.index("}")
        if rest[close + 1] == ":":  # `{q}:...`: a queue of its own
            return rest[1:close], rest[close + 2:]
        name, _, tail = rest.partition(":")
        return name, tail

    def identity_of_reserved(self, key: str) -> str:
        """`sidequest:reserved:{q}:host:12:ab12:3` -> `host:12:ab12`."""
        return self._split_reserved(key)[1].rsplit(":", 1)[0]

    def queue_of_reserved(self, key: str) -> str:
        """`sidequest:reserved:{q}:host:12:ab12:3` -> `q`."""
        return self._split_reserved(key)[0]

    def unique(self, digest: str, queue: str) -> str:
        return f"{PREFIX}:unique:{self.slot_tag(queue)}:{digest}"

    def lanes(self, queue: str) -> str:
        return lanes_base(self.tagged(queue))

    def periodic_claim(self, entry_id: str, queue: str) -> str:
        """The claim of a periodic entry's ticks, in its queue's slot (its record, with the entry's
        description and last run, stays at `sidequest:periodic:<id>`)."""
        return f"{PREFIX}:periodic:{self.slot_tag(queue)}:{entry_id}"

    def status(self, jid: str, queue: str) -> str:
        return f"{PREFIX}:status:{self.slot_tag(queue)}:{jid}"

    def status_notify(self, jid: str, queue: str) -> str:
        return f"{PREFIX}:status:{self.slot_tag(queue)}:{jid}:notify"

    def steps(self, jid: str, queue: str) -> str:
        """A job's step records, in its queue's (group's) slot: a retry into another queue of the
        group finds them; a `retry_queue` in another slot does not (see docs/durable-steps.md)."""
        return f"{PREFIX}:steps:{self.slot_tag(queue)}:{jid}"


def lanes_base(name: str) -> str:
    """`sidequest:lanes:<n>:<name>`: the length makes the base of one name never the prefix of another's."""
    return f"{PREFIX}:lanes:{len(name)}:{name}"


def group_of(queue: str) -> str:
    """The hash tag a queue's keys share in Cluster mode: its name, or for `{media}resize` (a
    queue of the group `media`), the group's; queues of one group live in one slot, so a task
    or a workflow may span them."""
    return queue[1:queue.index("}")] if queue.startswith("{") else queue


DEFAULT = Keyspace()
CLUSTER = ClusterKeyspace()
GROUPED = re.compile(r"\{[^{}:]+\}[^{}:]+")  # a queue of a group in Cluster mode: `{media}resize`


def space(client: object) -> Keyspace:
    """The keyspace of the keys `client` reaches: Cluster mode's on a Redis Cluster client."""
    return CLUSTER if isinstance(client, RedisCluster | AsyncRedisCluster) else DEFAULT


def cluster_queue_problem(name: str) -> str | None:
    """Why `name` cannot be a queue in Cluster mode, or None: braces only as a group's hash tag
    at its start, `{group}name` (a grouped name without ':'), since a queue's keys are tagged
    with its name."""
    if "{" not in name and "}" not in name:
        return None
    if GROUPED.fullmatch(name):
        return None
    return (f"queue name {name!r}: in Cluster mode a queue's name is its keys' hash tag, so it has no brace, "
            "or begins with a group's tag, as in {media}resize (no ':' in a grouped name)")

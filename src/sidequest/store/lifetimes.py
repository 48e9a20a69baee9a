"""How long each Redis key lives (see `keys` for what each holds). Every key expires by itself
(its writer sets the TTL, and refreshes it), except those in `KEPT`, which hold jobs, an
operator's choice, or a total that Sidekiq also keeps forever:

    <identity>, <identity>:work(ers)   heartbeat_ttl after the last beat (a clean stop deletes them)
    <identity>-signals                 60 s (Sidekiq's)
    stat:<name>:YYYY-MM-DD             5 years, as Sidekiq's launcher sets
    sidequest:recovery-lock            5 x recovery_interval (its owner deletes it when done)
    sidequest:task:<id>[:...]          task_ttl after the task's last change; task_retention once
                                       it has completed (every key of the task, together)
    sidequest:metrics:<minute>[:latency]  72 hours
    sidequest:periodic, :periodic:<id> periodic_ttl after a periodic scheduler last described the entry
    sidequest:limit:concurrent:<name>  the longest lease held, plus a second
    sidequest:limit:window:<name>      the window, plus a second
    sidequest:limit:bucket:<name>      the rest of its interval, plus a second
    sidequest:limit:leaky:<name>, :points:<name>  until the bucket has drained empty, plus a second
    sidequest:cancel:<jid>             24 hours
    sidequest:unique:<digest>          unique_for (after the job's time, for a scheduled one)
    sidequest:throttle:<d>             the throttle period
    sidequest:status:<jid>[:notify]    result_ttl after the job's last change
    sidequest:django-task:<jid>        result_ttl after the task's last change (as its status record)
    sidequest:workflow:<id>[:...]      the workflow's ttl (7 days by default) after its last change
    sidequest:workflows                the same ttl after the last workflow was created
    sidequest:iteration:<jid>          30 days after its last save; 24 hours once completed or cancelled

A test (tests/scenarios/test_keyspace.py) runs every feature and fails if a key left without a TTL
matches no pattern of `KEPT`.
"""

from __future__ import annotations

from sidequest.store.keys import (
    DEAD,
    PAUSED,
    PREFIX,
    PROCESSES,
    QUEUES,
    RESERVATIONS,
    RETRY,
    SCHEDULE,
    STAT_FAILED,
    STAT_PROCESSED,
    queue,
    reserved,
)

KEPT: dict[str, str] = {
    QUEUES: "Sidekiq's set of queue names: a queue stays listed until it is cleared, as in Sidekiq",
    queue("*"): "jobs waiting in a queue: a job leaves Redis only when it is done",
    SCHEDULE: "jobs waiting for their time",
    RETRY: "jobs waiting for their next attempt",
    DEAD: "dead jobs, trimmed by dead_timeout and dead_max_jobs (Sidekiq's rule), not expired",
    PROCESSES: "Sidekiq's set of processes; readers drop identities whose heartbeat hash expired",
    STAT_PROCESSED: "all-time total, kept forever as Sidekiq keeps it",
    STAT_FAILED: "all-time total, kept forever as Sidekiq keeps it",
    f"{PREFIX}:lanes:*": "jobs waiting in a queue's lanes and their bookkeeping (levels, turns, counts, groups' "
                         "running jids and limits), each gone once empty; paused groups until resumed, and "
                         "an operator's limits of a group until removed (`lanes`, `lanes.limits`)",
    f"{PREFIX}:debounce:*": "a debounced key's pending run: it lives as long as that run waits (no poller may run "
                            "for a while), ended where a worker takes it or the key's next push replaces it (`flow`)",
    f"{PREFIX}:flow:*": "all-time totals of pushes debounce replaced and throttle dropped, per class (`flow`)",
    reserved("*", "*"): "jobs a process took and has not settled; recovery puts back a dead process's",
    RESERVATIONS: "the index of reserved lists, which recovery reads instead of a SCAN",
    PAUSED: "queues an operator paused: paused until resumed",
    # Cluster mode's per-queue names of the same keys (see ClusterKeyspace)
    "schedule:{*}": "a queue's jobs waiting for their time (Cluster mode)",
    "retry:{*}": "a queue's jobs waiting for their next attempt (Cluster mode)",
    "dead:{*}": "a queue's dead jobs, trimmed as `dead` is (Cluster mode)",
    f"{RESERVATIONS}:{{*}}": "a queue's index of reserved lists (Cluster mode)",
}

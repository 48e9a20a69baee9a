"""The admin API: read and act on queues, scheduled/retry/dead jobs, processes and metrics.

Spelled as Sidekiq's Ruby API (`Sidekiq::Stats`, `Sidekiq::Queue`, `Sidekiq::RetrySet`...), in
Python; the dashboard and the CLI use only this. Every class takes an optional `client`
(default: `sidequest.default_client()`).

    from sidequest.api import Stats, Queue, RetrySet, ScheduledSet, DeadSet, ProcessSet, Workers

    Stats().processed, Stats().queues                   # {"default": 12, ...}
    Queue("mail").latency; Queue("mail").pause()       # skipped by every worker within ~1 s
    entry = RetrySet().find_job(jid)
    entry.retry()                                       # True, or False if someone got there first
    DeadSet().retry_all(name="SendWelcome")
    for process in ProcessSet(): process.quiet()
    for work in Workers(): print(work.process_id, work.job.klass, work.run_at)
    MetricsQuery().top_jobs(minutes=60)

Every action names the exact stored entry (its bytes) and moves it in one atomic call only if
it is still there, so two operators acting on one entry at once never lose or double a job:
one gets True, the other False. A task job's event records the action (see `tasks`). Times
are epoch seconds whether Sidekiq 6/7 (float seconds) or Sidekiq 8 (integer ms) wrote them.

    Stats(client=None)                 processed failed enqueued scheduled_size retry_size dead_size
                                       processes_size workers_size default_queue_latency
                                       queues (name -> size) queue_summaries history(days) reset()
    History(days=30, start=None)       processed failed: {"YYYY-MM-DD": n}, newest first
    Queue(name="default")              Queue.all() size latency paused pause() unpause()
                                       iteration page(offset, limit) find_job(jid) clear()
    ScheduledSet() RetrySet() DeadSet()
                                       size iteration page(offset, limit) find_job(jid) get(key)
                                       fetch(score, jid) scan(text) select(name, text)
                                       retry_all add_all_to_queue kill_all delete_all (name, text)
                                       clear()
    JobRecord (in a queue)             jid klass args queue item value enqueued_at created_at
                                       failed_at retried_at retry_count error_class error_message
                                       error_backtrace tags latency() delete() as_dict()
    SortedEntry (in a set)             the same, and score/at key retry() add_to_queue() kill()
                                       delete() reschedule(at)
    ProcessSet(clean=True)             iteration get(identity) size cleanup() total_concurrency
    Process                            identity hostname pid busy beat stopping concurrency rss
                                       quiet() stop() dump_threads() as_dict()
    Workers() (WorkSet)                iteration of Work (process_id thread_id queue run_at
                                       payload job) size find_work(jid)
    Load()                             queues (name -> QueueLoad: busy capacity) capsules (name ->
                                       CapsuleLoad: capacity busy {queue: n}) concurrency
    job_steps(jid)                     JobSteps (klass queue steps: StepRecord name state attempts
                                       duration result error) of a job's durable steps, or None
    reset_steps(jid, name=None)        forget a step (or all): the job's next run runs it again
    Iteration                          find(jid) -> IterationState (cursor state executions items
                                       runtime per_item) or None; running() -> {jid: state}
    MetricsQuery()                     top_jobs(minutes, limit) for_job(name, minutes) ->
                                       JobSummary (runs failed total_ms p50/p95/p99_ms series);
                                       per_minute(minutes) -> [MinutePoint] over every job name;
                                       latency_per_minute(minutes) -> [LatencyPoint] per queue
    groups(queue, limit=100)           GroupInfo (name waiting running paused concurrency rate weight
                                       overridden) of a queue's fairness groups, largest first
    pause_group(queue, group)          staging skips the group; resume_group(queue, group)
    reset_group(queue, group)          give back the group's slots (and rate window) at once
    set_group_limits(queue, group, weight=, concurrency=, rate=)  an operator's overrides, over the
                                       jobs' options until clear_group_limits(queue, group, *names)
    lanes(queue)                       {level: waiting} of a queue's priority lanes, highest first
    lanes_waiting(queues)              {queue: jobs waiting in its lanes}, not yet in its list
    Search(name, jid, args, text, error, queue, where)
                                       one search over queues, lanes, scheduled, retry, dead:
                                       page(cursor, limit) -> SearchPage (hits: Hit where record,
                                       cursor) iteration retry_all delete_all kill_all
    flow_counts()                      {class: {"replaced": n, "dropped": n}}: pushes debounce
                                       replaced and throttle dropped (`features.flow`)
    Cluster(usage=True)                Cluster mode only: shards (Shard: primary replicas slots
                                       keys memory queues) queues (name -> primary) node_of(queue)

On a Redis Cluster (`redis+cluster://`, see `keys.ClusterKeyspace`) the same classes read the
whole cluster: a queue's list and its scheduled, retry and dead jobs live in its own slot, so
`RetrySet()` and the others are the union of every queue's set (each entry keeps its own, and
its actions stay in that slot), and `Stats` adds them up.
"""

from sidequest.api.cluster import Cluster, Shard, ShardDict
from sidequest.api.flow import flow_counts
from sidequest.api.groups import (
    GroupInfo,
    clear_group_limits,
    groups,
    lanes,
    lanes_waiting,
    pause_group,
    reset_group,
    resume_group,
    set_group_limits,
)
from sidequest.api.iteration import Iteration
from sidequest.api.job_metrics import JobSummary, LatencyPoint, MetricsQuery, MinutePoint
from sidequest.api.load import CapsuleLoad, Load, QueueLoad
from sidequest.api.processes import Process, ProcessDict, ProcessSet, Work, Workers, WorkSet
from sidequest.api.queues import Queue
from sidequest.api.records import JobDict, JobRecord, SortedEntry
from sidequest.api.search import Criteria, Hit, Search, SearchPage
from sidequest.api.sets import DeadSet, JobSet, RetrySet, ScheduledSet
from sidequest.api.stats import History, QueueSummary, Stats, StatsDict
from sidequest.api.steps import job_steps, reset_steps

__all__ = [
    "CapsuleLoad",
    "Cluster",
    "Criteria",
    "DeadSet",
    "GroupInfo",
    "History",
    "Hit",
    "Iteration",
    "JobDict",
    "JobRecord",
    "JobSet",
    "JobSummary",
    "LatencyPoint",
    "Load",
    "MetricsQuery",
    "MinutePoint",
    "Process",
    "ProcessDict",
    "ProcessSet",
    "Queue",
    "QueueLoad",
    "QueueSummary",
    "RetrySet",
    "ScheduledSet",
    "Search",
    "SearchPage",
    "Shard",
    "ShardDict",
    "SortedEntry",
    "Stats",
    "StatsDict",
    "Work",
    "WorkSet",
    "Workers",
    "clear_group_limits",
    "flow_counts",
    "groups",
    "job_steps",
    "lanes",
    "lanes_waiting",
    "pause_group",
    "reset_group",
    "reset_steps",
    "resume_group",
    "set_group_limits",
]

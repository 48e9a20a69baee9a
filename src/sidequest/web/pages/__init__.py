"""The dashboard's pages, one module per page or group of pages, each with `routes(site)`.

    dashboard    `/` and `/api/stats` (what every page polls)
    busy         `/busy`: the processes and the jobs running
    queues       `/queues`, `/queues/<name>`
    groups       a queue's groups acted on from its page: pause, resume, reset, overrides
    sets         `/retries`, `/scheduled`, `/dead`
    job          `/jobs/<jid>`: one job wherever it is, and its durable steps (found by `whereabouts`)
    job_metrics  `/job-metrics`
    tasks        `/tasks`, `/tasks/<id>` (and the tasks JSON API for non-HTML clients)
    workflows    `/workflows`, `/workflows/<id>`
    periodic     `/periodic`
    cluster      `/cluster` (on a Redis Cluster only)

What they share (the client, the renderer, paging, forms) is `web.site`; their templates are in
`web/templates/`.
"""

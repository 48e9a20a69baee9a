"""The admin commands: `stats`, `queues`, `enqueue`, `tasks`, `retries`, `scheduled`, `dead`,
`processes`, `top`, `health`, `workflows`, `periodic`. Each acts only through the admin API
(`sidequest.api`) and prints aligned tables, or one JSON document with `--json`; what they share
is `connect` (flags, client, one-line errors), `render` and `views` (the tables). Each module
registers its commands on `cli.root.main` when `cli.root.LazyGroup` imports it.
"""

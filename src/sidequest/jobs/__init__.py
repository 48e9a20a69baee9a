"""What a job is: its definition, options, arguments, payload, registry and middleware.

Only `definition` (the `@job` decorator and `Job` class, whose `perform_async` pushes) reaches the
client and the workflow signatures; the rest is data and rules, without Redis.
"""

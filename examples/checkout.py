"""A checkout with durable steps: charge the card, send the receipt, update the CRM, each once.

    sidequest worker -r examples/checkout.py       # PROVIDER_URL: the payment provider (see bench/chaos_checkout.py)

Each step calls the provider over HTTP with the step's idempotency key, so a crash after the
charge and before its record (the one window steps leave) is deduped by the provider. Each body
records its start and end in Redis (`checkout:steps`), so `make chaos` can count how often each
body ran against the kills that landed inside it.
"""

from __future__ import annotations

import json
import os
import urllib.request

import sidequest

QUEUE = "checkout"
LOG = "checkout:steps"  # ["start"|"end", order, step, pid]
DONE = "checkout:done"  # [order, charge id, pid]: orders whose job ran to its end


def call(path: str, order: int) -> dict:
    """POST to the provider with this step's idempotency key; its JSON reply."""
    step = sidequest.current_step()
    request = urllib.request.Request(f"{os.environ['PROVIDER_URL']}{path}", data=json.dumps({"order": order}).encode(),
                                     headers={"Idempotency-Key": step.idempotency_key}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def body(path: str, order: int) -> dict:
    name = sidequest.current_step().name
    sidequest.redis().rpush(LOG, json.dumps(["start", order, name, os.getpid()]))
    result = call(path, order)
    sidequest.redis().rpush(LOG, json.dumps(["end", order, name, os.getpid()]))
    return result


@sidequest.job(name="Checkout", queue=QUEUE, retry=25)
def checkout(order: int) -> None:
    charge = sidequest.step("charge", body, "/charge", order)
    sidequest.step("receipt", body, "/receipt", order)
    sidequest.step("crm", body, "/crm", order)
    sidequest.redis().rpush(DONE, json.dumps([order, charge["id"], os.getpid()]))


@sidequest.job(name="AsyncCheckout", queue=QUEUE, retry=25)
async def async_checkout(order: int) -> None:
    import asyncio

    async def step_body(path: str) -> dict:
        name, key = sidequest.current_step().name, sidequest.current_step().idempotency_key
        return await asyncio.to_thread(_keyed_body, path, order, name, key)

    charge = await sidequest.astep("charge", step_body, "/charge")
    await sidequest.astep("receipt", step_body, "/receipt")
    await sidequest.astep("crm", step_body, "/crm")
    await sidequest.aio.redis().rpush(DONE, json.dumps([order, charge["id"], os.getpid()]))


def _keyed_body(path: str, order: int, name: str, key: str) -> dict:
    """`body` on a thread of its own (the step context is the loop's): the key is passed in."""
    r = sidequest.redis()
    r.rpush(LOG, json.dumps(["start", order, name, os.getpid()]))
    request = urllib.request.Request(f"{os.environ['PROVIDER_URL']}{path}", data=json.dumps({"order": order}).encode(),
                                     headers={"Idempotency-Key": key}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        result = json.loads(reply.read())
    r.rpush(LOG, json.dumps(["end", order, name, os.getpid()]))
    return result

"""The RESERVE call and the read-back of a batch list, one for both runners.

RESERVE (`scripts`) moves up to `want` jobs from the queues into a batch list and removes the
successes it carries (`acknowledger`). Its arguments, its reply (the jobs; the faults of the
successes' operations and of queues whose key has the wrong type, logged by `faults`) and what
the process knows its batch lists hold are handled here, by `BatchLedger`, for the threads
runner's `batch.BatchList` and the asyncio runner's `loop_fetch.LoopFetch`; each sends the call on its
own lane (`send`, or `send_async` on the loop).

Read-back by counting. Commands are never re-sent by the Redis client (see `store.connection`):
a call whose reply was lost may have moved jobs into a batch list without the process knowing.
After a lost reply (`failed`, `lost_reply`) the next fetch reads the lists back and adopts what
they hold beyond what the process knew before reading (the jobs it took, less those that left
through an acknowledgement or a SETTLE), counted per payload: two identical payloads are two jobs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sidequest.jobs.payload import decode, queue_of
from sidequest.store import faults
from sidequest.store.direct import AsyncDirectPath, DirectPath
from sidequest.store.outage import LOST
from sidequest.worker.fetch.acknowledger import Ack

Taken = tuple[str, bytes]  # (queue key, job bytes)


def reserve_args(now: float, want: int, acks: Sequence[Ack]) -> list[Any]:
    """RESERVE's arguments: the time, how many jobs to take, and the successes with their ops."""
    args: list[Any] = [repr(now), want, len(acks)]
    for raw, ops, _ in acks:
        args += [raw, *ops]
    return args


class BatchLedger:
    """What a process knows its batch lists hold (see module), and the RESERVE calls that change
    it. Shared by the threads (or the loop and its pool's threads): its counts take a lock."""

    def __init__(self, queue_faults: faults.QueueFaults | None = None, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.queue_faults = queue_faults or faults.QueueFaults()
        self.known: Counter[bytes] = Counter()  # jobs of the batch lists this process knows of
        self.lock = threading.Lock()
        self.suspect = False  # a reply was lost: a list may hold a job no one knows of

    def send(self, lane: DirectPath, script: Any, keys: list[str], want: int, acks: Sequence[Ack]) -> list[Taken]:
        """One RESERVE on a sync lane (KEYS: the queues, the batch list, reservations, the
        caller's own list): the jobs it took."""
        try:
            reply = lane.evalsha(script, keys, self.args(want, acks))
        except BaseException as exc:
            self.failed(exc)
            raise
        return self.reserved(reply, acks)

    async def send_async(self, lane: AsyncDirectPath, script: Any, keys: list[str], want: int,
                         acks: Sequence[Ack]) -> list[Taken]:
        """`send`, on the loop's lane."""
        try:
            reply = await lane.evalsha(script, keys, self.args(want, acks))
        except BaseException as exc:
            self.failed(exc)
            raise
        return self.reserved(reply, acks)

    def args(self, want: int, acks: Sequence[Ack]) -> list[Any]:
        return reserve_args(self.clock(), want, acks)

    def reserved(self, reply: list[Any], acks: Sequence[Ack]) -> list[Taken]:
        """The jobs of a RESERVE reply, its faults logged: the successes it carried have left
        the batch list, the jobs it took have joined it."""
        jobs = faults.reserved(reply, acks, self.queue_faults)
        known = self.known
        with self.lock:
            for ack in acks:
                forget_one(known, ack[0])
            for i in range(1, len(jobs), 2):
                known[jobs[i]] += 1
        return [(jobs[i].decode(), jobs[i + 1]) for i in range(0, len(jobs), 2)]

    def failed(self, exc: BaseException) -> None:
        """A call failed: if its reply was lost it may have moved jobs, read the lists back."""
        if isinstance(exc, LOST):
            self.suspect = True

    def lost_reply(self) -> None:
        self.suspect = True

    def count(self, raw: bytes) -> None:
        """A job joined the batch list through another call (a BLMOVE into it)."""
        with self.lock:
            self.known[raw] += 1

    def forget(self, raw: bytes) -> None:
        """A job of the batch list left it through a call of its own (a SETTLE, a put-back)."""
        with self.lock:
            forget_one(self.known, raw)

    def to_read_back(self) -> Counter[bytes] | None:
        """(Before a fetch.) What the process knows the lists hold, if a lost reply calls for
        reading them back; the call is then owed (`unread` if the read fails)."""
        if not self.suspect:
            return None
        with self.lock:
            self.suspect = False
            return Counter(self.known)

    def unread(self) -> None:
        """The read-back failed: the next fetch reads back."""
        self.suspect = True

    def adopt(self, lists: Iterable[tuple[str, list[bytes]]], known: Counter[bytes]) -> list[tuple[str, bytes]]:
        """(batch list, job) for each job the lists hold (each: its key and what LRANGE read)
        beyond `known` (`to_read_back`); those are known from now on."""
        found: list[tuple[str, bytes]] = []
        for batch, jobs in lists:
            held = Counter(jobs)
            found += [(batch, raw) for raw in (held - known).elements()]
            known = known - held
        with self.lock:
            for _, raw in found:
                self.known[raw] += 1
        return found

    def blocking_fault(self, key: str, exc: BaseException) -> bool:
        """A blocking fetch on `key` failed: True if that is its queue's fault (WRONGTYPE,
        logged once, as RESERVE reports it), not an outage."""
        if not faults.wrong_type(exc):
            return False
        self.queue_faults.report(key, str(exc))
        return True


def forget_one(known: Counter[bytes], raw: bytes) -> None:
    """One copy of `raw` is no longer in a batch list whose jobs `known` counts."""
    left = known.get(raw, 0) - 1  # not `known[raw]`: a Counter's missing key is a Python call (most jobs)
    if left > 0:
        known[raw] = left
    else:
        known.pop(raw, None)


def queue_of_raw(raw: bytes) -> str:
    """The queue a job read back belongs to."""
    try:
        return queue_of(decode(raw))
    except ValueError:  # not a job: processing files it in dead, under the default queue
        return "default"

"""A bounded index of recent records, written and read newest first: tasks (`sidequest:tasks`) and
workflows (`sidequest:workflows`) each keep one, a sorted set of ids by creation time, beside a
hash per record that may expire before the id leaves the index."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis


def remember(pipe: Any, index: str, record_id: str, now: float, max_age: float, limit: int) -> None:
    """Queue on `pipe` the commands that add `record_id` to `index` and trim it: no entry older than
    `max_age` seconds, at most `limit` entries, and the index itself gone once nothing was added
    for `max_age` (every entry would be too old). Each creation trims, so it never outgrows the bound."""
    pipe.zadd(index, {record_id: now})
    pipe.zremrangebyscore(index, "-inf", f"({now - max_age}")
    pipe.zremrangebyrank(index, 0, -limit - 1)
    pipe.expire(index, int(max_age))


def newest(client: redis.Redis, index: str, key_of: Callable[[str], str],
           describe: Callable[[str, dict[bytes, bytes]], dict[str, Any]],
           offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """(How many ids `index` holds, `limit` records from `offset`, newest first): each described
    from its hash, or `{"id": ..., "expired": True}` once the hash is gone. Two round trips."""
    if offset < 0 or limit < 1:
        raise ValueError("offset must be >= 0 and limit >= 1")
    pipe = client.pipeline(transaction=False)
    pipe.zcard(index)
    pipe.zrevrange(index, offset, offset + limit - 1)
    total, members = pipe.execute()
    ids = [member.decode() for member in members]
    if not ids:
        return int(total), []
    pipe = client.pipeline(transaction=False)
    for record_id in ids:
        pipe.hgetall(key_of(record_id))
    return int(total), [describe(record_id, stored) if stored else {"id": record_id, "expired": True}
                        for record_id, stored in zip(ids, pipe.execute(), strict=True)]

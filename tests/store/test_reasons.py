"""`store.reasons`: a redis-py error as one short line, on errors redis-py really raises."""

from __future__ import annotations

import pytest
import redis
from conftest import free_port
from redis.sentinel import MasterNotFoundError, Sentinel

from sidequest.store.reasons import LIMIT, reason


def test_a_sentinels_no_primary_keeps_its_words_and_drops_the_clients_reprs():
    port = free_port()
    sentinels = Sentinel([("127.0.0.1", port)], sentinel_kwargs={"password": "s3cret", "socket_connect_timeout": 1})
    with pytest.raises(MasterNotFoundError) as caught:
        sentinels.discover_master("mymaster")
    said = reason(caught.value)
    assert said.startswith("No master found for 'mymaster'") and f"127.0.0.1:{port}" in said
    assert "<" not in said and "\n" not in said and len(said) <= LIMIT and "s3cret" not in said


def test_a_servers_reply_is_kept_as_it_came(r):
    with pytest.raises(redis.ResponseError) as caught:
        r.execute_command("NOSUCHCOMMAND", "a")
    said = reason(caught.value)  # the reply as it came, less trailing blanks and commas (Redis 6.2 ends it with ",")
    assert said.startswith("unknown command") and said in str(caught.value) and len(said) >= len(str(caught.value)) - 2


def test_a_long_reply_is_cut_and_nested_reprs_go_whole(r):
    with pytest.raises(redis.ResponseError) as caught:
        r.eval(f"return redis.error_reply('ERR {'x' * 1000}\\nsecond <line>')", 0)
    said = reason(caught.value)
    assert said.startswith("xxx") and said.endswith("…") and len(said) == LIMIT and "\n" not in said
    nested = redis.ConnectionError("lost : <a.B(<c.D(x=<object object at 0x1>)>)> - Connection reset by peer")
    assert reason(nested) == "lost: Connection reset by peer"
    assert reason(redis.ConnectionError("")) == "ConnectionError"

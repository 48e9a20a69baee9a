"""Every credential a Redis URL can hold is masked wherever the URL is shown (`mask_url`, imported
from its old home `store.connection` as most code does), and scrubbed from free text (`redact`)."""

from __future__ import annotations

import pytest

from sidequest.store.connection import mask_url
from sidequest.store.redaction import redact

SECRET = "Pa55w0rd-xyz"

SHOWN = [  # (url, what it is shown as)
    (f"redis://app:{SECRET}@cache:6379/0", "redis://app:****@cache:6379/0"),
    (f"redis://:{SECRET}@cache:6379/0", "redis://:****@cache:6379/0"),
    (f"redis://{SECRET}@cache/0", "redis://****@cache/0"),  # a lone name: often a misplaced password
    (f"redis://cache:6379/0?password={SECRET}", "redis://cache:6379/0?password=****"),
    (f"redis://cache/0?db=1&password={SECRET}&username=app", "redis://cache/0?db=1&password=****&username=app"),
    (f"redis://cache/0?pass%77ord={SECRET}", "redis://cache/0?pass%77ord=****"),  # a percent-encoded name
    ("redis://:p%40ss%3Aw0rd@cache/0", "redis://:****@cache/0"),
    (f"redis://:{SECRET}@x@cache/0", "redis://:****@cache/0"),  # an unencoded @ in the password
    (f"redis://cache/0?password={SECRET}@x", "redis://cache/0?password=****"),
    (f"rediss://app:{SECRET}@cache:6380/0?ssl_password={SECRET}", "rediss://app:****@cache:6380/0?ssl_password=****"),
    (f"unix:///run/redis.sock?db=2&password={SECRET}", "unix:///run/redis.sock?db=2&password=****"),
    (f"unix://:{SECRET}@/run/redis.sock", "unix://:****@/run/redis.sock"),
    (f"redis+sentinel://s1:26379,s2:26379/mymaster/0?sentinel_password={SECRET}",
     "redis+sentinel://s1:26379,s2:26379/mymaster/0?sentinel_password=****"),
    (f"redis+sentinel://app:{SECRET}@s1,s2,[::1]:26380/mymaster?sentinel_username=sn&sentinel_password={SECRET}",
     "redis+sentinel://app:****@s1,s2,[::1]:26380/mymaster?sentinel_username=sn&sentinel_password=****"),
    (f"rediss+cluster://:{SECRET}@n1:7000,n2:7001", "rediss+cluster://:****@n1:7000,n2:7001"),
    (f"redis://:pa?ss{SECRET}@cache/0", "redis://****"),  # split elsewhere by redis-py: nothing shown
    (f"redis://:pa#ss{SECRET}@cache/0", "redis://****"),
    ("redis://cache:6379/0", "redis://cache:6379/0"),
]


@pytest.mark.parametrize(("url", "shown"), SHOWN)
def test_every_credential_of_a_url_is_masked(url, shown):
    assert mask_url(url) == shown
    assert SECRET not in mask_url(url)


def test_a_text_quoting_a_secret_is_scrubbed():
    url = f"redis://127.0.0.1:1/0?password={SECRET}"
    said = f"AUTH {SECRET} failed for {url}; p%40ss"
    assert redact(said, url, "redis://:p%40ss@h") == "AUTH **** failed for redis://127.0.0.1:1/0?password=****; ****"

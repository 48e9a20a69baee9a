import pytest
from conftest import RedisServer, free_port

import sidequest.aio
from sidequest.connection import connect, mask_url
from sidequest.embedded import server_binary
from sidequest.errors import RedisUnavailableError, RedisURLError


def test_mask_url_hides_only_the_password():
    assert mask_url("redis://user:s3cret@h:6380/1") == "redis://user:****@h:6380/1"
    assert mask_url("rediss://:pw@cache.example.com/0") == "rediss://:****@cache.example.com/0"
    assert mask_url("redis://h:6379/0") == "redis://h:6379/0"


def test_connect_works_with_a_live_server(redis_url):
    assert connect(redis_url).ping()


def test_unreachable_names_the_masked_url():
    url = f"redis://:topsecret@127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnavailableError, match=r"cannot reach Redis at redis://:\*\*\*\*@127.0.0.1") as info:
        connect(url)
    assert "topsecret" not in str(info.value)


def test_invalid_url_is_a_clear_error():
    with pytest.raises(RedisUnavailableError, match="invalid Redis URL"):
        connect("http://nope")


def test_a_database_that_is_not_a_whole_number_is_refused(redis_url):
    base = redis_url.rsplit("/", 1)[0]
    for db in ("abc", "-1", "1.5", "0/1"):
        with pytest.raises(RedisURLError, match=f"the database '{db}' is not a whole number"):
            connect(f"{base}/{db}")
    with pytest.raises(RedisURLError, match="the database 'x'"):
        sidequest.aio.connect(f"{base}/x")
    assert connect(f"{base}/3").connection_pool.connection_kwargs["db"] == 3
    assert connect(f"{base}/").ping() and connect(base).ping()  # no database: 0


@pytest.fixture(scope="module")
def acl_server():
    server = RedisServer(server_binary(), ["--requirepass", "right-password"])
    yield server
    server.stop()


def test_wrong_or_missing_password_is_refused_auth(acl_server):
    for url in (f"redis://:wrong@127.0.0.1:{acl_server.port}/0", acl_server.url()):
        with pytest.raises(RedisUnavailableError, match="refused authentication") as info:
            connect(url)
        assert "wrong" not in str(info.value)
    assert connect(f"redis://:right-password@127.0.0.1:{acl_server.port}/0").ping()


def test_username_and_password_acl(acl_server):
    admin = connect(f"redis://:right-password@127.0.0.1:{acl_server.port}/0")
    admin.execute_command("ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all")
    assert connect(f"redis://app:app-pw@127.0.0.1:{acl_server.port}/0").ping()
    with pytest.raises(RedisUnavailableError, match="refused authentication"):
        connect(f"redis://app:nope@127.0.0.1:{acl_server.port}/0")

import asyncio
import shutil
import subprocess
import time

import pytest
from conftest import RedisServer, free_port

import sidequest
import sidequest.client.async_client
from sidequest.errors import RedisUnavailableError, RedisURLError
from sidequest.store.connection import connect, mask_url
from sidequest.store.dev_server import server_binary


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


def test_sentinels_that_name_no_primary_are_one_short_line_in_sidequests_words():
    """Issue 37: redis-py 8.2's "No master found" holds each Sentinel client's repr (its whole
    pool, 1,200 characters a Sentinel); the line names the URL masked and the Sentinels asked."""
    ports = free_port(), free_port()
    url = f"redis+sentinel://:topsecret@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster/0"
    expected = (f"cannot reach Redis at redis+sentinel://:****@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster/0: "
                f"no Sentinel (127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}) named a primary for 'mymaster'; "
                "check that they run and monitor it by that name")
    with pytest.raises(RedisUnavailableError) as info:
        connect(url)
    assert str(info.value) == expected

    async def push() -> None:
        async with sidequest.client.async_client.AsyncClient(sidequest.Config(redis_url=url)) as client:
            await client.push("Anything", [])

    with pytest.raises(RedisUnavailableError) as info:
        asyncio.run(push())
    assert str(info.value) == expected


def test_invalid_url_is_a_clear_error():
    with pytest.raises(RedisUnavailableError, match="invalid Redis URL"):
        connect("http://nope")


def test_a_database_that_is_not_a_whole_number_is_refused(redis_url):
    base = redis_url.rsplit("/", 1)[0]
    for db in ("abc", "-1", "1.5", "0/1"):
        with pytest.raises(RedisURLError, match=f"the database '{db}' is not a whole number"):
            connect(f"{base}/{db}")
    with pytest.raises(RedisURLError, match="the database 'x'"):
        sidequest.client.async_client.connect(f"{base}/x")
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


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A redis-server with a plain port (`port`) and a TLS port (`tls_port`), its certificate in `ca`."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    tls_port = free_port()
    try:
        server = RedisServer(server_binary(), ["--tls-port", str(tls_port), "--tls-cert-file", str(cert),
                                               "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
                                               "--tls-auth-clients", "no"])
    except AssertionError:  # it did not come up
        pytest.skip("this redis-server has no TLS")
    server.tls_port, server.ca = tls_port, cert
    yield server
    server.stop()


def test_rediss_to_a_server_without_tls_fails_fast_and_says_so(tls_server):
    started = time.monotonic()
    with pytest.raises(RedisURLError) as info:
        connect(f"rediss://:secret@127.0.0.1:{tls_server.port}/0")
    assert time.monotonic() - started < 4.5  # not the 30 s read timeout
    message = str(info.value)
    assert "did not answer TLS" in message and "use redis://" in message and "check the port" in message
    assert f"rediss://:****@127.0.0.1:{tls_server.port}/0" in message and "secret" not in message


def test_rediss_to_a_tls_server_works_and_a_bad_certificate_is_not_called_not_tls(tls_server):
    url = f"rediss://127.0.0.1:{tls_server.tls_port}/0"
    assert connect(f"{url}?ssl_ca_certs={tls_server.ca}").ping()
    with pytest.raises(RedisUnavailableError, match="certificate verify failed") as info:
        connect(url)  # the self-signed certificate is not in the system's store
    assert "did not answer TLS" not in str(info.value)

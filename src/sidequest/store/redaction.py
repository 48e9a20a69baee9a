"""Credentials never leave the process: the one way a Redis URL is shown (`mask_url`), and the
scrubbing of a text that may quote one of its secrets (`redact`), for every log line, page,
probe body, CLI line and error that names the Redis sidequest uses.

    mask_url("redis://app:s3cret@cache:6379/0?sentinel_password=x")
    # 'redis://app:****@cache:6379/0?sentinel_password=****'

What is masked, in every form redis-py reads (`redis://`, `rediss://`, `unix://`, and the
Sentinel and Cluster URLs with several hosts):
- the password of `user:password@` and `:password@` (the user is shown: an ACL user name is no
  secret, and it tells which user was refused);
- a lone `name@`, whole: redis-py takes it for a user name, but it is also where people put a
  password by mistake (`redis://s3cret@host`), so it is not shown;
- every query option whose name holds "password", "secret" or "token", in any case and percent-
  encoded (`password`, `sentinel_password`, `ssl_password`); `username` and `sentinel_username`
  are shown, as the user of `user:password@` is;
- a URL that cannot be split as redis-py splits it (an `@` left after the host: a password with an
  unencoded `/`, `?` or `#`) is shown as its scheme alone.
"""

from __future__ import annotations

from urllib.parse import unquote, unquote_plus

HIDDEN = "****"
SECRET_WORDS = ("password", "secret", "token")  # a query option whose name holds one is a secret
SHORTEST = 3  # a shorter secret is not scrubbed from free text (every "ab" in a line would go)


def mask_url(url: str) -> str:
    """`url` with every credential replaced by `****` (see module)."""
    scheme, netloc, path, query, fragment = _split(url)
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{hosts}" if colon else f"{HIDDEN}@{hosts}"
    items = [f"{key}={HIDDEN}" if _secret_option(key) else f"{key}{eq}{value}"
             for key, eq, value in (item.partition("=") for item in query.split("&")) if key or eq]
    tail = path + ("?" + "&".join(items) if query else "") + (f"#{HIDDEN}" if fragment else "")
    if "@" in tail + fragment:  # a password redis-py would split elsewhere: show nothing of it
        return f"{scheme}://{HIDDEN}" if scheme else HIDDEN
    return f"{scheme}://{netloc}{tail}" if scheme else netloc + tail


def secrets_in(url: str) -> set[str]:
    """The credentials `url` holds, as written and percent-decoded (see `redact`)."""
    _, netloc, _, query, _ = _split(url)
    found: set[str] = set()
    userinfo, at, _ = netloc.rpartition("@")
    _, colon, password = userinfo.partition(":")
    if at and colon:  # a lone `name@` is masked in a URL but not scrubbed from text: it is most
        found.add(password)  # often a user name ("default"), which other text holds too
    found.update(value for key, _, value in (item.partition("=") for item in query.split("&"))
                 if _secret_option(key))
    found |= {unquote(s) for s in found} | {unquote_plus(s) for s in found}
    return {s for s in found if len(s) >= SHORTEST}


def redact(text: str, *urls: str) -> str:
    """`text` (an error's message from redis-py, a log line) with each secret of `urls` replaced
    by `****`, and each of `urls` shown masked."""
    for url in urls:
        if url:
            text = text.replace(url, mask_url(url))
    for secret in sorted(set().union(*map(secrets_in, urls)), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def _split(url: str) -> tuple[str, str, str, str, str]:
    """scheme, netloc, path, query, fragment, split as `urllib.parse.urlsplit` (hence redis-py)
    splits them, but with several hosts allowed and no parsing of ports."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest, _, fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    if not sep and "@" not in netloc:  # a bare "host/path": the netloc rule needs "//"
        netloc, slash, path = "", "", rest
    return scheme, netloc, slash + path, query, fragment


def _secret_option(key: str) -> bool:
    name = unquote_plus(key).lower()
    return any(word in name for word in SECRET_WORDS)

"""What a redis-py error says, as one short line for a user: its text without the objects'
reprs that redis-py puts in some messages.

    reason(exc)   # "No master found for 'mymaster'", "Error 111 connecting to 127.0.0.1:6379. ..."

redis-py's messages are not an interface: from 8.2 a Sentinel's "No master found" embeds the
repr of each Sentinel's client, which now lists its whole pool and every connection setting
(1,200 characters on one line, more with several Sentinels). A line for a user says what
sidequest knows (the URL masked, host:port) and keeps of redis-py's text only what is not an
object's repr: the server's reply, the socket's error. No password reaches it either way:
redis-py's reprs (the place one could hide) are taken out whole.
"""

from __future__ import annotations

import re

LIMIT = 300  # characters of a reason: a server's reply can be long (a script's error, a big key name)
_REPR_START = re.compile(r"<[A-Za-z_]")  # `<redis.client.Redis(...)>`, `<object object at 0x...>`
_SPACES = re.compile(r"\s+")
_GAP = "\0"  # where a repr stood, until the separators around it are merged
_AROUND_REPR = re.compile(r"[\s:,-]*\0[\s:,-]*")


def reason(exc: BaseException) -> str:
    """`exc`'s text on one line, every `<...>` repr in it removed, at most LIMIT characters;
    its class name when nothing is left."""
    text = _AROUND_REPR.sub(": ", _without_reprs(str(exc)))  # "found : <repr> - why" -> "found: why"
    text = _SPACES.sub(" ", text).strip(" :-,")
    if len(text) > LIMIT:
        text = text[:LIMIT - 1].rstrip() + "…"
    return text or type(exc).__name__


def _without_reprs(text: str) -> str:
    """`text` less each `<Name...>`, nested ones included; an unclosed one runs to the end."""
    kept: list[str] = []
    at = 0
    while (found := _REPR_START.search(text, at)) is not None:
        kept.append(text[at:found.start()] + _GAP)
        depth, end = 0, len(text)
        for index in range(found.start(), len(text)):
            depth += {"<": 1, ">": -1}.get(text[index], 0)
            if depth == 0:
                end = index + 1
                break
        at = end
    kept.append(text[at:])
    return "".join(kept)

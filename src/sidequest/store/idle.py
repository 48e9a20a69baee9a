"""Connections the server may have closed while they sat idle: its `timeout`, a restart, CLIENT
KILL, a proxy's or a load balancer's idle cut. redis-py's pool looks at a connection before it
lends it and replaces one the server closed; the direct path (`direct`, `shared_connection`) keeps its own
connections, and does the same here, without a system call on a busy connection's path:

- `unfit`: a connection idle for `CHECK_IDLE` or longer is looked at before use (one poll); one
  that has anything to read (the server's close, a reset, bytes no call asked for) is replaced,
  and nothing was sent on it.
- `never_read`: a call that failed without a byte of its reply is sent once more, on a new
  connection, only when the failure proves Redis never read it (`NotSent`). Anything else may
  have run (Redis executed it, then the connection was lost before the reply) and is raised, as
  redis-py raises it with sidequest's settings (see `connection.connect`): a push or an INCR is
  never doubled.
"""

from __future__ import annotations

import fcntl
import select
import socket
import ssl
import struct
import termios
from typing import Any

import redis

# A connection idle this long is looked at before use; one used more recently is not: a poll on
# every call would cost more than the rest of the direct path's own work.
CHECK_IDLE = 0.01
TCP_CLOSE = 7  # Linux's tcp_states.h: the connection was reset (or fully closed)
REDIS_READ = 16 * 1024  # PROTO_IOBUF_LEN: what Redis reads from a client at once


class NotSent(redis.ConnectionError):
    """A call failed in a way that proves Redis never read it (see the module): it may be sent
    again, once, on a new connection."""


def unfit(sock: Any) -> bool:
    """Whether an idle connection's socket (or its descriptor) has anything to read: the
    server's close (FIN), a reset, or bytes no call asked for. Any of them: it must not carry
    a call."""
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # closed: no descriptor
        return True


def unfit_async(conn: Any, look: bool) -> bool:
    """`unfit` for a redis.asyncio connection: what its loop has read already (the close, bytes
    no call asked for) costs nothing to see; with `look` (idle for `CHECK_IDLE`), what the
    socket holds that the loop has not read yet (it ran a job's synchronous code meanwhile)."""
    reader, writer = conn._reader, conn._writer
    if reader is None or writer is None or reader.at_eof() or reader._buffer:
        return True
    return look and unfit(writer.transport.get_extra_info("socket"))


def never_read(sock: Any, sent: int, fin: bool) -> bool:
    """After the server closed a TCP connection before any byte of the reply (`fin`: its close
    came as a FIN, else as a reset): whether its TCP proves Redis never read the `sent` bytes of
    the call (Linux; False elsewhere).

    - A FIN carries the acknowledgement of all the server had received when it closed: if none
      of the call's bytes is acknowledged (all still in the send queue), the close came before
      they reached it, and bytes reaching a closed socket are refused, never read.
    - A reset (after a FIN or alone) with a call of one segment of at most what Redis reads at
      once: a segment that reached an open socket is read whole (and the close is a FIN) or not
      at all (and the close is a reset)."""
    if type(sock) is not socket.socket or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, AttributeError, struct.error):  # not Linux
        return False
    if len(info) < 20:
        return False
    if fin and queued == sent:
        return True
    mss = struct.unpack_from("I", info, 16)[0]  # tcpi_snd_mss
    return info[0] == TCP_CLOSE and 0 < sent <= min(mss, REDIS_READ)

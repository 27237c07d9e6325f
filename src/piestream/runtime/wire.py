"""Authenticated frames between the driver and a Spark job's tasks (the leased runner's wire),
and between the tasks themselves (its data plane, `runtime.data_plane`: one direction per
(sender slot, receiver slot) link, `link`).

A frame is ``length (u64 LE) | HMAC-SHA256 (32 bytes) | body``. The MAC covers the sender's
direction byte, the frame's sequence number on the connection and the body, under a per-job key
the driver draws (`new_key`, 32 random bytes) and hands the tasks in their Spark closures (as
Horovod on Spark does; the closure travels over Spark's RPC, encrypted when
``spark.network.crypto.enabled`` is on). So a process that does not hold the key can neither pose
as a task or as the driver, nor alter, reorder, replay or reflect a frame. A frame that fails
its check is dropped, logged and its connection closed (`FrameRejected`, a `ConnectionError`):
for the driver the epoch fails and is retried, for a task the lease ends.

The first frame of a connection is the task's hello, of a fixed size, so a stranger's length
prefix allocates nothing (`Channel.recv(exact=...)`). Bodies are never pickles: plans are
`epoch_plan.encode_plan`, elements and reports `runtime.exchange`'s encodings.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import secrets
import socket
import struct
from collections.abc import Callable

log = logging.getLogger(__name__)

KEY_BYTES = 32
LEN = struct.Struct("<Q")
SEQ = struct.Struct("<Q")
MAC_BYTES = hashlib.sha256().digest_size
#: the largest body a frame may announce (a bigger length is garbage, not a frame)
MAX_FRAME = 1 << 34

# whose frame it is: part of the MAC, so a frame sent back to its sender does not verify
FROM_DRIVER = b"D"
FROM_TASK = b"T"
_LINK = struct.Struct("<II")


def link(sender: int, receiver: int) -> bytes:
    """The direction of frames from task `sender` to task `receiver` on the data plane
    (`runtime.data_plane`): a frame of one link does not verify on any other, either way."""
    return b"L" + _LINK.pack(sender, receiver)


def new_key() -> bytes:
    """A fresh per-job key."""
    return secrets.token_bytes(KEY_BYTES)


class FrameRejected(ConnectionError):
    """A frame that is not authentic (or not a frame); its connection is closed."""


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("connection closed")
        got += k
    return buf


class Channel:
    """One side of an authenticated connection: frames out carry `sends`' MACs and sequence
    numbers, frames in must carry the peer's. Counts the bytes each way (the epoch stats)."""

    def __init__(
        self, sock: socket.socket, key: bytes, sends: bytes, peer: str = "", receives: bytes | None = None
    ) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a wire key has {KEY_BYTES} bytes")
        self.sock = sock
        self._key = key
        self._sends = sends
        if receives is None:  # the driver <-> task wire
            receives = FROM_TASK if sends == FROM_DRIVER else FROM_DRIVER
        self._receives = receives
        self._sent = 0
        self._received = 0
        self.peer = peer
        self.bytes_sent = 0
        self.bytes_received = 0

    def _mac(self, direction: bytes, seq: int, parts: tuple[bytes | bytearray | memoryview, ...]) -> bytes:
        h = hmac.new(self._key, direction + SEQ.pack(seq), hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.digest()

    def send(self, *parts: bytes | bytearray | memoryview) -> None:
        size = sum(len(p) for p in parts)
        mac = self._mac(self._sends, self._sent, parts)
        self._sent += 1
        self.sock.sendall(b"".join([LEN.pack(size), mac, *parts]))
        self.bytes_sent += LEN.size + MAC_BYTES + size

    def recv(
        self, exact: int | None = None, direction: Callable[[bytearray], bytes] | None = None
    ) -> bytearray:
        """The next frame's body, verified. With `exact`, a frame of any other size is refused
        before its body is read. With `direction`, the frame must verify under the direction
        it gives for the body (a data link's hello names its link), which the channel then
        receives and its reverse sends."""
        (size,) = LEN.unpack(recv_exact(self.sock, LEN.size))
        if (exact is not None and size != exact) or size > MAX_FRAME:
            self.reject(f"a frame of {size} bytes")
        mac = recv_exact(self.sock, MAC_BYTES)
        body = recv_exact(self.sock, size)
        receives = self._receives
        if direction is not None:
            try:
                receives = direction(body)
            except (ValueError, struct.error):
                self.reject(f"a hello of {size} bytes that names no link")
        if not hmac.compare_digest(mac, self._mac(receives, self._received, (body,))):
            self.reject(f"a frame of {size} bytes whose HMAC does not verify")
        self._received += 1
        if direction is not None:
            self._receives = receives
        self.bytes_received += LEN.size + MAC_BYTES + size
        return body

    def reject(self, what: str) -> None:
        """Drop the frame: log it, close the connection, raise `FrameRejected`."""
        log.warning("dropped %s from %s; closing the connection", what, self.peer or "a peer")
        self.close()
        raise FrameRejected(f"dropped {what} from {self.peer or 'a peer'}")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def fileno(self) -> int:  # select() on a channel
        return self.sock.fileno()

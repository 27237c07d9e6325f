"""The Hummock key layout (DESIGN "Formats", reference §3.1).

::

    full key = user key | (2^64 - 1 - epoch) u64 BE
    user key = table_id u32 BE | vnode u16 BE | memcomparable(pk)

Storing the *inverted* epoch makes plain byte order equal Hummock's order: user key ascending,
then newest version first. Scalar helpers build and split single keys; `epochs_of` reads the
epoch column of many full keys at once.
"""

from __future__ import annotations

import struct

import numpy as np

from piestream.common.epoch import MAX_EPOCH
from piestream.encoding.ragged import Ragged, word_view

TABLE_ID_LEN = 4
VNODE_LEN = 2
EPOCH_LEN = 8
TABLE_PREFIX_LEN = TABLE_ID_LEN + VNODE_LEN

_TABLE = struct.Struct(">I")
_TABLE_VNODE = struct.Struct(">IH")
_EPOCH = struct.Struct(">Q")


def user_key(table_id: int, vnode: int, pk: bytes) -> bytes:
    return _TABLE_VNODE.pack(table_id, vnode) + pk


def encode_epoch(epoch: int) -> bytes:
    """The 8-byte suffix of a full key: the inverted epoch, big-endian."""
    return _EPOCH.pack(MAX_EPOCH - epoch)


def full_key(ukey: bytes, epoch: int) -> bytes:
    return ukey + _EPOCH.pack(MAX_EPOCH - epoch)


def split_full_key(fkey: bytes) -> tuple[bytes, int]:
    """(user key, epoch) of a full key."""
    return fkey[:-EPOCH_LEN], MAX_EPOCH - _EPOCH.unpack_from(fkey, len(fkey) - EPOCH_LEN)[0]


def table_id_of(key: bytes) -> int:
    return int(_TABLE.unpack_from(key, 0)[0])


def next_key(prefix: bytes) -> bytes | None:
    """The smallest key strictly greater than every key starting with `prefix` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


# -- vectorized ---------------------------------------------------------------------------------


def epochs_of(fkeys: Ragged) -> np.ndarray:
    """The epoch (uint64) of every full key."""
    if fkeys.n == 0:
        return np.zeros(0, np.uint64)
    data = np.ascontiguousarray(fkeys.data)
    # one 8-byte big-endian word per key (not one index per byte)
    inv = word_view(data, ">u8")[fkeys.offsets[1:] - EPOCH_LEN]
    return np.uint64(MAX_EPOCH) - inv.astype(np.uint64)

"""The Hummock key layout (DESIGN "Formats", reference §3.1).

::

    full key = user key | (2^64 - 1 - epoch) u64 BE
    user key = table_id u32 BE | vnode u16 BE | memcomparable(pk)

Storing the *inverted* epoch makes plain byte order equal Hummock's order: user key ascending,
then newest version first. Scalar helpers build and split single keys; the vectorized ones work
on whole `Ragged` columns of pk encodings.
"""

from __future__ import annotations

import struct

import numpy as np

from piestream.common.epoch import MAX_EPOCH
from piestream.encoding.ragged import Ragged, be_matrix, concat_rows

TABLE_ID_LEN = 4
VNODE_LEN = 2
EPOCH_LEN = 8
TABLE_PREFIX_LEN = TABLE_ID_LEN + VNODE_LEN

_TABLE = struct.Struct(">I")
_TABLE_VNODE = struct.Struct(">IH")
_EPOCH = struct.Struct(">Q")


def table_prefix(table_id: int) -> bytes:
    """Every key of a table starts with this."""
    return _TABLE.pack(table_id)


def vnode_prefix(table_id: int, vnode: int) -> bytes:
    """Every key of one vnode of a table starts with this."""
    return _TABLE_VNODE.pack(table_id, vnode)


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


def split_user_key(ukey: bytes) -> tuple[int, int, bytes]:
    """(table_id, vnode, memcomparable pk) of a user key."""
    table_id, vnode = _TABLE_VNODE.unpack_from(ukey, 0)
    return table_id, vnode, ukey[TABLE_PREFIX_LEN:]


def table_id_of(key: bytes) -> int:
    return int(_TABLE.unpack_from(key, 0)[0])


def next_key(prefix: bytes) -> bytes | None:
    """The smallest key strictly greater than every key starting with `prefix` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


# -- vectorized ---------------------------------------------------------------------------------


def user_keys(table_id: int, vnodes: np.ndarray, pks: Ragged) -> Ragged:
    """User keys of many rows of one table."""
    n = pks.n
    head = np.empty((n, TABLE_PREFIX_LEN), np.uint8)
    head[:, :TABLE_ID_LEN] = np.frombuffer(_TABLE.pack(table_id), np.uint8)
    head[:, TABLE_ID_LEN:] = be_matrix(np.asarray(vnodes, np.uint16), ">u2")
    return concat_rows([Ragged.fixed(head), pks])


def full_keys(ukeys: Ragged, epoch: int) -> Ragged:
    """Full keys of many user keys written at one epoch."""
    suffix = np.frombuffer(encode_epoch(epoch), np.uint8)
    return concat_rows([ukeys, Ragged.fixed(np.broadcast_to(suffix, (ukeys.n, EPOCH_LEN)))])


def epochs_of(fkeys: Ragged) -> np.ndarray:
    """The epoch (uint64) of every full key."""
    idx = (fkeys.offsets[1:] - EPOCH_LEN)[:, None] + np.arange(EPOCH_LEN, dtype=np.int64)
    inv = fkeys.data[idx].copy().view(">u8")[:, 0]
    return np.uint64(MAX_EPOCH) - inv.astype(np.uint64)


def user_key_part(fkeys: Ragged) -> Ragged:
    """The user keys of full keys (a view: same data, shorter strings)."""
    return fkeys.gather_by(fkeys.offsets[:-1], fkeys.lengths - EPOCH_LEN)

"""Layout of generated row ids (`_row_id`, type SERIAL), Snowflake-like (reference §3.3).

``0 | 41-bit milliseconds since 2021-04-01 | vnode bits | sequence bits``: the vnode part makes
ids from different actors disjoint, the timestamp part makes them unique across restarts, and
the sequence counts rows within one millisecond of one vnode.
"""

from __future__ import annotations

import numpy as np

ROW_ID_TIMESTAMP_BITS = 41
VNODE_AND_SEQUENCE_BITS = 22


def vnode_bits(vnode_count: int) -> int:
    """Bits reserved for the vnode: 10 up to 1024 vnodes, else log2 of the next power of two."""
    if vnode_count <= 1024:
        return 10
    return int(vnode_count - 1).bit_length()


def sequence_bits(vnode_count: int) -> int:
    return VNODE_AND_SEQUENCE_BITS - vnode_bits(vnode_count)


def make_row_ids(ms: int, vnodes: np.ndarray, sequences: np.ndarray, vnode_count: int) -> np.ndarray:
    """Row ids for rows with given vnodes and per-(ms, vnode) sequence numbers (vectorized)."""
    sb = sequence_bits(vnode_count)
    if len(sequences) and int(np.max(sequences)) >= (1 << sb):
        raise ValueError("row id sequence overflow within one millisecond")
    return (
        (np.int64(ms) << np.int64(VNODE_AND_SEQUENCE_BITS))
        | (np.asarray(vnodes, np.int64) << np.int64(sb))
        | np.asarray(sequences, np.int64)
    )


def vnode_of_row_ids(row_ids: np.ndarray, vnode_count: int) -> np.ndarray:
    """The vnode a row id was generated for."""
    sb = sequence_bits(vnode_count)
    vb = vnode_bits(vnode_count)
    return ((np.asarray(row_ids, np.int64) >> np.int64(sb)) & np.int64((1 << vb) - 1)) % vnode_count


def timestamp_of_row_id(row_id: int) -> int:
    """Milliseconds since 2021-04-01 at which `row_id` was generated."""
    return row_id >> VNODE_AND_SEQUENCE_BITS

"""The AsOf match kernel: for every left row, the right row of the same join key nearest by the
inequality column (`left.t <op> right.t`), vectorized over whole columns.

Shared by the streaming AsOfJoin executor (a chunk against the state of its keys) and the batch
AsOfJoin (both inputs whole). Keys and the inequality column are compared through the
memcomparable encoding, so every type joins and orders exactly as SQL does. One composite
integer per row (key code, rank of t) makes the search a single `np.searchsorted`.

Ties (several right rows with the same key and t) are broken by the right rows' order in the
input: among equals the last one for ``>=`` / ``>`` (the nearest from below is the greatest by
(t, position)), the first one for ``<=`` / ``<``. The streaming executor reads the right side
from its state table in pk order, so its choice is the right row with the greatest (resp.
smallest) stream key among the tied ones, deterministic across epochs and restarts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable
from piestream.stream.executors.join.kernels import as_type


def _valid(cols: Sequence[pa.Array], n: int) -> np.ndarray:
    ok = np.ones(n, np.bool_)
    for c in cols:
        if c.null_count:
            ok &= np.asarray(c.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    return ok


def _codes(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    enc = pc.dictionary_encode(col)
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64), enc.dictionary


def asof_match(
    left_keys: Sequence[pa.Array],
    right_keys: Sequence[pa.Array],
    key_types: Sequence[DataType],
    left_t: pa.Array,
    right_t: pa.Array,
    t_type: DataType,
    op: str,
) -> np.ndarray:
    """Index of each left row's matching right row, -1 for none (a NULL key or NULL t on either
    side matches nothing)."""
    nl, nr = len(left_t), len(right_t)
    out = np.full(nl, -1, np.int64)
    if not nl or not nr:
        return out
    keys = [
        pa.concat_arrays([as_type(a, t.arrow), as_type(b, t.arrow)])
        for a, b, t in zip(left_keys, right_keys, key_types, strict=True)
    ]
    tt = pa.concat_arrays([as_type(left_t, t_type.arrow), as_type(right_t, t_type.arrow)])
    ok = _valid([*keys, tt], nl + nr)
    kcode, _ = _codes(memcomparable.encode_columns(keys, list(key_types), [ASC] * len(keys)).to_arrow())
    tcode, tdict = _codes(memcomparable.encode_columns([tt], [t_type], [ASC]).to_arrow())
    # rank of each distinct t in SQL order: the encoded bytes sort as the values do
    rank_of = np.empty(len(tdict), np.int64)
    rank_of[np.asarray(pc.sort_indices(tdict).to_numpy(), np.int64)] = np.arange(len(tdict))
    comp = kcode * (len(tdict) + 1) + rank_of[tcode]
    rows = np.flatnonzero(ok[nl:])
    if not len(rows):
        return out
    rows = rows[np.argsort(comp[nl:][rows], kind="stable")]  # stable: ties keep input order
    rcomp = comp[nl:][rows]
    rkey = kcode[nl:][rows]
    lcomp, lkey = comp[:nl], kcode[:nl]
    if op in (">=", ">"):  # the greatest right t at or below (strictly below) the left t
        pos = np.searchsorted(rcomp, lcomp, side="right" if op == ">=" else "left") - 1
        hit = pos >= 0
    elif op in ("<=", "<"):  # the smallest right t at or above (strictly above) the left t
        pos = np.searchsorted(rcomp, lcomp, side="left" if op == "<=" else "right")
        hit = pos < len(rows)
    else:
        raise ValueError(f"not an AsOf inequality: {op!r}")
    pos = np.where(hit, pos, 0)
    hit &= ok[:nl] & (rkey[pos] == lkey)
    out[hit] = rows[pos[hit]]
    return out

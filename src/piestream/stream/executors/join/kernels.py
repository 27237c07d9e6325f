"""Vectorized building blocks of the hash join: key grouping, candidate pairs, degree walks.

A chunk's rows are grouped by join key; each group is paired with the other side's rows of the
same key (all keys of a chunk read with one prefix scan, the keys as columns). Pairs are plain
index arrays (row of the chunk, row of the other side), ordered by chunk row, so the chunk's
order is kept wherever it matters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable


def matchable_mask(key_columns: Sequence[pa.Array], null_safe: Sequence[bool], n: int) -> np.ndarray:
    """Rows that can match at all: a NULL in a plain (not null-safe) key column never equals."""
    ok = np.ones(n, np.bool_)
    for col, safe in zip(key_columns, null_safe, strict=True):
        if not safe and col.null_count:
            ok &= col.is_valid().to_numpy(zero_copy_only=False)
    return ok


def group_by_key(
    key_columns: Sequence[pa.Array], key_types: Sequence[DataType], rows: np.ndarray, n: int
) -> tuple[np.ndarray, list[pa.Array], int]:
    """(group id of each of the `n` rows, -1 outside `rows`; the join key columns with one row
    per group, for the prefix scan; the number of groups). Groups are numbered in order of first
    appearance."""
    gid = np.full(n, -1, np.int64)
    if not len(rows):
        return gid, [c.slice(0, 0) for c in key_columns], 0
    if not key_columns:  # no equi keys: every row shares the one (empty) key
        gid[rows] = 0
        return gid, [], 1
    take = pa.array(rows, pa.int64())
    cols = [c if len(rows) == n else c.take(take) for c in key_columns]
    encoded = memcomparable.encode_columns(cols, list(key_types), [ASC] * len(cols)).to_arrow()
    codes = encoded.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    gid[rows] = codes
    _, first = np.unique(codes, return_index=True)
    firsts = pa.array(first, pa.int64())
    return gid, [c.take(firsts) for c in cols], len(first)


def pair_up(gid: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (row i, other row j) with j in i's group's range [starts[g], starts[g] + counts[g]);
    ordered by i, then j. Rows with gid -1 get no pairs."""
    has = gid >= 0
    g = np.where(has, gid, 0)
    cnt = np.where(has, counts[g] if len(counts) else 0, 0).astype(np.int64)
    total = int(cnt.sum())
    pi = np.repeat(np.arange(len(gid), dtype=np.int64), cnt)
    if not total:
        return pi, np.zeros(0, np.int64)
    first_pair = np.cumsum(cnt) - cnt
    within = np.arange(total, dtype=np.int64) - np.repeat(first_pair, cnt)
    pj = np.repeat(np.where(has, starts[g] if len(starts) else 0, 0), cnt) + within
    return pi, pj


def degree_walk(pj: np.ndarray, delta: np.ndarray, deg0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Degrees of the other-side row of each pair just before and just after the pair's change,
    applying `delta` (+1 / -1 / 0 per pair) in pair order: a running sum per other-side row."""
    if not len(pj):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(pj, kind="stable")  # pair order kept within each other-side row
    d = delta[order]
    js = pj[order]
    csum = np.cumsum(d)
    seg_start = np.ones(len(js), np.bool_)
    seg_start[1:] = js[1:] != js[:-1]
    base = np.maximum.accumulate(np.where(seg_start, np.arange(len(js)), 0))
    after_sorted = deg0[js] + csum - (csum[base] - d[base])
    after = np.empty_like(after_sorted)
    after[order] = after_sorted
    return after - delta, after


def take_or_null(col: pa.Array, idx: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """`col` at `idx`, NULL where idx < 0, as exactly `arrow_type`."""
    valid = idx >= 0
    if valid.all():
        out = col.take(pa.array(idx, pa.int64()))
    elif not valid.any():
        return pa.nulls(len(idx), arrow_type)
    else:
        out = col.take(pa.array(idx, pa.int64(), mask=~valid))
    return out if out.type == arrow_type else out.cast(arrow_type)


def as_type(col: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    return col if col.type == arrow_type else col.cast(arrow_type)

"""Struct field access, ROW(...), arrays (ARRAY[...], subscripts, length, position, append,
concatenation, array_to_string), all on Arrow's list / struct layouts with numpy offsets."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.types import DataType, TypeKind
from piestream.expr.expr import FuncCall
from piestream.expr.functions.comparison import compare, is_distinct
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, constant_arg, full_valid, valid_mask


def _offsets(x: pa.Array) -> np.ndarray:
    """int64 offsets of a list array into `x.values`."""
    return np.asarray(x.offsets.to_numpy(zero_copy_only=False), np.int64)


def list_element(x: pa.Array, index0: np.ndarray) -> pa.Array:
    """Element `index0` (0-based, per row) of each list; NULL when out of range or the list is NULL."""
    off = _offsets(x)
    lengths = off[1:] - off[:-1]
    valid = full_valid(valid_mask(x), len(x)) & (index0 >= 0) & (index0 < lengths)
    pos = np.where(valid, off[:-1] + index0, 0)
    if len(x.values) == 0:
        return pa.nulls(len(x), x.type.value_type)
    taken = x.values.take(pa.array(pos, pa.int64()))
    return pc.if_else(pa.array(valid), taken, pa.nulls(len(x), taken.type))


@register("field")
def _field(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """struct.field; args = [struct, literal field name]."""
    name = constant_arg(call, 1)
    t = call.args[0].return_type
    idx = [f.name for f in t.fields].index(name)
    return pc.struct_field(a[0], [idx])


@register("array_access")
def _array_access(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """arr[i], 1-based; NULL if i is NULL or out of range."""
    idx_valid = valid_mask(a[1])
    idx = a[1].cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False) - 1
    if idx_valid is not None:
        idx = np.where(idx_valid, idx, -1)
    return list_element(a[0], idx)


@register("array")
def _array(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """ARRAY[e1, ..., ek]: row i is [e1[i], ..., ek[i]] (NULL elements kept)."""
    k = len(a)
    t = call.return_type.arrow
    if k == 0:
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, np.int32)), pa.nulls(0, t.value_type), type=t
        )
    flat = pa.concat_arrays([x.cast(t.value_type) for x in a])
    order = (np.arange(n)[:, None] + np.arange(k)[None, :] * n).reshape(-1)
    values = flat.take(pa.array(order, pa.int64()))
    offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values, type=t)


@register("row")
def _row(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    t = call.return_type.arrow
    return pa.StructArray.from_arrays([x.cast(t.field(i).type) for i, x in enumerate(a)], fields=list(t))


@register("cardinality")
def _cardinality(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """Number of elements (of the innermost level for arrays of arrays, as a multi-dimensional
    PostgreSQL array has)."""
    x = a[0]
    lengths = pc.list_value_length(x).cast(pa.int64())
    t = call.args[0].return_type
    while t.elem is not None and t.elem.kind is TypeKind.LIST:
        inner = pc.list_value_length(x.values).fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False)
        csum = np.concatenate([[0], np.cumsum(inner)])
        off = _offsets(x)
        sums = csum[off[1:]] - csum[off[:-1]]
        lengths = pc.if_else(pc.is_valid(x), pa.array(sums), pa.nulls(len(x), pa.int64()))
        x, t = x.flatten(), t.elem
    return lengths.cast(pa.int32())


@register("array_length")
def _array_length(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """array_length(arr[, dim]): NULL for an empty array or a dimension other than 1."""
    lengths = pc.list_value_length(a[0]).cast(pa.int32())
    out = pc.if_else(pc.equal(lengths, 0), pa.nulls(n, pa.int32()), lengths)
    if len(a) > 1:
        out = pc.if_else(pc.equal(a[1].cast(pa.int32()), 1), out, pa.nulls(n, pa.int32()))
    return out


@register("array_position")
def _array_position(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """1-based index of the first element IS NOT DISTINCT FROM the value (NULL finds NULL)."""
    x, needle = a[0], a[1]
    start = (
        a[2].cast(pa.int64()).fill_null(1).to_numpy(zero_copy_only=False)
        if len(a) > 2
        else np.ones(n, np.int64)
    )
    off = _offsets(x)
    lengths = off[1:] - off[:-1]
    parent = np.repeat(np.arange(n), lengths)
    base = off[0]
    values = x.values.slice(base, off[-1] - base) if len(x.values) else x.values
    elem_t = call.args[0].return_type.elem
    assert elem_t is not None
    repeated = needle.take(pa.array(parent, pa.int64()))
    local = np.arange(len(parent)) - (off[:-1] - base)[parent]
    hit = ~is_distinct(elem_t, values, repeated) & (local + 1 >= start[parent])
    big = np.iinfo(np.int64).max
    cand = np.where(hit, local, big)
    first = np.full(n, big)
    np.minimum.at(first, parent, cand)
    found = first != big
    valid = full_valid(valid_mask(x), n) & found
    return pa.array(np.where(valid, first + 1, 0).astype(np.int32), mask=~valid)


@register("op_any", "op_all")
def _quantified(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """x op ANY / ALL (array), per row over the flattened elements: ANY is true on a true
    comparison, else NULL if one was NULL, else false (an empty array: false); ALL is false on a
    false one, else NULL if one was NULL, else true (empty: true); a NULL array gives NULL."""
    x, arr = a[0], a[1]
    op = constant_arg(call, 2)
    t = call.args[0].return_type
    off = _offsets(arr)
    valid = full_valid(valid_mask(arr), n)
    lengths = np.where(valid, off[1:] - off[:-1], 0)
    parent = np.repeat(np.arange(n), lengths)
    starts = np.repeat(off[:-1], lengths)
    local = np.arange(len(parent)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    elems = arr.values.take(pa.array(starts + local, pa.int64())) if len(parent) else arr.values.slice(0, 0)
    cmp = compare(op, t, x.take(pa.array(parent, pa.int64())), elems) if len(parent) else None
    if cmp is None:
        hits = unknown = np.zeros(n, np.int64)
    else:
        known = full_valid(valid_mask(cmp), len(parent))
        truth = np.asarray(cmp.fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
        decisive = truth if call.name == "op_any" else ~truth & known
        hits = np.bincount(parent[decisive & known], minlength=n)
        unknown = np.bincount(parent[~known], minlength=n)
    found = hits > 0
    result = found if call.name == "op_any" else ~found
    out_valid = valid & (found | (unknown == 0))
    return pa.array(result, pa.bool_(), mask=~out_valid)


def concat_lists(parts: list[pa.Array], t: pa.DataType) -> pa.Array:
    """Row-wise concatenation of lists (a NULL list counts as empty; NULL only if all are)."""
    n = len(parts[0])
    offs = [_offsets(p) for p in parts]
    lens = np.stack(
        [(o[1:] - o[:-1]) * full_valid(valid_mask(p), n) for o, p in zip(offs, parts, strict=True)]
    )
    total = lens.sum(axis=0)
    out_off = np.concatenate([[0], np.cumsum(total)])
    base = 0
    gathers = []
    flat_values = []
    for i, p in enumerate(parts):
        vals = p.values
        flat_values.append(vals.cast(t.value_type) if vals.type != t.value_type else vals)
        # index of each output element that comes from part i
        starts = out_off[:-1] + lens[:i].sum(axis=0)
        row = np.repeat(np.arange(n), lens[i])
        within = np.arange(len(row)) - np.repeat(np.cumsum(lens[i]) - lens[i], lens[i])
        gathers.append((starts[row] + within, offs[i][:-1][row] + within + base))
        base += len(vals)
    dest = np.concatenate([g[0] for g in gathers]) if gathers else np.zeros(0, np.int64)
    src = np.concatenate([g[1] for g in gathers]) if gathers else np.zeros(0, np.int64)
    order = np.empty(len(dest), np.int64)
    order[dest] = src
    values = pa.concat_arrays(flat_values).take(pa.array(order, pa.int64()))
    all_null = np.ones(n, np.bool_)
    for p in parts:
        all_null &= ~full_valid(valid_mask(p), n)
    mask = pa.array(all_null) if all_null.any() else None
    return pa.ListArray.from_arrays(pa.array(out_off, pa.int32()), values, type=t, mask=mask)


def _singletons(x: pa.Array, t: pa.DataType) -> pa.Array:
    """Each value as a one-element list (NULL values become [NULL])."""
    n = len(x)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), x.cast(t.value_type), type=t)


@register("array_cat")
def _array_cat(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return concat_lists(a, call.return_type.arrow)


@register("array_append")
def _array_append(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    t = call.return_type.arrow
    return concat_lists([a[0], _singletons(a[1], t)], t)


@register("array_prepend")
def _array_prepend(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    t = call.return_type.arrow
    return concat_lists([_singletons(a[0], t), a[1]], t)


@register("array_to_string")
def _array_to_string(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """Elements as text joined by the delimiter; NULL elements skipped or replaced."""
    from piestream.expr.functions.cast import to_text

    x = a[0]
    elem_t: DataType | None = call.args[0].return_type.elem
    assert elem_t is not None
    off = _offsets(x)
    texts = to_text(x.values, elem_t)
    null_text = constant_arg(call, 2) if len(a) > 2 else None
    if null_text is NOT_CONSTANT:
        null_text = None
    if null_text is not None:
        texts = texts.fill_null(null_text)
    keep = full_valid(valid_mask(texts), len(texts))
    csum = np.concatenate([[0], np.cumsum(keep)])
    new_off = (csum[off] - csum[off[0]]).astype(np.int32)
    kept = texts.filter(pa.array(keep)).slice(int(csum[off[0]]), int(csum[off[-1]] - csum[off[0]]))
    lists = pa.ListArray.from_arrays(pa.array(new_off), kept)
    joined = pc.binary_join(lists, a[1])
    return pc.if_else(pc.is_valid(x), joined, pa.nulls(n, pa.string()))

"""Vectorized decoding of memcomparable keys into Arrow columns (reference §1).

All keys are walked at once with a per-row cursor array: each column reads its tag byte at every
cursor, then its value (big-endian words through `word_view`, escaped strings one group index
per round), and moves the cursors. The checks match the scalar decoder in `memcmp_scalar`:
anything an encoder could not have produced raises DataCorruption.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common.errors import DataCorruption, InvalidInput
from piestream.common.interval import USECS_PER_DAY
from piestream.common.order import OrderType
from piestream.common.types import DataType, TypeKind
from piestream.encoding.memcmp_decimal import decode_decimal
from piestream.encoding.memcmp_scalar import (
    CANONICAL_NAN_F32,
    CANONICAL_NAN_F64,
    FIXED_WIDTH,
    GROUP_CONTINUES,
    NANOS_PER_SEC,
    SECS_PER_DAY,
    UNIX_EPOCH_DAYS_FROM_CE,
    USECS_PER_MONTH,
    USECS_PER_SEC,
    check_numeric_domain,
    datum_tags,
    flip_mask,
    interval_from_total,
)
from piestream.encoding.memcmp_vec import COMPOSITE_TAGS, INTERVAL_DTYPE, KEEP_BYTES, STRING_KINDS
from piestream.encoding.ragged import Ragged, word_view

_I32_MIN = -(2**31)


def _need(cur: np.ndarray, n: int, end: np.ndarray, what: str) -> None:
    if len(cur) and bool((cur + n > end).any()):
        raise DataCorruption(f"truncated {what} key")


def _fixed_array(t: DataType, values: np.ndarray) -> pa.Array:
    """An Arrow array of `t`'s fixed-width layout over numpy values (no nulls)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(t.arrow, len(values), [None, pa.py_buffer(values)])


def _read_words(data: np.ndarray, cur: np.ndarray, dtype: str, x: int) -> np.ndarray:
    """The big-endian words at every cursor as native unsigned ints (un-inverted when x)."""
    size = np.dtype(dtype).itemsize
    v = word_view(data, dtype)[cur].astype(f"<u{size}")
    return ~v if x else v


def _unflip_sign(u: np.ndarray, width: int) -> np.ndarray:
    """Inverse of `_sign_flipped`: unsigned with flipped sign bit -> signed native ints."""
    return (u ^ np.array(1 << (8 * width - 1), dtype=f"<u{width}")).view(f"<i{width}")


def _check_nanos(nanos: np.ndarray, what: str) -> np.ndarray:
    if len(nanos) and bool(((nanos >= NANOS_PER_SEC) | (nanos % 1000 != 0)).any()):
        raise DataCorruption(f"invalid {what} key nanoseconds")
    return (nanos // 1000).astype(np.int64)


def _decode_float(key: np.ndarray, t: DataType, width: int) -> pa.Array:
    ut = key.dtype.type
    sign = ut(1 << (8 * width - 1))
    bits = np.where(key & sign, key ^ sign, ~key).astype(key.dtype)
    mant = 23 if width == 4 else 52
    exp_all = ut(((1 << (8 * width - 1 - mant)) - 1) << mant)
    nan = ((bits & exp_all) == exp_all) & ((bits & ut((1 << mant) - 1)) != 0)
    canonical = ut(CANONICAL_NAN_F32 if width == 4 else CANONICAL_NAN_F64)
    if bool(((bits == sign) | (nan & (bits != canonical))).any()):
        raise DataCorruption(f"non-canonical {t.kind.value} key")
    return _fixed_array(t, bits)


def _decode_interval(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Totals (hi, lo) -> the justified (months, days, nanos); int64 fast path, exact fallback."""
    out = np.zeros(len(hi), INTERVAL_DTYPE)
    total = lo.view(np.int64)
    fits = np.where(total >= 0, hi == 0, hi == -1) & (total != np.iinfo(np.int64).min)
    neg = total < 0
    mag = np.abs(np.where(fits, total, 0))
    months, rest = np.divmod(mag, USECS_PER_MONTH)
    days, usecs = np.divmod(rest, USECS_PER_DAY)
    sign = np.where(neg, -1, 1)
    out["months"] = sign * months
    out["days"] = sign * days
    out["nanos"] = sign * usecs * 1000
    # rows beyond int64 (huge months/days): exact Python ints, one per row
    for i in np.flatnonzero(~fits).tolist():
        iv = interval_from_total((int(hi[i]) << 64) | int(lo[i]))
        out[i] = (iv.months, iv.days, iv.usecs * 1000)
    return out


def _decode_fixed(data: np.ndarray, cur: np.ndarray, end: np.ndarray, t: DataType, x: int) -> pa.Array:
    k = t.kind
    w = FIXED_WIDTH[k]
    _need(cur, w, end, k.value)
    if k is TypeKind.BOOLEAN:
        b = _read_words(data, cur, "u1", x)
        if bool((b > 1).any()):
            raise DataCorruption("invalid boolean key byte")
        bits = np.packbits(b.view(np.bool_), bitorder="little")
        return pa.Array.from_buffers(t.arrow, len(b), [None, pa.py_buffer(bits)])
    if k in (TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.SERIAL, TypeKind.TIMESTAMPTZ):
        return _fixed_array(t, _unflip_sign(_read_words(data, cur, f">u{w}", x), w))
    if k in (TypeKind.REAL, TypeKind.DOUBLE):
        return _decode_float(_read_words(data, cur, f">u{w}", x), t, w)
    if k is TypeKind.DATE:
        days = _unflip_sign(_read_words(data, cur, ">u4", x), 4).astype(np.int64) - UNIX_EPOCH_DAYS_FROM_CE
        if len(days) and int(days.min()) < _I32_MIN:
            raise DataCorruption("date key out of range")
        return _fixed_array(t, days.astype(np.int32))
    if k is TypeKind.TIME:
        secs = _read_words(data, cur, ">u4", x).astype(np.int64)
        us = _check_nanos(_read_words(data, cur + 4, ">u4", x), "time")
        if len(secs) and int(secs.max()) >= SECS_PER_DAY:
            raise DataCorruption("time key out of range")
        return _fixed_array(t, secs * USECS_PER_SEC + us)
    if k is TypeKind.TIMESTAMP:
        secs = _unflip_sign(_read_words(data, cur, ">u8", x), 8)
        us = _check_nanos(_read_words(data, cur + 8, ">u4", x), "timestamp")
        # secs * 1e6 + us must fit int64
        lo_s, lo_us = divmod(np.iinfo(np.int64).min, USECS_PER_SEC)
        hi_s, hi_us = divmod(np.iinfo(np.int64).max, USECS_PER_SEC)
        bad = (secs < lo_s) | (secs > hi_s)
        bad |= ((secs == lo_s) & (us < lo_us)) | ((secs == hi_s) & (us > hi_us))
        if bool(bad.any()):
            raise DataCorruption("timestamp key out of range")
        return _fixed_array(t, secs * USECS_PER_SEC + us)
    if k is TypeKind.INTERVAL:
        hi = _unflip_sign(_read_words(data, cur, ">u8", x), 8)
        lo = _read_words(data, cur + 8, ">u8", x)
        return _fixed_array(t, _decode_interval(hi, lo))
    raise AssertionError(f"not a fixed-width kind: {k}")


#: Word c: 8 bool bytes, the first c True (which bytes of a group holding c bytes are real).
_KEEP_BOOLS = np.array([int.from_bytes(b"\x01" * c + b"\x00" * (8 - c), "little") for c in range(9)], "<u8")


def _unescape(
    data: np.ndarray, cur: np.ndarray, end: np.ndarray, x: int, what: str
) -> tuple[Ragged, np.ndarray]:
    """Decode escaped strings at every cursor: (the strings, cursors after them).

    Round g reads group g (an 8-byte word and its marker) of every string still going on, so the
    loop runs once per group index, not per row. The words are then laid out string by string and
    the padding bytes of each string's last group dropped.
    """
    m = len(cur)
    _need(cur, 1, end, what)
    first = data[cur] ^ np.uint8(x)
    if bool((first > 1).any()):
        raise DataCorruption(f"invalid {what} key header byte")
    groups = np.zeros(m, np.int64)
    last = np.zeros(m, np.int64)
    all_nonempty = bool(first.all())
    rows = np.arange(m, dtype=np.int64) if all_nonempty else np.flatnonzero(first)
    pos = cur[rows] + 1
    words_in = word_view(data, "<u8")
    rounds: list[tuple[np.ndarray, np.ndarray]] = []
    while len(rows):
        # groups past a key's end are caught by the `after <= end` check below; here only
        # reads past the buffer are (a corrupt marker chain can run into the next key)
        if int(pos.max()) + 9 > len(data):
            raise DataCorruption(f"truncated {what} key")
        marker = data[pos + 8] ^ np.uint8(x)
        if bool(((marker == 0) | (marker > GROUP_CONTINUES)).any()):
            raise DataCorruption(f"invalid {what} key group marker")
        rounds.append((rows, words_in[pos]))
        more = marker == GROUP_CONTINUES
        if not more.all():
            done = ~more
            finished = rows[done]
            groups[finished] = len(rounds)
            last[finished] = marker[done]
            rows, pos = rows[more], pos[more]
        pos = pos + 9
    after = cur + 1 + 9 * groups
    if bool((after > end).any()):
        raise DataCorruption(f"truncated {what} key")
    lens = np.where(groups > 0, 8 * groups - 8 + last, 0)
    offsets = np.zeros(m + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(groups.sum())
    if total == 0:
        return Ragged(offsets, np.zeros(0, np.uint8)), after
    first_group = np.cumsum(groups) - groups
    words = np.empty(total, "<u8")
    for g, (rows_g, words_g) in enumerate(rounds):
        words[first_group[rows_g] + g] = words_g
    if x:
        np.invert(words, out=words)
    ended = slice(None) if all_nonempty else np.flatnonzero(groups)
    last_group, count = (first_group + groups - 1)[ended], last[ended]
    if bool((words[last_group] & ~KEEP_BYTES[count]).any()):
        raise DataCorruption(f"invalid {what} key padding")
    keep = np.full(total, _KEEP_BOOLS[8])
    keep[last_group] = _KEEP_BOOLS[count]
    return Ragged(offsets, words.view(np.uint8)[keep.view(np.bool_)]), after


def _binary_array(t: DataType, r: Ragged) -> pa.Array:
    if int(r.offsets[-1]) >= 2**31:
        raise DataCorruption("decoded strings exceed 2 GiB")
    arr = pa.Array.from_buffers(
        t.arrow, r.n, [None, pa.py_buffer(r.offsets.astype(np.int32)), pa.py_buffer(r.data)]
    )
    if t.kind is not TypeKind.BYTEA:
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            raise DataCorruption(f"invalid UTF-8 in {t.kind.value} key") from None
    return arr


def _decode_numeric(
    data: np.ndarray, cur: np.ndarray, end: np.ndarray, x: int
) -> tuple[pa.Array, np.ndarray]:
    # A per-row Python loop: base-100 digits to a 128-bit unscaled integer needs big ints.
    buf = memoryview(data.data)
    values: list[Decimal | None] = []  # the key's normalized value (keys ignore display scales)
    after = cur.copy()
    for i, (p, e) in enumerate(zip(cur.tolist(), end.tolist(), strict=True)):
        d, after[i] = decode_decimal(buf, p, x, e)
        values.append(check_numeric_domain(d) if d.is_finite() else d)
    return nm.to_arrow(values), after


def _decode_list(
    data: np.ndarray, cur: np.ndarray, end: np.ndarray, t: DataType, x: int
) -> tuple[pa.Array, np.ndarray]:
    """Unescape each list's bytes, then decode element k of every list in round k."""
    assert t.elem is not None
    inner, after = _unescape(data, cur, end, x, "list")
    m = len(cur)
    icur, iend = inner.offsets[:-1].copy(), inner.offsets[1:]
    counts = np.zeros(m, np.int64)
    chunks: list[pa.Array] = []
    owners: list[np.ndarray] = []
    ranks: list[np.ndarray] = []
    active = np.flatnonzero(icur < iend)
    while len(active):
        arr, icur[active] = _decode_datum(
            inner.data, icur[active], iend[active], t.elem, tags=COMPOSITE_TAGS, x=0
        )
        chunks.append(arr)
        owners.append(active)
        ranks.append(counts[active].copy())
        counts[active] += 1
        active = active[icur[active] < iend[active]]
    offsets = np.zeros(m + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    if chunks:
        dest = offsets[np.concatenate(owners)] + np.concatenate(ranks)
        perm = np.empty(len(dest), np.int64)
        perm[dest] = np.arange(len(dest))
        values = pa.concat_arrays(chunks).take(pa.array(perm))
    else:
        values = pa.nulls(0, t.elem.arrow)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, type=t.arrow), after


def _decode_value(
    data: np.ndarray, cur: np.ndarray, end: np.ndarray, t: DataType, x: int
) -> tuple[pa.Array, np.ndarray]:
    """Decode one non-NULL value at every cursor: (Arrow array without nulls, cursors after)."""
    k = t.kind
    if k in FIXED_WIDTH:
        return _decode_fixed(data, cur, end, t, x), cur + FIXED_WIDTH[k]
    if k in STRING_KINDS:
        r, after = _unescape(data, cur, end, x, k.value)
        return _binary_array(t, r), after
    if k is TypeKind.NUMERIC:
        return _decode_numeric(data, cur, end, x)
    if k is TypeKind.STRUCT:
        tags = (COMPOSITE_TAGS[0] ^ x, COMPOSITE_TAGS[1] ^ x)
        children = []
        for f in t.fields:
            child, cur = _decode_datum(data, cur, end, f.data_type, tags=tags, x=x)
            children.append(child)
        fields = [pa.field(f.name, f.data_type.arrow) for f in t.fields]
        return pa.StructArray.from_arrays(children, fields=fields), cur
    if k is TypeKind.LIST:
        return _decode_list(data, cur, end, t, x)
    raise AssertionError(f"unknown kind {k}")


def _decode_datum(
    data: np.ndarray, cur: np.ndarray, end: np.ndarray, t: DataType, *, tags: tuple[int, int], x: int
) -> tuple[pa.Array, np.ndarray]:
    """Decode tag + value at every cursor; `tags` = (non-null, NULL) as written."""
    _need(cur, 1, end, "NULL tag of a")
    tag = data[cur]
    valid = tag == tags[0]
    if not bool((valid | (tag == tags[1])).all()):
        raise DataCorruption("invalid NULL tag in key")
    cur = cur + 1
    if valid.all():
        return _decode_value(data, cur, end, t, x)
    rows = np.flatnonzero(valid)
    sub, cur[rows] = _decode_value(data, cur[rows], end[rows], t, x)
    index = pa.array(np.cumsum(valid) - 1, mask=~valid)
    return (sub.take(index) if len(sub) else pa.nulls(len(cur), t.arrow)), cur


def decode_keys(
    keys: pa.Array | pa.ChunkedArray | Ragged,
    types: Sequence[DataType],
    orders: Sequence[OrderType],
    start: np.ndarray | int | None = None,
) -> tuple[list[pa.Array], np.ndarray]:
    """Decode the first len(types) datums of every key, starting at byte offset `start` of each
    key (default 0): (one Arrow column per type, the per-row byte offset after them)."""
    if len(types) != len(orders):
        raise InvalidInput(f"{len(types)} key types but {len(orders)} orders")
    r = keys if isinstance(keys, Ragged) else Ragged.from_arrow(keys)
    base, end = r.offsets[:-1], r.offsets[1:]
    cur = base + (0 if start is None else np.asarray(start, np.int64))
    if len(cur) and bool(((cur < base) | (cur > end)).any()):
        raise DataCorruption("key start offset outside the key")
    data = np.ascontiguousarray(r.data, np.uint8)
    columns = []
    for t, o in zip(types, orders, strict=True):
        col, cur = _decode_datum(data, cur, end, t, tags=datum_tags(o), x=flip_mask(o))
        columns.append(col)
    return columns, cur - base

"""String functions with PostgreSQL semantics, on Arrow's utf8 kernels.

Positions and lengths count characters (code points), comparisons and LIKE work on bytes of
UTF-8 (C collation). When a pattern, length or separator argument is a literal the whole column
is handled by one Arrow kernel; with per-row arguments (rare) the function runs per row in
Python. lower/upper are Unicode-aware (PostgreSQL's C locale would only map ASCII).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import InvalidInput, PiestreamError
from piestream.common.types import INT, VARCHAR, DataType, TypeKind
from piestream.expr.expr import FuncCall
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, constant_arg, per_row

_SUBSTRING_ERROR = "22011"  # substring_error
_INVALID_PARAMETER = "22023"
#: PostgreSQL's largest value (MaxAllocSize, 1 GB); also keeps an Arrow string column below 2 GB
MAX_TEXT_BYTES = (1 << 30) - 1


def _all_constant(call: FuncCall, idx: range | list[int]) -> list[Any] | None:
    vals = [constant_arg(call, i) for i in idx]
    return None if any(v is NOT_CONSTANT for v in vals) else vals


def _null_result(n: int, t: DataType = VARCHAR) -> pa.Array:
    return pa.nulls(n, t.arrow)


def _fallback(call: FuncCall, fn: Callable[..., Any], a: list[pa.Array]) -> pa.Array:
    return per_row(fn, a, call.return_type)


def _all_ascii(x: pa.Array) -> bool:
    return bool(pc.all(pc.string_is_ascii(x)).as_py() in (True, None))


@register("lower")
def _lower(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.ascii_lower(a[0]) if _all_ascii(a[0]) else pc.utf8_lower(a[0])


@register("upper")
def _upper(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.ascii_upper(a[0]) if _all_ascii(a[0]) else pc.utf8_upper(a[0])


@register("char_length")
def _char_length(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    if call.args[0].return_type.kind is TypeKind.BYTEA:
        return pc.binary_length(a[0])
    return pc.utf8_length(a[0])


@register("octet_length")
def _octet_length(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.binary_length(a[0])


def _substr_bounds(start: int, count: int | None) -> tuple[int, int | None]:
    """0-based [begin, end) of SUBSTRING(s FROM start FOR count) (start may be < 1)."""
    if count is not None and count < 0:
        raise InvalidInput("negative substring length not allowed", sqlstate=_SUBSTRING_ERROR)
    begin = max(start - 1, 0)
    if count is None:
        return begin, None
    return begin, max(start - 1 + count, 0)


def _py_substr(s: str, start: int, count: int | None = None) -> str:
    b, e = _substr_bounds(start, count)
    return s[b:e]


@register("substr")
def _substr(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    consts = _all_constant(call, range(1, len(a)))
    if consts is None:
        return _fallback(call, _py_substr, a)
    if any(c is None for c in consts):
        return _null_result(n)
    begin, end = _substr_bounds(consts[0], consts[1] if len(consts) > 1 else None)
    if end is not None and end <= begin:
        return pc.if_else(pc.is_valid(a[0]), "", pa.scalar(None, pa.string()))
    return pc.utf8_slice_codeunits(a[0], start=begin, stop=end if end is not None else 2**62)


def _trim(kind: str) -> Callable[[FuncCall, list[pa.Array], int], pa.Array]:
    kernel = {"both": pc.utf8_trim, "leading": pc.utf8_ltrim, "trailing": pc.utf8_rtrim}[kind]

    def py(s: str, chars: str = " ") -> str:
        return s.strip(chars) if kind == "both" else s.lstrip(chars) if kind == "leading" else s.rstrip(chars)

    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        chars = " " if len(a) == 1 else constant_arg(call, 1)
        if chars is NOT_CONSTANT:
            return _fallback(call, py, a)
        if chars is None:
            return _null_result(n)
        if chars == "":
            return a[0]
        return kernel(a[0], characters=chars)

    return impl


register("btrim")(_trim("both"))
register("ltrim")(_trim("leading"))
register("rtrim")(_trim("trailing"))


@register("concat")
def _concat(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """concat(...) skips NULLs (all NULL gives '')."""
    if not a:
        return pa.array([""] * n, pa.string())
    return pc.binary_join_element_wise(*[x.fill_null("") for x in a], "")


@register("concat_ws")
def _concat_ws(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """concat_ws(sep, ...) skips NULL arguments; a NULL separator gives NULL."""
    rest = a[1:]
    if not rest:
        return pc.if_else(pc.is_valid(a[0]), "", pa.scalar(None, pa.string()))
    s = constant_arg(call, 0)
    if s is NOT_CONSTANT:
        return _fallback(call, lambda sp, *xs: sp.join(x for x in xs if x is not None), a)
    if s is None:
        return _null_result(n)
    # "sep + x" for each non-NULL x, joined, minus the first separator. (Arrow's own
    # null_handling="skip" drops rows whose values are all NULL, so it is not used.)
    parts = [pc.if_else(pc.is_valid(x), pc.binary_join_element_wise(s, x, ""), "") for x in rest]
    return pc.utf8_slice_codeunits(pc.binary_join_element_wise(*parts, ""), start=len(s), stop=2**62)


@register("concat_op")
def _concat_op(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """text || text: NULL if either side is NULL."""
    return pc.binary_join_element_wise(a[0], a[1], "")


def _py_split_part(s: str, delim: str, field: int) -> str:
    if field == 0:
        raise InvalidInput("field position must not be zero", sqlstate=_INVALID_PARAMETER)
    parts = s.split(delim) if delim else [s]
    if s == "":
        return ""
    idx = field - 1 if field > 0 else len(parts) + field
    return parts[idx] if 0 <= idx < len(parts) else ""


@register("split_part")
def _split_part(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    consts = _all_constant(call, [1, 2])
    if consts is None or consts[0] == "":
        return _fallback(call, _py_split_part, a)
    delim, field = consts
    if delim is None or field is None:
        return _null_result(n)
    if field == 0:
        raise InvalidInput("field position must not be zero", sqlstate=_INVALID_PARAMETER)
    from piestream.expr.functions.struct_array import list_element

    parts = pc.split_pattern(a[0], pattern=delim, max_splits=field if field > 0 else None)
    lengths = pc.list_value_length(parts).fill_null(0).to_numpy(zero_copy_only=False)
    index = np.full(n, field - 1) if field > 0 else lengths + field
    got = list_element(parts, index)
    empty_src = pc.equal(a[0], "")
    out = pc.if_else(pc.or_kleene(pc.is_null(got), empty_src), "", got)
    return pc.if_else(pc.is_valid(a[0]), out, pa.scalar(None, pa.string()))


@register("replace")
def _replace(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    consts = _all_constant(call, [1, 2])
    if consts is None:
        return _fallback(call, lambda s, f, t: s.replace(f, t) if f else s, a)
    old, new = consts
    if old is None or new is None:
        return _null_result(n)
    if old == "":
        return a[0]
    return pc.replace_substring(a[0], pattern=old, replacement=new)


def _py_strpos(s: str, sub: str) -> int:
    return s.find(sub) + 1


@register("strpos")
def _strpos(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    sub = constant_arg(call, 1)
    if sub is NOT_CONSTANT or not pc.all(pc.string_is_ascii(a[0])).as_py():
        return _fallback(call, _py_strpos, a)
    if sub is None:
        return _null_result(n, INT)
    if sub == "":
        return pc.if_else(pc.is_valid(a[0]), 1, pa.scalar(None, pa.int32()))
    return pc.add(pc.find_substring(a[0], pattern=sub), 1).cast(pa.int32())


def _py_left(s: str, k: int) -> str:
    return s[:k] if k >= 0 else s[: max(len(s) + k, 0)]


def _py_right(s: str, k: int) -> str:
    if k >= 0:
        return s[max(len(s) - k, 0) :] if k else ""
    return s[min(-k, len(s)) :]


@register("left")
def _left(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    k = constant_arg(call, 1)
    if k is NOT_CONSTANT:
        return _fallback(call, _py_left, a)
    if k is None:
        return _null_result(n)
    if k == 0:
        return pc.if_else(pc.is_valid(a[0]), "", pa.scalar(None, pa.string()))
    return pc.utf8_slice_codeunits(a[0], start=0, stop=k)


@register("right")
def _right(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    k = constant_arg(call, 1)
    if k is NOT_CONSTANT:
        return _fallback(call, _py_right, a)
    if k is None:
        return _null_result(n)
    if k == 0:
        return pc.if_else(pc.is_valid(a[0]), "", pa.scalar(None, pa.string()))
    # right(s, k): the last k characters; right(s, -k): all but the first k -- both start at -k
    return pc.utf8_slice_codeunits(a[0], start=-k, stop=2**62)


@register("reverse")
def _reverse(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return pc.utf8_reverse(a[0])


@register("repeat")
def _repeat(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    counts = pc.max_element_wise(a[1], pa.scalar(0, a[1].type), skip_nulls=False).cast(pa.int64())
    _check_text_bytes(pc.multiply(pc.binary_length(a[0]).cast(pa.int64()), counts))
    return pc.binary_repeat(a[0], counts)


def _check_text_bytes(sizes: pa.Array | pa.ChunkedArray) -> None:
    """Refuse results larger than a PostgreSQL value may be (54000), before building them."""
    total = pc.sum(sizes).as_py() or 0
    if total > MAX_TEXT_BYTES:
        raise PiestreamError("requested length too large", sqlstate="54000")


def _py_pad(s: str, width: int, fill: str = " ", *, left: bool) -> str:
    if width <= 0:
        return ""
    if width * len(fill.encode()) > MAX_TEXT_BYTES:
        raise PiestreamError("requested length too large", sqlstate="54000")
    if len(s) >= width or not fill:
        return s[:width]
    need = width - len(s)
    pad = (fill * (need // len(fill) + 1))[:need]
    return pad + s if left else s + pad


def _pad(left: bool) -> Callable[[FuncCall, list[pa.Array], int], pa.Array]:
    def impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        consts = _all_constant(call, range(1, len(a)))
        fill = consts[1] if consts is not None and len(consts) > 1 else " "
        if consts is None or fill is None or len(fill) != 1 or consts[0] is None or consts[0] <= 0:
            return _fallback(call, lambda s, w, f=" ": _py_pad(s, w, f, left=left), a)
        width = consts[0]
        _check_text_bytes(pa.array([width * 4 * len(a[0])], pa.int64()))  # 4: UTF-8's widest char
        kernel = pc.utf8_lpad if left else pc.utf8_rpad
        return pc.utf8_slice_codeunits(kernel(a[0], width=width, padding=fill), start=0, stop=width)

    return impl


register("lpad")(_pad(True))
register("rpad")(_pad(False))


@register("starts_with")
def _starts_with(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    prefix = constant_arg(call, 1)
    if prefix is NOT_CONSTANT:
        return _fallback(call, lambda s, p: s.startswith(p), a)
    if prefix is None:
        return pa.nulls(n, pa.bool_())
    return pc.starts_with(a[0], pattern=prefix)


def _py_initcap(s: str) -> str:
    """PostgreSQL: upper-case the first letter of each alphanumeric run, lower-case the rest."""
    out = []
    in_word = False
    for ch in s:
        out.append(ch.lower() if in_word else ch.upper())
        in_word = ch.isalnum()
    return "".join(out)


@register("initcap")
def _initcap(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _fallback(call, _py_initcap, a)


@register("md5")
def _md5(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    def md5(v: str | bytes) -> str:
        return hashlib.md5(v.encode() if isinstance(v, str) else v, usedforsecurity=False).hexdigest()

    return _fallback(call, md5, a)


@register("ascii")
def _ascii(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _fallback(call, lambda s: ord(s[0]) if s else 0, a)


def _py_chr(code: int) -> str:
    if code == 0:
        raise PiestreamError("null character not permitted", sqlstate="54000")
    if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise InvalidInput("requested character too large for encoding", sqlstate="54000")
    return chr(code)


@register("chr")
def _chr(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _fallback(call, _py_chr, a)


@register("gen_random_uuid")
def _gen_random_uuid(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """Version-4 UUIDs in their text form, a batch at a time: random bytes with the version and
    variant bits set, hex-encoded at once, the dashes placed by a column index."""
    raw = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16).copy()
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    hexed = np.frombuffer(raw.tobytes().hex().encode(), np.uint8).reshape(n, 32)
    out = np.full((n, 36), ord("-"), np.uint8)
    out[:, _UUID_HEX_COLUMNS] = hexed
    offsets = np.arange(n + 1, dtype=np.int32) * 36
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


#: where the 32 hex digits go in 8-4-4-4-12
_UUID_HEX_COLUMNS = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])

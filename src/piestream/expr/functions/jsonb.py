"""jsonb operators and functions, with PostgreSQL's semantics (jsonfuncs.c, jsonb_op.c).

`->`, `->>`, `#>` and `#>>` with a constant key, index or path are the hot ones (a column of
events read field by field): they run as numpy passes over the column's normalized text
(`jsonb_scan`). The others, and those with a key that varies per row, decode each value with
`jsonb_value` and work on Python values: containment, concatenation and deletion rebuild or walk
whole documents, which no Arrow kernel expresses; `unique_apply` decodes each distinct value once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.common.errors import InvalidInput, PiestreamError
from piestream.common.text import format_datum, jsonb_text, jsonb_value
from piestream.common.types import BOOLEAN, INT, JSONB, VARCHAR, DataType, TypeKind, struct_of
from piestream.expr.expr import FuncCall
from piestream.expr.functions.jsonb_scan import Layout, Slices, union
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, constant_arg, per_row

INVALID_PARAMETER = "22023"
NULL_NOT_ALLOWED = "22004"
_MISSING = object()
_INT_TEXT = re.compile(r"\s*[+-]?\d+\Z")


def invalid(message: str, **kw: Any) -> PiestreamError:
    return InvalidInput(message, sqlstate=INVALID_PARAMETER, **kw)


# -- Python semantics (per value) ----------------------------------------------------------------


def get_key(v: Any, key: str) -> Any:
    return v.get(key, _MISSING) if isinstance(v, dict) else _MISSING


def get_index(v: Any, i: int) -> Any:
    if not isinstance(v, list):
        return _MISSING
    if i < 0:
        i += len(v)
    return v[i] if 0 <= i < len(v) else _MISSING


def element(v: Any, i: int) -> Any:
    """`-> integer`: PostgreSQL reads a scalar as the one-element array its jsonb stores."""
    if not _container(v):
        return v if i in (0, -1) else _MISSING
    return get_index(v, i)


def path_index(step: str) -> int | None:
    """A path element used on an array: an integer as strtol reads it, else None."""
    return int(step) if _INT_TEXT.match(step) else None


def get_path(v: Any, path: Sequence[str | None]) -> Any:
    for step in path:
        if step is None:
            return _MISSING
        if isinstance(v, dict):
            v = v.get(step, _MISSING)
        elif isinstance(v, list):
            i = path_index(step)
            v = _MISSING if i is None else get_index(v, i)
        else:
            return _MISSING
        if v is _MISSING:
            return v
    return v


def as_text(v: Any) -> str | None:
    """`->>`: a string's text, SQL NULL for JSON null, the jsonb text of anything else."""
    if v is None or v is _MISSING:
        return None
    return v if isinstance(v, str) else jsonb_text(v)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _container(v: Any) -> bool:
    return isinstance(v, dict | list)


def _matches(x: Any, b: Any) -> bool:
    """An element (or field value) `x` of the left side matches `b` of the right one."""
    if not _container(b):
        return not _container(x) and _same(x, b)
    return _container(x) and isinstance(x, dict) == isinstance(b, dict) and contains(x, b, top=False)


def contains(a: Any, b: Any, top: bool = True) -> bool:
    """`a @> b`: JsonbDeepContains, a top-level scalar on the right standing for a one-element array."""
    if isinstance(a, dict):
        return isinstance(b, dict) and all(k in a and _matches(a[k], bv) for k, bv in b.items())
    if isinstance(a, list):
        if isinstance(b, dict) or (not top and not isinstance(b, list)):
            return False
        items = b if isinstance(b, list) else [b]
        return all(any(_matches(x, bv) for x in a) for bv in items)
    return not _container(b) and _same(a, b)


def exists(v: Any, key: str) -> bool:
    """`?`: a top-level key, or a string element of a top-level array (or the scalar string)."""
    if isinstance(v, dict):
        return key in v
    if isinstance(v, list):
        return any(isinstance(x, str) and x == key for x in v)
    return isinstance(v, str) and v == key


def concat(a: Any, b: Any) -> Any:
    """`||`: objects merge (right wins); anything else concatenates as arrays."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **b}
    return (a if isinstance(a, list) else [a]) + (b if isinstance(b, list) else [b])


def delete_key(v: Any, key: str) -> Any:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if k != key}
    if isinstance(v, list):
        return [x for x in v if not (isinstance(x, str) and x == key)]
    raise invalid("cannot delete from scalar")


def delete_keys(v: Any, keys: Sequence[str | None]) -> Any:
    if not _container(v):
        raise invalid("cannot delete from scalar")
    for k in keys:
        if k is not None:
            v = delete_key(v, k)
    return v


def delete_index(v: Any, i: int) -> Any:
    if isinstance(v, dict):
        raise invalid("cannot delete from object using integer index")
    if not isinstance(v, list):
        raise invalid("cannot delete from scalar")
    j = i + len(v) if i < 0 else i
    return v if not 0 <= j < len(v) else v[:j] + v[j + 1 :]


def _step_index(step: str, pos: int) -> int:
    i = path_index(step)
    if i is None:
        raise InvalidInput(f'path element at position {pos} is not an integer: "{step}"')
    return i


def _no_null_steps(path: Sequence[str | None]) -> None:
    for pos, step in enumerate(path, 1):
        if step is None:
            raise InvalidInput(f"path element at position {pos} is null", sqlstate=NULL_NOT_ALLOWED)


def delete_path(v: Any, path: Sequence[str | None]) -> Any:
    """`#-`: the value without the element at `path` (unchanged when there is none)."""
    if not _container(v):
        raise invalid("cannot delete path in scalar")
    _no_null_steps(path)
    if not path:
        return v

    def go(x: Any, level: int) -> Any:
        step = path[level]
        assert step is not None
        last = level == len(path) - 1
        if isinstance(x, dict):
            if step not in x:
                return x
            if last:
                return {k: y for k, y in x.items() if k != step}
            return {k: (go(y, level + 1) if k == step else y) for k, y in x.items()}
        if isinstance(x, list):
            i = _step_index(step, level + 1)
            j = i + len(x) if i < 0 else i
            if not 0 <= j < len(x):
                return x
            if last:
                return x[:j] + x[j + 1 :]
            return [*x[:j], go(x[j], level + 1), *x[j + 1 :]]
        return x

    return go(v, 0)


def set_path(v: Any, path: Sequence[str | None], new: Any, create: bool) -> Any:
    """jsonb_set: replace (or, with `create`, add) the element at `path`."""
    if not _container(v):
        raise invalid("cannot set path in scalar")
    _no_null_steps(path)
    if not path:
        return v

    def go(x: Any, level: int) -> Any:
        step = path[level]
        assert step is not None
        last = level == len(path) - 1
        if isinstance(x, dict):
            if step in x:
                return {k: ((new if last else go(y, level + 1)) if k == step else y) for k, y in x.items()}
            return {**x, step: new} if last and create else x
        if isinstance(x, list):
            i = _step_index(step, level + 1)
            j = i + len(x) if i < 0 else i
            if 0 <= j < len(x):
                return [*x[:j], new if last else go(x[j], level + 1), *x[j + 1 :]]
            if last and create:
                return [new, *x] if j < 0 else [*x, new]
            return x
        return x

    return go(v, 0)


def strip_nulls(v: Any) -> Any:
    """jsonb_strip_nulls: object fields whose value is null go, at every depth (array nulls stay)."""
    if isinstance(v, dict):
        return {k: strip_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [strip_nulls(x) for x in v]
    return v


def typeof(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, Decimal):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def array_length(v: Any) -> int:
    if isinstance(v, list):
        return len(v)
    if isinstance(v, dict):
        raise invalid("cannot get array length of a non-array")
    raise invalid("cannot get array length of a scalar")


# -- kernels --------------------------------------------------------------------------------------


def _jsonb_out(v: Any) -> str | None:
    return None if v is _MISSING else jsonb_text(v)


def _map_values(
    call: FuncCall, a: list[pa.Array], fn: Callable[..., Any], out: Callable[[Any], Any], t: DataType
) -> pa.Array:
    """Row by row over decoded jsonb arguments (positions whose SQL type is jsonb are decoded)."""
    decode = [arg.return_type == JSONB for arg in call.args]

    def row(*vals: Any) -> Any:
        return out(fn(*(jsonb_value(v) if d else v for v, d in zip(vals, decode, strict=True))))

    return per_row(row, a, t)


def _path_step(lay: Layout, step: str) -> Slices:
    """A `#>` path element: a key of an object, or an index (if it reads as one) of an array."""
    i = path_index(step)
    return union([lay.key(step)] if i is None else [lay.key(step), lay.index(i)])


#: rows scanned at a time: the scan's temporaries stay a few MB however long the column is
SCAN_ROWS = 65536


def _extract(arr: pa.Array, path: Sequence[str | int], text: bool, *, operator: bool = False) -> pa.Array:
    """`#>` / `#>>` with a constant path, one scan per step; with `operator`, `->` / `->>`'s one
    step (a text key reads objects only, an integer arrays only)."""
    if len(arr) > SCAN_ROWS:
        parts = [
            _extract(arr.slice(i, SCAN_ROWS), path, text, operator=operator)
            for i in range(0, len(arr), SCAN_ROWS)
        ]
        return pa.concat_arrays(parts)
    for level, step in enumerate(path):
        lay = Layout(arr)
        if isinstance(step, int):
            s = lay.index(step, scalars=True)
        else:
            s = lay.key(step) if operator else _path_step(lay, step)
        if level == len(path) - 1:
            return lay.as_text(s) if text else lay.gather(s)
        arr = lay.gather(s)
    if not text:
        return arr
    lay = Layout(arr)
    return lay.as_text(Slices(np.flatnonzero(lay.valid), lay.starts[lay.valid], lay.ends[lay.valid]))


def _access(call: FuncCall, a: list[pa.Array], text: bool) -> pa.Array:
    key = constant_arg(call, 1)
    if key is None:
        return pa.nulls(len(a[0]), pa.string())
    if key is not NOT_CONSTANT:
        return _extract(a[0], [key], text, operator=True)
    getter = element if call.args[1].return_type == INT else get_key
    out = as_text if text else _jsonb_out
    return per_row(lambda j, k: out(getter(jsonb_value(j), k)), [a[0], a[1]], VARCHAR if text else JSONB)


@register("jsonb_access")
def _jsonb_access(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _access(call, a, text=False)


@register("jsonb_access_text")
def _jsonb_access_text(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _access(call, a, text=True)


def _path(call: FuncCall, a: list[pa.Array], text: bool) -> pa.Array:
    path = constant_arg(call, 1)
    if path is None:
        return pa.nulls(len(a[0]), pa.string())
    if path is not NOT_CONSTANT and None not in path:
        return _extract(a[0], list(path), text)
    out = as_text if text else _jsonb_out
    return per_row(lambda j, p: out(get_path(jsonb_value(j), p)), [a[0], a[1]], VARCHAR if text else JSONB)


@register("jsonb_extract_path")
def _jsonb_extract_path(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _path(call, a, text=False)


@register("jsonb_extract_path_text")
def _jsonb_extract_path_text(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _path(call, a, text=True)


def _value_kernel(name: str, fn: Callable[..., Any], t: DataType) -> None:
    out: Callable[[Any], Any] = jsonb_text if t == JSONB else (lambda v: v)
    register(name)(lambda call, a, n: _map_values(call, a, fn, out, t))


_value_kernel("jsonb_contains", contains, BOOLEAN)
_value_kernel("jsonb_contained", lambda a, b: contains(b, a), BOOLEAN)
_value_kernel("jsonb_exists", exists, BOOLEAN)
_value_kernel("jsonb_exists_any", lambda v, ks: any(exists(v, k) for k in ks if k is not None), BOOLEAN)
_value_kernel("jsonb_exists_all", lambda v, ks: all(exists(v, k) for k in ks if k is not None), BOOLEAN)
_value_kernel("jsonb_concat", concat, JSONB)
_value_kernel("jsonb_delete", delete_key, JSONB)
_value_kernel("jsonb_delete_index", delete_index, JSONB)
_value_kernel("jsonb_delete_keys", delete_keys, JSONB)
_value_kernel("jsonb_delete_path", delete_path, JSONB)
_value_kernel("jsonb_strip_nulls", strip_nulls, JSONB)
_value_kernel("jsonb_typeof", typeof, VARCHAR)
_value_kernel("jsonb_array_length", array_length, INT)
_value_kernel("jsonb_set", lambda v, p, new: set_path(v, p, new, True), JSONB)
_value_kernel("jsonb_set_create", set_path, JSONB)


# -- set-returning functions ----------------------------------------------------------------------


def _elements(v: Any) -> list[Any]:
    if isinstance(v, list):
        return v
    raise invalid(f"cannot extract elements from {'an object' if isinstance(v, dict) else 'a scalar'}")


def _object_keys(v: Any) -> list[str]:
    if isinstance(v, dict):
        return list(v)
    raise invalid(f"cannot call jsonb_object_keys on {'an array' if isinstance(v, list) else 'a scalar'}")


def _path_items(v: Any, path: str) -> list[Any]:
    from piestream.expr.functions.jsonpath import parse_path, query

    return query(v, parse_path(path))


def _each(v: Any) -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        return list(v.items())
    raise invalid("cannot call jsonb_each on a non-object")


def _each_text(v: Any) -> list[tuple[str, Any]]:
    if isinstance(v, dict):
        return list(v.items())
    raise invalid("cannot call jsonb_each_text on a non-object")


_SRF_OUT: dict[str, tuple[Callable[..., list[Any]], Callable[[Any], Any], DataType]] = {
    "jsonb_each": (
        _each,
        lambda kv: {"key": kv[0], "value": jsonb_text(kv[1])},
        struct_of(("key", VARCHAR), ("value", JSONB)),
    ),
    "jsonb_each_text": (
        _each_text,
        lambda kv: {"key": kv[0], "value": as_text(kv[1])},
        struct_of(("key", VARCHAR), ("value", VARCHAR)),
    ),
    "jsonb_path_query": (_path_items, jsonb_text, JSONB),
    "jsonb_array_elements": (_elements, jsonb_text, JSONB),
    "jsonb_array_elements_text": (_elements, as_text, VARCHAR),
    "jsonb_object_keys": (_object_keys, lambda k: k, VARCHAR),
}


def expand_jsonb(name: str, docs: pa.Array, *more: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(values of every row, in row order; the number of values of each row) of a jsonb SRF."""
    from piestream.common.scalar import to_arrow

    items, out, t = _SRF_OUT[name]
    values: list[Any] = []
    counts = np.zeros(len(docs), np.int64)
    extra = [m.to_pylist() for m in more]
    for i, d in enumerate(docs.to_pylist()):  # per row: each document is decoded (a JSON parse)
        args = [e[i] for e in extra]
        if d is None or None in args:
            continue
        got = items(jsonb_value(d), *args)
        values += [out(x) for x in got]
        counts[i] = len(got)
    return to_arrow(values, t), counts


# -- building jsonb from SQL values ---------------------------------------------------------------

#: kinds `to_jsonb` converts (and lists of them); others are refused while binding
TO_JSONB_KINDS = frozenset(
    {
        TypeKind.BOOLEAN,
        TypeKind.SMALLINT,
        TypeKind.INT,
        TypeKind.BIGINT,
        TypeKind.NUMERIC,
        TypeKind.REAL,
        TypeKind.DOUBLE,
        TypeKind.VARCHAR,
        TypeKind.JSONB,
    }
)


def json_of(v: Any, t: DataType) -> Any:
    """A SQL datum of type `t` as a jsonb value (PostgreSQL's to_jsonb)."""
    if v is None:
        return None
    k = t.kind
    if k is TypeKind.JSONB:
        return jsonb_value(v)
    if k is TypeKind.LIST:
        assert t.elem is not None
        return [json_of(x, t.elem) for x in v]
    if k is TypeKind.BOOLEAN or k is TypeKind.VARCHAR:
        return v
    if k in (TypeKind.REAL, TypeKind.DOUBLE, TypeKind.NUMERIC):
        text = format_datum(v, t)
        return Decimal(text) if Decimal(text).is_finite() else text  # NaN / Infinity: strings
    return Decimal(int(v))


def _arg_types(call: FuncCall) -> list[DataType]:
    return [a.return_type for a in call.args]


@register("to_jsonb")
def _to_jsonb(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    t = call.args[0].return_type
    return per_row(lambda v: jsonb_text(json_of(v, t)), a, JSONB)


@register("jsonb_build_array")
def _jsonb_build_array(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    types = _arg_types(call)
    if not a:
        return pa.array(["[]"] * n, pa.string())
    return per_row(
        lambda *vs: jsonb_text([json_of(v, t) for v, t in zip(vs, types, strict=True)]),
        a,
        JSONB,
        strict=False,
    )


def _object(*vs: Any, types: Sequence[DataType]) -> str:
    out: dict[str, Any] = {}
    for i in range(0, len(vs), 2):
        if vs[i] is None:
            raise invalid(f"argument {i + 1}: key must not be null")
        out[vs[i]] = json_of(vs[i + 1], types[i + 1])
    return jsonb_text(out)


@register("jsonb_build_object")
def _jsonb_build_object(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    types = _arg_types(call)
    if not a:
        return pa.array(["{}"] * n, pa.string())
    return per_row(lambda *vs: _object(*vs, types=types), a, JSONB, strict=False)


@register("jsonb_object_of_pairs")
def _jsonb_object_of_pairs(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    """jsonb_object_agg's result from array_agg's (key text, value) pairs: later keys win."""
    t = call.args[0].return_type
    assert t.elem is not None
    vt = t.elem.fields[1].data_type

    def build(pairs: list[dict[str, Any]]) -> str:
        out: dict[str, Any] = {}
        for p in pairs:
            k, v = p.values()
            if k is None:
                raise invalid("field name must not be null")
            out[k] = json_of(v, vt)
        return jsonb_text(out)

    return per_row(build, a, JSONB)


@register("jsonb_path_exists")
def _jsonb_path_exists(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return _map_values(call, a, lambda v, p: bool(_path_items(v, p)), lambda x: x, BOOLEAN)


# the SRFs' argument checks: a scalar call under the SRF, so that in streaming a bad document is a
# NULL argument (no rows) with an error record, as any data error, instead of a failed epoch
_SRF_WANTS: dict[str, tuple[bytes, dict[bytes, str]]] = {
    "jsonb_each": (
        b"{",
        {b"[": "cannot call jsonb_each on a non-object", b"": "cannot call jsonb_each on a non-object"},
    ),
    "jsonb_each_text": (
        b"{",
        {
            b"[": "cannot call jsonb_each_text on a non-object",
            b"": "cannot call jsonb_each_text on a non-object",
        },
    ),
    "jsonb_array_elements": (
        b"[",
        {b"{": "cannot extract elements from an object", b"": "cannot extract elements from a scalar"},
    ),
    "jsonb_array_elements_text": (
        b"[",
        {b"{": "cannot extract elements from an object", b"": "cannot extract elements from a scalar"},
    ),
    "jsonb_object_keys": (
        b"{",
        {b"[": "cannot call jsonb_object_keys on an array", b"": "cannot call jsonb_object_keys on a scalar"},
    ),
}


def _srf_check(name: str) -> None:
    want, messages = _SRF_WANTS[name]

    def check(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
        lay = Layout(a[0])
        bad = lay.valid & (lay.first != want[0])
        if bad.any():
            first = bytes([lay.first[np.flatnonzero(bad)[0]]])
            raise invalid(messages.get(first, messages[b""]))
        return a[0]

    register(f"{name}_check")(check)


for _name in _SRF_WANTS:
    _srf_check(_name)
